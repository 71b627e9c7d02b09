"""Pictures of runs: learning curves and throughput as PNGs, and a live notebook plot.

``jaxspreeze plot RUN_DIR [RUN_DIR ...] [--out FILE]``: with one run and no ``--out`` it
(re)writes ``learning_curve.png`` and ``throughput.png`` in the run directory; otherwise
it writes one comparison figure (default ``comparison.png``). Curves come from the
run's ``metrics.jsonl``: eval records (``eval_return`` vs env steps and vs wall time, a
band of ±1 std over seeds when a run has several) and chunk records (training episode
return, env steps/s, update samples/s). matplotlib is imported on use (Agg, no pyplot).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.metrics import Record

LEARNING_CURVE = "learning_curve.png"
THROUGHPUT = "throughput.png"


def load_records(run_dir: str | Path) -> list[Record]:
    """The records of a run's ``metrics.jsonl`` (unreadable lines are skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a jaxspreeze run directory?")
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _series(records: Sequence[Record], kind: str, x: str, y: str):
    """(x, mean, per-seed rows or None) of the records of ``kind`` with a finite ``y``."""
    import numpy as np

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
    import numpy as np

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


def _figure(ncols: int, nrows: int = 1, title: str = ""):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    if title:
        fig.suptitle(title, fontsize=11)
    return fig, axes


def _title(runs: dict[str, Sequence[Record]]) -> str:
    return next(iter(runs)) if len(runs) == 1 else f"{len(runs)} runs"


def learning_curve_figure(runs: dict[str, Sequence[Record]]):
    """Eval return vs env steps and vs wall time, and training episode return vs steps."""
    fig, (a, b, c) = _figure(3, title=_title(runs))
    _panel(a, runs, "eval", "env_steps", "eval_return", "eval return", "env steps", "return")
    _panel(
        b,
        runs,
        "eval",
        "wall_s",
        "eval_return",
        "eval return vs time",
        "wall time since start (s)",
        "return",
    )
    _panel(
        c,
        runs,
        "chunk",
        "env_steps",
        "episode_return",
        "training episode return",
        "env steps",
        "return",
    )
    return fig


def throughput_figure(runs: dict[str, Sequence[Record]]):
    """Env steps/s and update samples/s (per chunk) over wall time."""
    fig, (a, b) = _figure(2, title=_title(runs))
    _panel(
        a,
        runs,
        "chunk",
        "wall_s",
        "env_steps_per_s",
        "sampling",
        "wall time since start (s)",
        "env steps / s",
    )
    _panel(
        b,
        runs,
        "chunk",
        "wall_s",
        "update_samples_per_s",
        "updates",
        "wall time since start (s)",
        "update samples / s",
    )
    return fig


def comparison_figure(runs: dict[str, Sequence[Record]]):
    """One figure comparing runs: eval return vs steps and time, training return, throughput."""
    fig, (a, b, c, d) = _figure(2, 2, title=_title(runs))
    _panel(a, runs, "eval", "env_steps", "eval_return", "eval return", "env steps", "return")
    _panel(
        b,
        runs,
        "eval",
        "wall_s",
        "eval_return",
        "eval return vs time",
        "wall time since start (s)",
        "return",
    )
    _panel(
        c,
        runs,
        "chunk",
        "env_steps",
        "episode_return",
        "training episode return",
        "env steps",
        "return",
    )
    _panel(
        d,
        runs,
        "chunk",
        "wall_s",
        "env_steps_per_s",
        "sampling",
        "wall time since start (s)",
        "env steps / s",
    )
    return fig


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG (Agg) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, format="png")
    return path


def write_run_plots(run_dir: str | Path, records: Sequence[Record] | None = None) -> list[Path]:
    """Write ``learning_curve.png`` and ``throughput.png`` into ``run_dir``."""
    run_dir = Path(run_dir)
    records = load_records(run_dir) if records is None else records
    runs = {run_dir.name: records}
    return [
        save(learning_curve_figure(runs), run_dir / LEARNING_CURVE),
        save(throughput_figure(runs), run_dir / THROUGHPUT),
    ]


def compare_runs(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """One PNG comparing several runs (labels: the run directory names)."""
    runs: dict[str, Sequence[Record]] = {}
    for d in run_dirs:
        name = Path(d).resolve().name
        label = name if name not in runs else f"{name} ({len(runs)})"
        runs[label] = load_records(d)
    return save(comparison_figure(runs), out)


class PlotsSink:
    """Keeps the records and writes the run's PNGs when the run ends (sink ``plots``)."""

    name = "plots"

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.records: list[Record] = []

    def write(self, record: Record) -> None:
        """Keep ``record`` for the end-of-run pictures."""
        self.records.append(record)

    def close(self) -> None:
        """Write ``learning_curve.png`` and ``throughput.png``."""
        if self.records:
            write_run_plots(self.run_dir, self.records)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython already imported and running a kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class NotebookPlotSink:
    """A live learning-curve figure in a notebook cell, redrawn at most every ``every_s``.

    ``train(cfg, sinks=[NotebookPlotSink()])``. Outside a notebook it only keeps the
    records (``figure()`` draws them on demand).
    """

    name = "notebook-plot"

    def __init__(self, every_s: float = 2.0, throughput: bool = False, label: str = "run"):
        self.every_s = every_s
        self.throughput = throughput
        self.label = label
        self.records: list[Record] = []
        self._handle: Any = None
        self._last = -math.inf
        self._live = in_notebook()

    def figure(self):
        """The current figure (learning curves, or throughput when asked for)."""
        runs = {self.label: self.records}
        return throughput_figure(runs) if self.throughput else learning_curve_figure(runs)

    def write(self, record: Record) -> None:
        """Keep ``record``; redraw if the last redraw is older than ``every_s``."""
        self.records.append(record)
        if self._live and time.monotonic() - self._last >= self.every_s:
            self._draw()

    def _draw(self) -> None:
        from IPython.display import Image, display

        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=80)
        image = Image(data=buf.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)
        self._last = time.monotonic()

    def close(self) -> None:
        """Draw the final state."""
        if self._live and self.records:
            self._draw()


def main(argv: Sequence[str]) -> int:
    """``jaxspreeze plot RUN_DIR [RUN_DIR ...] [--out FILE]``."""
    parser = argparse.ArgumentParser(
        prog="jaxspreeze plot",
        description="Learning-curve and throughput PNGs for one run (written into the run "
        "directory) or a comparison of several runs.",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    parser.add_argument(
        "--out",
        default=None,
        help="PNG to write a comparison figure to (default: with one run, learning_curve.png "
        "and throughput.png in the run directory; with several, comparison.png)",
    )
    args = parser.parse_args(list(argv))
    try:
        if args.out is None and len(args.run_dirs) == 1:
            paths = write_run_plots(args.run_dirs[0])
        else:
            paths = [compare_runs(args.run_dirs, args.out or "comparison.png")]
    except FileNotFoundError as e:
        print(f"jaxspreeze: error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


__all__ = [
    "NotebookPlotSink",
    "PlotsSink",
    "compare_runs",
    "learning_curve_figure",
    "load_records",
    "main",
    "throughput_figure",
    "write_run_plots",
]
