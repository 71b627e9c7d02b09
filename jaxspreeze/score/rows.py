"""Time to score's rows and report, without JAX: one side's row, the medians over seeds,
the markdown table and the plot of return against wall time.

A *run* is one side on one row for one seed with one compile cache (cold: a fresh
directory; warm: the same directory again). Its row (:func:`row`) holds the curve of
evaluations, each point ``env_steps``, ``return``, ``command_s`` (seconds from the side's
process start: imports and compilation in) and ``wall_s`` (seconds from the end of
compilation). :func:`summarise` takes the medians over seeds per (row, side, cache);
a seed that never reached the threshold counts as infinitely late, so a median is
finite only when at least half of the seeds reached it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.score import goal as score_goal

Record = dict[str, Any]
CACHES = ("cold", "warm")


def label(side: str, settings: str | None) -> str:
    """A side's name in the report: a peer's with its settings (``rejax (own)``,
    ``rejax (matched)``); jaxspreeze's (its preset) and an older report's as they are."""
    return f"{side} ({settings})" if settings in ("own", "matched") else side


def first_reaching(curve: list[dict[str, Any]], threshold: float) -> dict[str, Any] | None:
    """The first point of ``curve`` whose ``return`` is at least ``threshold`` (or None)."""
    return next((p for p in curve if p["return"] >= threshold), None)


def row(side: str, task: Any, curve: list[dict[str, Any]], **fields: Any) -> Record:
    """One side's row on ``task`` (a :class:`~jaxspreeze.score.tasks.ScoreTask`).

    ``command_to_threshold_s`` is there when the points carry ``command_s`` (the runs of
    ``jaxspreeze score``; ``experiments/time_to_score.py``'s do not).
    """
    hit = first_reaching(curve, task.threshold)
    final = curve[-1]["return"] if curve else math.nan
    final_se = curve[-1].get("return_se") if curve else None
    out = {
        "kind": "time_to_score",
        "side": side,
        "task": task.name,
        "algo": task.algo,
        "env": task.env,
        "preset": task.preset,
        "threshold": task.threshold,
        "reached": hit is not None,
        "env_steps_to_threshold": hit["env_steps"] if hit else None,
        "wall_to_threshold_s": hit.get("wall_s") if hit else None,
        "train_to_threshold_s": hit.get("train_s") if hit else None,
        "final_return": final,
        "final_return_se": final_se,
        "best_return": max((p["return"] for p in curve), default=math.nan),
        "env_steps": curve[-1]["env_steps"] if curve else 0,
        "curve": curve,
        **fields,
    }
    if any("command_s" in p for p in curve):
        out["command_to_threshold_s"] = hit.get("command_s") if hit else None
    return out


def _median(values: Sequence[float | None], unreached: bool = False) -> float | None:
    """The median of ``values``; None counts as +inf when ``unreached`` (a seed that never
    got there), else is left out. None when nothing is left or the median is infinite."""
    vals = (
        [math.inf if v is None else v for v in values]
        if unreached
        else [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    )
    if not vals:
        return None
    m = statistics.median(vals)
    return None if math.isinf(m) else m


def _hit(row: Record) -> dict[str, Any] | None:
    """The run's first evaluation at the threshold when it has both walls, else None."""
    hit = first_reaching(row["curve"], row["threshold"])
    if hit is None or hit.get("command_s") is None or hit.get("wall_s") is None:
        return None
    return hit if hit["env_steps"] > 0 else None


def summarise(runs: Sequence[Record]) -> list[Record]:
    """One line per (row, side, settings): medians over seeds, cold and warm apart.

    Besides the report's columns, per cache, over the runs that reached the threshold:
    ``<cache>_before_s`` (process start to the end of compilation: the command's wall
    minus the wall after compilation at that evaluation) and ``<cache>_s_per_step``
    (seconds per env step after compilation), which :mod:`~jaxspreeze.score.goal`
    splits a gap with.

    ``runs`` are the runs' entries (``task``, ``side``, ``settings`` (an older report's
    have none), ``seed``, ``cache``, ``row`` or ``error``), in any order; lines come in the
    order their (row, side, settings) first appears; a line's ``label`` names the side
    with its settings (:func:`label`), its ``used`` and ``evaluation`` are its first row's
    settings and evaluation protocol.
    """
    groups: dict[tuple[str, str, Any], list[Record]] = {}
    for r in runs:
        groups.setdefault((r["task"], r["side"], r.get("settings")), []).append(r)
    out = []
    for (task, side, kind), rs in groups.items():
        ok = [r for r in rs if r.get("row") is not None and not r["row"].get("error")]
        rows = [r["row"] for r in ok]
        by_cache = {c: [r["row"] for r in ok if r["cache"] == c] for c in CACHES}
        seeds = sorted({r["seed"] for r in rs})
        line: Record = {
            "task": task,
            "side": side,
            "settings": kind,
            "label": label(side, kind),
            "seeds": seeds,
            "runs": len(rs),
            "failed": [
                f"seed {r['seed']} {r['cache']}: {r['error']}" for r in rs if r.get("error")
            ],
            "sources": sorted({r["source"] for r in rs if r.get("source") is not None}),
            "reached": sum(r["reached"] for r in rows),
            "of": len(rows),
            "env_steps_to_threshold": _median(
                [r["env_steps_to_threshold"] for r in rows], unreached=True
            ),
            "wall_to_threshold_s": _median(
                [r["wall_to_threshold_s"] for r in rows], unreached=True
            ),
            "final_return": _median([r["final_return"] for r in rows]),
            "final_return_se": _median([r.get("final_return_se") for r in rows]),
            "best_return": _median([r["best_return"] for r in rows]),
            "env_steps": _median([r["env_steps"] for r in rows]),
        }
        for c in CACHES:
            line[f"{c}_command_to_threshold_s"] = (
                _median([r.get("command_to_threshold_s") for r in by_cache[c]], unreached=True)
                if by_cache[c]
                else None
            )
            line[f"{c}_compile_s"] = _median([r.get("compile_s") for r in by_cache[c]])
            line[f"{c}_runs"] = len(by_cache[c])
            hits = [h for h in (_hit(r) for r in by_cache[c]) if h is not None]
            line[f"{c}_before_s"] = _median([h["command_s"] - h["wall_s"] for h in hits])
            line[f"{c}_s_per_step"] = _median([h["wall_s"] / h["env_steps"] for h in hits])
        if rows:
            first = rows[0]
            line.update(
                env=first["env"],
                algo=first["algo"],
                threshold=first["threshold"],
                notes=first.get("notes", ""),
                used=first.get("settings"),
                evaluation=first.get("evaluation"),
            )
        out.append(line)
    rows_of = {line["task"]: line for line in out if "env" in line}
    for line in out:  # a side whose every run failed: the row's env and threshold
        if "env" not in line and line["task"] in rows_of:
            known = rows_of[line["task"]]
            line.update({k: known[k] for k in ("env", "algo", "threshold")})
    return out


def _fmt(x: Any, spec: str = ",.0f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


COLUMNS = (
    ("row", "the row: algorithm and env"),
    ("side", "jaxspreeze or a peer library"),
    ("runs reached", "runs that reached the threshold, of all: each seed runs cold and warm"),
    ("steps to thr.", "env steps (one seed) at the first evaluation at or above the threshold"),
    (
        "cold: command to thr. s",
        "wall from the side's process start (interpreter, imports, "
        "compilation in) to that evaluation, with a fresh compile cache",
    ),
    ("warm: command to thr. s", "the same, run again on the cache the cold run filled"),
    ("after compile to thr. s", "wall from the end of compilation to that evaluation"),
    ("final", "the last evaluation's mean return (± its standard error, a median over seeds)"),
    ("best", "the best evaluation's mean return"),
    ("env steps", "the env steps the side ran (one seed's): the budget"),
    ("compile s cold / warm", "the side's compile seconds as it reports them"),
)


def _from(line: Record) -> str:
    """`` (run 2)``: where a merged report's line comes from (nothing in a run's own)."""
    return f" (run {', '.join(str(i + 1) for i in line['sources'])})" if line.get("sources") else ""


def markdown(doc: Record) -> str:
    """The report: the command, the machine, the medians' table, skipped sides, notes."""
    lines = ["# Time to score", ""]
    sources = doc.get("sources")
    if sources:
        lines += [f"{doc.get('date', '')}: `{doc.get('command', '')}`, merging the runs:", ""]
    for i, src in enumerate(sources or [doc]):
        lines.append(
            (f"{i + 1}. " if sources else "- ")
            + f"{src.get('date', '')}: `{src.get('command', '')}`"
            + (f" ({src['note']})" if src.get("note") else "")
            + (f" [{src['dir']}]" if src.get("dir") else "")
        )
    if doc.get("replaced"):
        lines += ["", "Replaced by a later run given (which is taken whole, seeds and caches):"]
        lines += [
            f"- {label(r['side'], r.get('settings'))} on {r['task']}: run {r['source'] + 1}'s "
            f"by run {r['by'] + 1}'s"
            for r in doc["replaced"]
        ]
    lines += [
        "",
        f"Machine: {doc.get('hardware', '')}. Scale: {doc.get('scale')}. Seeds: "
        f"{doc.get('seeds')}. Sides and rows interleaved seed by seed (order in the JSON's "
        + (
            "`runs`; a side's `(run N)` is the run above it comes from)." if sources else "`runs`)."
        ),
        "",
        "Medians over seeds; a seed that never reached the threshold counts as never "
        "(a median is shown when at least half reached it).",
        "",
        _settings_line(doc),
        "",
        "| " + " | ".join(c for c, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for s in doc.get("summary", []):
        name = f"{s['task']} ({s.get('env', '')}, thr. {_fmt(s.get('threshold'), 'g')})"
        lines.append(
            f"| {name} | {s.get('label', s['side'])}{_from(s)} | {s['reached']}/{s['of']} | "
            f"{_fmt(s['env_steps_to_threshold'])} | "
            f"{_fmt(s['cold_command_to_threshold_s'], '.1f')} | "
            f"{_fmt(s['warm_command_to_threshold_s'], '.1f')} | "
            f"{_fmt(s['wall_to_threshold_s'], '.1f')} | {_final(s)} | "
            f"{_fmt(s['best_return'], '.1f')} | {_fmt(s['env_steps'])} | "
            f"{_fmt(s['cold_compile_s'], '.0f')} / "
            f"{_fmt(s['warm_compile_s'], '.0f')} |"
        )
    lines += score_goal.markdown(doc.get("summary", []))
    if doc.get("skipped"):
        lines += ["", "Skipped sides:"]
        lines += [f"- {k['side']} on {k['task']}: {k['why']}" for k in doc["skipped"]]
    summary = doc.get("summary", [])
    lines += settings_section(summary)
    failed = [
        f"{s.get('label', s['side'])} on {s['task']}: {f}" for s in summary for f in s["failed"]
    ]
    if failed:
        lines += ["", "Failed runs:", *(f"- {f}" for f in failed)]
    notes = [(s["task"], s.get("label", s["side"]), s["notes"]) for s in summary if s.get("notes")]
    if notes:
        lines += ["", "What differs, per row:"]
        lines += [f"- {t}, {side}: {n}" for t, side, n in notes]
    lines += ["", "Columns:", *(f"- **{c}**: {what}." for c, what in COLUMNS)]
    if doc.get("plots"):
        lines += [
            "",
            "Plots (return against wall from the command's start): "
            + ", ".join(f"[{Path(p).name}]({Path(p).name})" for p in doc["plots"]),
        ]
    return "\n".join(lines) + "\n"


def _final(line: Record) -> str:
    """The final return, ``± s.e.`` where the side reported one."""
    se = line.get("final_return_se")
    return _fmt(line["final_return"], ".1f") + ("" if se is None else f" ± {se:.1f}")


def _settings_line(doc: Record) -> str:
    kinds = doc.get("peer_settings")
    if not kinds:  # an older report: the peers ran the preset
        return (
            "Peers' settings: matched to jaxspreeze's preset (a report from before own settings)."
        )
    said = {
        "own": "their own published settings for the task, scaled to the row's budget only "
        "(`(own)`)",
        "matched": "jaxspreeze's preset, matched as far as each peer allows (`(matched)`)",
    }
    return (
        "Peers' settings: "
        + "; and ".join(said[k] for k in kinds)
        + ". jaxspreeze's side runs each row's preset (not its defaults). Every side of a "
        "row is evaluated alike: the same episodes, deterministic, fresh start states at "
        "every evaluation; `final` is the last evaluation's mean ± its standard error."
    )


def settings_section(summary: Sequence[Record]) -> list[str]:
    """The settings each side ran with and their source, and how it was evaluated."""
    lines: list[str] = []
    for s in summary:
        used, ev = s.get("used"), s.get("evaluation")
        if not used and not ev:
            continue
        head = f"- {s['task']}, {s.get('label', s['side'])}:"
        if used:
            kind = "its documented defaults (no published entry)" if used.get("defaults") else ""
            options = ", ".join(f"{k}={_short(v)}" for k, v in used.get("options", {}).items())
            head += f" settings from {used.get('source', '?')}" + (f", {kind}" if kind else "")
            head += f": {options}." if options else "."
        if ev:
            head += (
                f" Evaluated every {ev.get('every'):,} env steps on {ev.get('episodes')} "
                f"episodes, starts {ev.get('starts')}, by {ev.get('by')}."
            )
        lines.append(head)
    return ["", "Settings and evaluation, per side:", *lines] if lines else []


def _short(v: Any) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def plot(task: str, runs: Sequence[Record], path: str | Path) -> Path | None:
    """Return against wall from the command's start, every side and seed of one row
    (cold caches solid, warm dashed; the threshold dotted); None when nothing to draw."""
    from jaxspreeze.sinks import figures as plots  # matplotlib on use (Agg figures)

    drawn = [r for r in runs if r["task"] == task and r.get("row") and r["row"]["curve"]]
    if not drawn:
        return None
    fig, (ax,) = plots._figure(1, title=task)
    colors: dict[str, Any] = {}
    for r in drawn:
        side = label(r["side"], r.get("settings"))
        color = colors.setdefault(side, f"C{len(colors)}")
        curve = [p for p in r["row"]["curve"] if p.get("command_s") is not None]
        legend = f"{side} ({r['cache']})" if r["seed"] == drawn[0]["seed"] else None
        ax.plot(
            [p["command_s"] for p in curve],
            [p["return"] for p in curve],
            color=color,
            linestyle="-" if r["cache"] == "cold" else "--",
            marker=".",
            label=legend,
        )
    ax.axhline(drawn[0]["row"]["threshold"], color="gray", linestyle=":", label="threshold")
    ax.set_xlabel("wall from the command's start (s)")
    ax.set_ylabel("evaluation return")
    ax.legend(fontsize=8)
    return plots.save(fig, path)
