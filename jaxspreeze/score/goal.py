"""Time to score's goal, per row: jaxspreeze's wall from the command to the threshold
against a reference's, and, where the goal is not met, why (compile, steps or rate).

Two comparisons (imports no JAX):

- a row that a peer also runs: jaxspreeze against the best peer on it (the lowest median
  command-to-threshold wall among the peers whose median reached it); the goal is at most
  :data:`PEER_GOAL` (0.7x);
- a row whose task names ``versus`` rows (the fast recipes: FastTD3/FastSAC against
  SAC/TD3 with their defaults on the same env; PQN against PPO on a MinAtar game):
  jaxspreeze on this row against the best of jaxspreeze on those rows; the goal is below
  :data:`VERSUS_GOAL` (1x). A row that has both (PQN's MinAtar rows: rejax beside it,
  PPO's row to beat) gets both verdicts; the versus one has no peers' settings.

Cold and warm compile caches are judged apart, and so are the peers' own settings and
their settings matched to the preset (``--peer-settings both``: two verdicts per cache). The gap between the two medians is split
into three terms (seconds) from the medians over the runs that reached the threshold,
each run's wall ``command = before + steps * rate`` (``before``: process start to the end
of compilation; ``rate``: seconds per env step after it):

- ``compile`` = before - before_ref,
- ``steps`` = (steps - steps_ref) * rate_ref,
- ``rate`` = steps * (rate - rate_ref);

the largest is the why. A side that does not reach the threshold at the median is behind
on steps (it needs more than the budget gives it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxspreeze.score import tasks as score_tasks

Record = dict[str, Any]
PEER_GOAL = 0.7
VERSUS_GOAL = 1.0
SIDE = "jaxspreeze"
CACHES = ("cold", "warm")
TERMS = ("compile", "steps", "rate")


def _line(summary: Sequence[Record], task: str, side: str) -> Record | None:
    return next((s for s in summary if s["task"] == task and s["side"] == side), None)


def _wall(line: Record | None, cache: str) -> float | None:
    return None if line is None else line.get(f"{cache}_command_to_threshold_s")


def references(summary: Sequence[Record], task: str) -> tuple[list[Record], float]:
    """The lines ``task``'s jaxspreeze side is judged against, and the goal's ratio:
    its peers' sides on the same row (0.7), else jaxspreeze on its ``versus`` rows (1.0)."""
    peers = [s for s in summary if s["task"] == task and s["side"] != SIDE]
    if peers:
        return peers, PEER_GOAL
    return versus(summary, task), VERSUS_GOAL


def versus(summary: Sequence[Record], task: str) -> list[Record]:
    """jaxspreeze's lines on the rows ``task`` names to beat (those the summary has)."""
    row = score_tasks.ROWS.get(task)
    lines = [_line(summary, v, SIDE) for v in (row.versus if row else ())]
    return [s for s in lines if s is not None]


def split(mine: Record, ref: Record, cache: str) -> dict[str, float] | None:
    """The gap between two reaching lines' walls as compile, steps and rate seconds
    (None when a term's inputs are missing, e.g. a side that reports no compile end)."""
    keys = (f"{cache}_before_s", "env_steps_to_threshold", f"{cache}_s_per_step")
    (b, n, r), (b0, n0, r0) = ([x.get(k) for k in keys] for x in (mine, ref))
    if None in (b, n, r, b0, n0, r0):
        return None
    return {"compile": b - b0, "steps": (n - n0) * r0, "rate": n * (r - r0)}


def judge(summary: Sequence[Record]) -> list[Record]:
    """One verdict per (row, cache, peers' settings) where jaxspreeze's side has a
    reference and ran that cache: ``task``, ``cache``, ``peer_settings`` (``own``,
    ``matched``, or None: a fast recipe's rows, an older report), ``wall_s``,
    ``reference`` (``side`` or ``side on row``), ``reference_s``, ``ratio``, ``goal``,
    ``met``, ``verdict`` (words), ``why`` (a term of :data:`TERMS` or None) and ``terms``
    (seconds, or None)."""
    out = []
    for mine in (s for s in summary if s["side"] == SIDE):
        refs, goal = references(summary, mine["task"])
        kinds = list(dict.fromkeys(s.get("settings") for s in refs if s["side"] != SIDE))
        columns = [
            ([s for s in refs if s["side"] == SIDE or s.get("settings") == kind], goal, kind)
            for kind in kinds or [None]
        ]
        if goal == PEER_GOAL:  # a row with peers may name rows to beat as well
            columns.append((versus(summary, mine["task"]), VERSUS_GOAL, None))
        for column, ratio, kind in columns:
            for cache in CACHES:
                ran = [s for s in column if s.get(f"{cache}_runs")]
                if not ran or not mine.get(f"{cache}_runs"):
                    continue
                out.append(_verdict(mine, ran, cache, ratio) | {"peer_settings": kind})
    return out


def _name(ref: Record, task: str) -> str:
    side = ref.get("label", ref["side"])
    return side if ref["task"] == task else f"{side} on {ref['task']}"


def _verdict(mine: Record, refs: list[Record], cache: str, goal: float) -> Record:
    task = mine["task"]
    reaching = [s for s in refs if _wall(s, cache) is not None]
    best = min(reaching, key=lambda s: _wall(s, cache)) if reaching else None
    wall, ref_wall = _wall(mine, cache), _wall(best, cache)
    v: Record = {
        "task": task,
        "cache": cache,
        "wall_s": wall,
        "reference": _name(best, task) if best else ", ".join(_name(s, task) for s in refs),
        "reference_s": ref_wall,
        "ratio": None,
        "goal": goal,
        "met": False,
        "why": None,
        "terms": None,
    }
    if wall is None and ref_wall is None:
        return v | {"verdict": "neither reaches the threshold (median)"}
    if wall is None:
        return v | {
            "verdict": "not met: the reference reaches it, jaxspreeze does not",
            "why": "steps",
        }
    if ref_wall is None:
        return v | {"met": True, "verdict": "met: jaxspreeze reaches it, the reference does not"}
    ratio = wall / ref_wall
    met = ratio <= goal if goal < 1 else ratio < goal
    v |= {"ratio": ratio, "met": met, "terms": split(mine, best, cache)}
    if met:
        return v | {"verdict": "met"}
    why = max(v["terms"], key=v["terms"].get) if v["terms"] else None
    return v | {"why": why, "verdict": f"not met: {why or 'see the walls'}"}


def markdown(summary: Sequence[Record]) -> list[str]:
    """The report's section (no lines when no row has a reference)."""
    verdicts = judge(summary)
    if not verdicts:
        return []
    lines = [
        "",
        "## Against the goal",
        "",
        f"jaxspreeze's median wall from the command to the threshold over the reference's: "
        f"the best peer on the row (goal: at most {PEER_GOAL}x) and, for a row that names "
        f"rows to beat (the fast recipes; PQN against PPO on MinAtar), the best of "
        f"jaxspreeze on those rows (goal: below {VERSUS_GOAL:g}x). Where it is not met, the gap in seconds split into "
        "compile (process start to the end of compilation), steps (more env steps to the "
        "threshold, at the reference's rate) and rate (slower per env step after "
        "compilation); the largest is the why.",
        "",
        "| row | cache | peers' settings | jaxspreeze s | reference | reference s | ratio | "
        "goal | verdict | compile / steps / rate s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        terms = " / ".join(f"{v['terms'][t]:+.1f}" for t in TERMS) if v["terms"] else "-"
        lines.append(
            f"| {v['task']} | {v['cache']} | {v.get('peer_settings') or '-'} | "
            f"{_fmt(v['wall_s'])} | {v['reference']} | "
            f"{_fmt(v['reference_s'])} | {_fmt(v['ratio'], '.2f')} | {v['goal']:g}x | "
            f"{v['verdict']} | {terms} |"
        )
    return lines


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)
