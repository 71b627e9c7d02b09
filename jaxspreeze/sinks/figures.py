"""Pictures of runs: learning curves and throughput as matplotlib figures and PNGs.

Curves come from a run's ``metrics.jsonl``: eval records (``eval_return`` vs env steps
and vs wall time, a band of ±1 std over seeds when a run has several) and chunk records
(training episode return, env steps/s, update samples/s). :func:`write_run_plots` writes
a run's ``learning_curve.png`` and ``throughput.png`` (a population's ``members.png``, a
PBT run's ``lineage.png``); :func:`compare_runs` one figure
comparing several runs. matplotlib is imported on use (Agg figures, no pyplot). The
sinks that draw these while a run trains are in :mod:`jaxspreeze.sinks.plots`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxspreeze.core.types import Record
from jaxspreeze.setup import population

LEARNING_CURVE = "learning_curve.png"
THROUGHPUT = "throughput.png"


def line_record(line: str) -> Record | None:
    """The record on one line of ``metrics.jsonl``: its JSON object, or None where the line
    holds none (e.g. cut short by a crash)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def load_records(run_dir: str | Path) -> list[Record]:
    """The records of a run's ``metrics.jsonl``.

    A line that is not a record (e.g. cut short by a crash) is skipped; a file with lines
    but no record at all raises ValueError naming it (it is not a metrics file), and so
    does a file without any line (nothing to draw yet).
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a jaxspreeze run directory?")
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a metrics file (not text)") from None
    records = [r for r in map(line_record, lines) if r is not None and _finite(r.get("env_steps"))]
    if not lines:
        raise ValueError(f"{path} holds no records yet: nothing to plot")
    if not records:
        raise ValueError(
            f"{path} holds no metrics records ({len(lines)} line(s), none a JSON record with "
            "env_steps): is it a jaxspreeze metrics file?"
        )
    return records


def _series(records: Sequence[Record], kind: str, x: str, y: str):
    """(x, mean, per-seed rows or None) of the records of ``kind`` with a finite ``y``."""
    xs, means, seeds = [], [], []
    for r in records:
        if r.get("kind", "chunk") != kind or not _finite(r.get(y)) or not _finite(r.get(x)):
            continue
        xs.append(r[x])
        means.append(r[y])
        per = r.get(f"{y}_per_seed")
        seeds.append([math.nan if v is None else v for v in per] if per else None)
    order = np.argsort(np.asarray(xs, float), kind="stable")
    xs_a = np.asarray(xs, float)[order]
    mean_a = np.asarray(means, float)[order]
    rows = [seeds[i] for i in order]
    per_seed = None
    if rows and all(r is not None and len(r) == len(rows[0]) for r in rows) and len(rows[0]) > 1:
        per_seed = np.asarray(rows, float)
    return xs_a, mean_a, per_seed


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _curve(ax, records, kind: str, x: str, y: str, label: str, color) -> bool:
    """Plot one run's ``y`` vs ``x``; a band of ±1 std over seeds. False if no data."""
    xs, mean, per_seed = _series(records, kind, x, y)
    if len(xs) == 0:
        return False
    marker = "o" if len(xs) < 30 else None
    if per_seed is not None:
        with np.errstate(invalid="ignore"):
            mu, sd = np.nanmean(per_seed, 1), np.nanstd(per_seed, 1)
        ax.plot(
            xs, mu, color=color, marker=marker, ms=3, label=f"{label} ({per_seed.shape[1]} seeds)"
        )
        ax.fill_between(xs, mu - sd, mu + sd, color=color, alpha=0.2, lw=0)
    else:
        ax.plot(xs, mean, color=color, marker=marker, ms=3, label=label)
    return True


def _panel(ax, runs, kind, x, y, title, xlabel, ylabel, log=False) -> None:
    colors = [f"C{i % 10}" for i in range(len(runs))]
    any_data = False
    for (label, records), color in zip(runs.items(), colors, strict=True):
        any_data |= _curve(ax, records, kind, x, y, label, color)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if log and any_data:
        ax.set_yscale("log")
    if not any_data:
        ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes)
    elif len(runs) > 1 or any(_has_seeds(r) for r in runs.values()):
        ax.legend(fontsize=8)


def _has_seeds(records: Sequence[Record]) -> bool:
    return any("eval_return_per_seed" in r or "episode_return_per_seed" in r for r in records)


def prepare() -> None:
    """Import what drawing a figure and writing its PNG need (matplotlib's figure and Agg:
    about 0.5 s), ahead of the first figure."""
    import matplotlib.figure  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401


def _figure(ncols: int, nrows: int = 1, title: str = ""):
    # heavy dependency (about 0.5 s): imported when the first figure is drawn
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    if title:
        fig.suptitle(title, fontsize=11)
    return fig, axes


def _title(runs: dict[str, Sequence[Record]]) -> str:
    return next(iter(runs)) if len(runs) == 1 else f"{len(runs)} runs"


# A panel: (record kind, x field, y field, title, x label, y label).
_TIME = "wall time since start (s)"
EVAL_VS_STEPS = ("eval", "env_steps", "eval_return", "eval return", "env steps", "return")
EVAL_VS_TIME = ("eval", "wall_s", "eval_return", "eval return vs time", _TIME, "return")
TRAIN_RETURN = (
    "chunk",
    "env_steps",
    "episode_return",
    "training episode return",
    "env steps",
    "return",
)
SAMPLING = ("chunk", "wall_s", "env_steps_per_s", "sampling", _TIME, "env steps / s")
UPDATES = ("chunk", "wall_s", "update_samples_per_s", "updates", _TIME, "update samples / s")


def _panels(runs: dict[str, Sequence[Record]], panels: Sequence[tuple], nrows: int = 1):
    """A figure of ``panels`` (each one of the tuples above) in ``nrows`` rows."""
    fig, axes = _figure(len(panels) // nrows, nrows, title=_title(runs))
    for ax, panel in zip(axes, panels, strict=True):
        _panel(ax, runs, *panel)
    return fig


def learning_curve_figure(runs: dict[str, Sequence[Record]]):
    """Eval return vs env steps and vs wall time, and training episode return vs steps."""
    return _panels(runs, (EVAL_VS_STEPS, EVAL_VS_TIME, TRAIN_RETURN))


def throughput_figure(runs: dict[str, Sequence[Record]]):
    """Env steps/s and update samples/s (per chunk) over wall time."""
    return _panels(runs, (SAMPLING, UPDATES))


def comparison_figure(runs: dict[str, Sequence[Record]]):
    """One figure comparing runs: eval return vs steps and time, training return, throughput."""
    return _panels(runs, (EVAL_VS_STEPS, EVAL_VS_TIME, TRAIN_RETURN, SAMPLING), nrows=2)


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (Agg) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, format="png")
    return path


def write_run_plots(run_dir: str | Path, records: Sequence[Record] | None = None) -> list[Path]:
    """Write ``learning_curve.png`` and ``throughput.png`` into ``run_dir`` (and a
    population's ``members.png``: :func:`members_figure`; a PBT run's ``lineage.png``, from
    its ``pbt.jsonl`` and ``config.json``: :func:`lineage_figure`)."""
    run_dir = Path(run_dir)
    records = load_records(run_dir) if records is None else records
    runs = {run_dir.name: records}
    written = [
        save(learning_curve_figure(runs), run_dir / LEARNING_CURVE),
        save(throughput_figure(runs), run_dir / THROUGHPUT),
    ]
    initial = _population(run_dir)
    if any(r.get("eval_return_per_member") for r in records):
        fig = members_figure(records, title=run_dir.name, values=initial)
        written.append(save(fig, run_dir / MEMBERS))
    if initial and (run_dir / population.LINEAGE).exists():  # a PBT run
        events = population.read_lineage(run_dir)
        end = max([_steps_of(r) for r in records] + [e["env_steps"] for e in events] + [0])
        fig = lineage_figure(initial, events, end, title=run_dir.name)
        written.append(save(fig, run_dir / LINEAGE_PNG))
    return written


def _steps_of(record: Record) -> float:
    steps = record.get("env_steps")
    return float(steps) if _finite(steps) else 0.0


def _population(run_dir: Path) -> list[dict[str, float]]:
    """The members' first values from the run's ``config.json`` (none for a plain run)."""
    try:
        saved = json.loads((run_dir / "config.json").read_text())
        return population.decode(saved.get("population") or ())
    except (OSError, ValueError):
        return []


MEMBERS = "members.png"


NAMED_MEMBERS = 10  # up to this many members each get a colour and a legend entry


def members_figure(
    records: Sequence[Record],
    best: int | None = None,
    title: str = "",
    values: Sequence[dict[str, float]] = (),
):
    """A population's eval return per member vs env steps (``eval_return_per_member``: the
    mean over the member's seeds), the best member (by default the one with the highest
    last return) drawn thick, in front. The legend names each member (up to
    :data:`NAMED_MEMBERS`; more are grey, counted) with its first ``values`` (the
    population of ``config.json``), if given."""
    rows = [
        (r["env_steps"], r["eval_return_per_member"])
        for r in records
        if r.get("kind") == "eval" and r.get("eval_return_per_member")
    ]
    fig, (ax,) = _figure(1, title=title)
    if not rows:
        ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes)
        return fig
    rows.sort(key=lambda row: row[0])
    xs = np.asarray([x for x, _ in rows], float)
    ys = np.asarray([[math.nan if v is None else v for v in y] for _, y in rows], float)
    if best is None:
        best = int(np.nanargmax(ys[-1])) if np.isfinite(ys[-1]).any() else 0
    n = ys.shape[1]

    def label(m: int) -> str:
        own = values[m] if m < len(values) else {}
        shown = ", ".join(f"{k}={v:.3g}" for k, v in list(own.items())[:3])
        return f"member {m}" + (f" ({shown})" if shown else "")

    named = n <= NAMED_MEMBERS
    for m in range(n):
        if m == best:
            continue
        if named:
            ax.plot(xs, ys[:, m], color=f"C{m % 10}", lw=1, alpha=0.8, label=label(m))
        else:
            others = f"the other {n - 1} members" if m == (1 if best == 0 else 0) else None
            ax.plot(xs, ys[:, m], color="0.6", lw=1, alpha=0.8, label=others)
    ax.plot(xs, ys[:, best], color="k" if named else "C3", lw=2.5, marker="o", ms=3,
            label=f"best: {label(best)}")  # fmt: skip
    ax.set_title(f"eval return of {n} members", fontsize=10)
    ax.set_xlabel("env steps (per seed)")
    ax.set_ylabel("return (mean over a member's seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


LINEAGE_PNG = "lineage.png"
_LABELLED = 40  # at most this many copies have their new value written beside them


def lineage_segments(
    initial: Sequence[dict[str, float]], events: Sequence[Record], end: float
) -> list[list[tuple[float, float, dict[str, float]]]]:
    """Per member, its ``(from, to, values)`` spans over env steps: the first values from 0,
    then each copy's new values from the copy's step, up to ``end``."""
    spans: list[list[tuple[float, float, dict[str, float]]]] = []
    for m, values in enumerate(initial):
        changes = sorted((e["env_steps"], e["new"]) for e in events if e["member"] == m)
        starts = [(0.0, dict(values)), *((float(t), dict(v)) for t, v in changes)]
        ends = [t for t, _ in starts[1:]] + [max(float(end), starts[-1][0])]
        spans.append([(a, b, v) for (a, v), b in zip(starts, ends, strict=True)])
    return spans


def lineage_figure(
    initial: Sequence[dict[str, float]], events: Sequence[Record], end: float, title: str = ""
):
    """A PBT run's lineage: one row per member over env steps, one panel per member field
    (up to four), each row coloured by the member's value of that field; at every copy an
    arrow from the copied member's row to the replaced member's, with its new value."""
    from matplotlib import colors
    from matplotlib.collections import LineCollection

    names = list(initial[0])[:4] if initial and initial[0] else []
    spans = lineage_segments(initial, events, end)
    n = len(initial)
    height = min(max(2.2, 0.22 * n + 1.2), 7.0)
    fig, axes = _figure(1, max(len(names), 1), title=title)
    fig.set_size_inches(9.0, height * max(len(names), 1))
    if not names:
        axes[0].text(0.5, 0.5, "no member values", ha="center", va="center",
                     transform=axes[0].transAxes)  # fmt: skip
        return fig
    for ax, name in zip(axes, names, strict=True):
        values = [v[name] for rows in spans for _, _, v in rows]
        lo, hi = min(values), max(values)
        log = lo > 0 and hi / lo > 3
        norm = colors.LogNorm(lo, hi) if log else colors.Normalize(lo, hi if hi > lo else lo + 1)
        lines = [[(a, m), (b, m)] for m, rows in enumerate(spans) for a, b, _ in rows]
        shades = [v[name] for rows in spans for _, _, v in rows]
        width = max(1.5, min(8.0, 160 / max(n, 1)))
        bars = LineCollection(lines, cmap="viridis", norm=norm, linewidths=width)
        bars.set_array(np.asarray(shades, float))
        ax.add_collection(bars)
        few = len(events) <= _LABELLED  # many copies: thin straight arrows, no labels
        arrow = {"arrowstyle": "-|>", "color": "C3", "lw": 1.2 if few else 0.6,
                 "alpha": 1.0 if few else 0.6, "shrinkA": 2, "shrinkB": 2,
                 "connectionstyle": f"arc3,rad={0.25 if few else 0}"}  # fmt: skip
        for e, t in zip(events, _spread(events), strict=True):
            src, dst = e["copied"], e["member"]
            drawn = ax.annotate("", xy=(t, dst), xytext=(t, src), arrowprops=arrow)
            drawn.arrow_patch.set_clip_box(ax.bbox)  # an arc at the last step stays inside
            if few:
                ax.annotate(f"{e['new'][name]:.3g}", (t, dst), xytext=(3, 3),
                            textcoords="offset points", fontsize=7, color="C3")  # fmt: skip
        fig.colorbar(bars, ax=ax, label=name, pad=0.01)
        ax.set_xlim(0, max(float(end), 1.0) * 1.02)
        ax.set_ylim(n - 0.5, -0.5)
        ticks = range(n) if n <= 32 else range(0, n, max(1, n // 16))
        ax.set_yticks(list(ticks), [f"member {m}" for m in ticks], fontsize=7 if n > 12 else 8)
        ax.set_title(f"{name} of {n} members; arrows: {len(events)} copies "
                     "(copied member -> replaced member, its new value)", fontsize=9)  # fmt: skip
        ax.set_xlabel("env steps (per seed)")
        ax.grid(axis="x", alpha=0.3)
    return fig


def _spread(events: Sequence[Record]) -> list[float]:
    """Where to draw each copy's arrow: at its step, the copies of one step spread over a
    third of the gap between steps around it (so that they do not hide each other)."""
    steps = sorted({float(e["env_steps"]) for e in events})
    gap = min(np.diff(steps), default=steps[0] if steps else 1.0) or 1.0
    at: list[float] = []
    for e in events:
        t = float(e["env_steps"])
        same = [i for i, f in enumerate(events) if float(f["env_steps"]) == t]
        k, j = len(same), same.index(len(at))
        at.append(t + (gap / 3) * ((j + 0.5) / k - 0.5) if k > 1 else t)
    return at


def compare_runs(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """One PNG comparing several runs (labels: the run directory names)."""
    runs: dict[str, Sequence[Record]] = {}
    for d in run_dirs:
        name = Path(d).resolve().name
        label = name if name not in runs else f"{name} ({len(runs)})"
        runs[label] = load_records(d)
    return save(comparison_figure(runs), out)


__all__ = [
    "LEARNING_CURVE",
    "LINEAGE_PNG",
    "MEMBERS",
    "THROUGHPUT",
    "compare_runs",
    "comparison_figure",
    "learning_curve_figure",
    "lineage_figure",
    "lineage_segments",
    "load_records",
    "members_figure",
    "save",
    "throughput_figure",
    "write_run_plots",
]
