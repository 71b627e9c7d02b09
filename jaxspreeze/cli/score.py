"""``jaxspreeze score``: time to a return threshold, jaxspreeze beside the peers that run
each row (brax's trainers, rejax, SBX), seeds interleaved, each side in its own process."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import at_least_one, fail

DESCRIPTION = (
    "Time to score: for each row (an env, an algorithm, a preset and a return threshold) "
    "train jaxspreeze and every peer that runs it (brax's trainers on brax and Playground "
    "rows, rejax on gymnax rows, SBX on gymnasium rows; peers: pip install "
    "'jaxspreeze[peers]'), each seed and side in its own process, with a fresh (cold) "
    "compile cache and again on it (warm). Peers run their own published settings for the "
    "task (--peer-settings own), jaxspreeze's preset (matched) or both; every side of a row "
    "is evaluated alike. Writes score.json, score.md and a plot per row."
)

FLAGS = (tyro.conf.FlagCreatePairsOff,)  # a bool option is one flag (no --no- pair)


@dataclass
class ScoreArgs:
    """The options of ``jaxspreeze score``."""

    rows: Annotated[tuple[str, ...], tyro.conf.arg(metavar="ROW [ROW ...]")] = ()
    """Rows whose name holds any of these (a whole name: that row only); all by default."""
    list_rows: Annotated[bool, tyro.conf.arg(name="list")] = False
    """List the rows with their sides (and which are not installed) and exit."""
    seeds: int = 3
    """Seeds per row and side (0, 1, ...)."""
    sides: tuple[str, ...] = ()
    """Sides to run (default: jaxspreeze and every peer that runs a row)."""
    out: Annotated[str, tyro.conf.arg(metavar="DIR")] = "score"
    """Folder for score.json, score.md and <row>.png."""
    scale: Literal["cpu", "gpu"] = "cpu"
    """Budgets and sizes: the presets' CPU ones, or GPU ones (16x envs and budget)."""
    no_warm: bool = False
    """Cold compile caches only (skip the second, warm run of each side and seed)."""
    total_steps: int | None = None
    """Every side's env-step budget instead of the row's (a quick, reduced run)."""
    run_timeout_s: float | None = None
    """Stop a side's run after this many seconds (reported as failed)."""
    peer_settings: str = "own"
    """The peers' settings: own (each peer's published settings for the task, scaled to
    the row's budget), matched (the row's jaxspreeze preset) or both (two columns)."""
    note: str = ""
    """A note for the report (e.g. 'CPU shared')."""
    merge: Annotated[tuple[str, ...], tyro.conf.arg(metavar="DIR [DIR ...]")] = ()
    """Run nothing: merge earlier runs' folders into one report (a row's side: the last's)."""


# the options of a run, which --merge refuses (by their flags)
RUN_OPTIONS = {
    "rows": "--rows",
    "list_rows": "--list",
    "seeds": "--seeds",
    "sides": "--sides",
    "scale": "--scale",
    "no_warm": "--no-warm",
    "total_steps": "--total-steps",
    "run_timeout_s": "--run-timeout-s",
    "peer_settings": "--peer-settings",
}


def main(argv: Sequence[str]) -> int:
    """Run the selected rows; returns the exit code (1 if a run failed)."""
    args = parse(ScoreArgs, argv, "jaxspreeze score", markers=FLAGS, description=DESCRIPTION)
    if code := at_least_one(seeds=args.seeds, total_steps=args.total_steps):
        return code
    from jaxspreeze.score import runs as score_run

    out = None if args.list_rows else Path(args.out)
    if bad := score_run.check_options(out, args.run_timeout_s, args.peer_settings):
        return fail(f"{bad[0]}: {bad[1]}")
    if args.merge:
        return _merge(args, argv)
    from jaxspreeze.score import tasks as score_tasks

    tasks = score_tasks.select(args.rows)
    if not tasks:
        return fail(
            f"--rows: no row matches {' '.join(args.rows)!r} (see `jaxspreeze score --list`)"
        )
    try:
        active, skipped = score_run.plan_sides(tasks, args.sides)
    except ValueError as e:
        return fail(f"--sides: {e}")
    if args.list_rows:
        for t in tasks:
            off = [f"{k['side']} (not installed)" for k in skipped if k["task"] == t.name]
            print(
                f"{t.name:28s} {t.env:28s} threshold {t.threshold:<7g} sides: "
                + ", ".join(active[t.name] + off)
            )
        return 0
    if bad := score_run.make_out(Path(args.out)):
        return fail(f"{bad[0]}: {bad[1]}")
    doc = score_run.run(
        tasks,
        sides=args.sides or None,
        seeds=args.seeds,
        caches=("cold",) if args.no_warm else ("cold", "warm"),
        scale=args.scale,
        out=Path(args.out),
        command=shlex.join(["jaxspreeze", "score", *argv]),
        total_steps=args.total_steps,
        note=args.note,
        timeout_s=args.run_timeout_s,
        peer_settings=args.peer_settings,
    )
    print()
    print((Path(args.out) / "score.md").read_text().split("\nColumns:")[0])
    print(f"wrote {args.out}/score.json, score.md and {len(doc['plots'])} plot(s)")
    return 1 if any(r.get("error") for r in doc["runs"]) else 0


def _merge(args: ScoreArgs, argv: Sequence[str]) -> int:
    """``--merge DIR ...``: one report from earlier runs (refuses the options of a run)."""
    defaults = ScoreArgs()
    given = [f for n, f in RUN_OPTIONS.items() if getattr(args, n) != getattr(defaults, n)]
    if given:
        return fail(f"--merge runs nothing: leave out {given[0]} (it takes --out and --note)")
    from jaxspreeze.score import merge as score_merge
    from jaxspreeze.score import runs as score_run

    out = Path(args.out)
    if out.resolve() in {Path(d).resolve() for d in args.merge}:
        return fail(f"--out: {out} is one of the merged folders; give a new folder")
    try:
        doc = score_merge.merge(
            [Path(d) for d in args.merge], shlex.join(["jaxspreeze", "score", *argv]), args.note
        )
    except ValueError as e:
        return fail(f"--merge: {e}")
    if bad := score_run.make_out(out):
        return fail(f"{bad[0]}: {bad[1]}")
    score_merge.write(doc, out)
    print((out / "score.md").read_text().split("\nColumns:")[0])
    print(f"wrote {out}/score.json, score.md and {len(doc['plots'])} plot(s)")
    return 0
