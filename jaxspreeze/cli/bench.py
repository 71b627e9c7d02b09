"""``jaxspreeze bench [--full] [--out DIR]``: measure, print a table, write bench.json/md."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import at_least_one

# the benchmarks (and JAX) are imported in main, after parsing: the early check
# (cli/fastcheck.py) reads BenchArgs without them

DESCRIPTION = (
    "Measure jaxspreeze's throughput (sampling, update step, training chunk; with --full also "
    "brax's trainers and time to a return threshold) side by side with bare references in "
    "this process; print a table and write bench.json and bench.md."
)

FLAGS = (tyro.conf.FlagCreatePairsOff,)  # a bool option is one flag (no --no- pair)


@dataclass
class BenchArgs:
    """The options of ``jaxspreeze bench``."""

    full: bool = False
    """The full selection (default: quick)."""
    out: Annotated[str, tyro.conf.arg(metavar="DIR")] = "bench"
    """Folder for bench.json and bench.md."""
    scale: Literal["cpu", "gpu"] | None = None
    """Case sizes (default: from the JAX backend)."""
    rounds: int | None = None
    """Timed calls per case (default 3 quick, 5 full)."""
    warmup: int = 1
    """Untimed calls before timing."""
    only: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """Run cases whose id contains this (repeatable: --only a --only b); a suite row of
    the full selection named so runs without --full too (--only craftax)."""
    no_references: bool = False
    """Time jaxspreeze only."""
    note: str = ""
    """A note for the report (e.g. 'CPU shared')."""
    budget_s: float | None = None
    """Start no case after this many seconds (the rest are reported as skipped)."""
    cold: bool = False
    """Only the cold-start group: each row a fresh process timed whole (imports, --help,
    the default SAC and PPO jobs with a new empty --compile-cache, then warm)."""
    total_steps: int | None = None
    """The cold group's jobs' budget (default: their algorithm's)."""
    list_cases: Annotated[bool, tyro.conf.arg(name="list")] = False
    """List the selected cases and exit."""


def main(argv: Sequence[str]) -> int:
    """Measure the selected cases; returns the exit code."""
    args = parse(BenchArgs, argv, "jaxspreeze bench", markers=FLAGS, description=DESCRIPTION)
    if code := at_least_one(rounds=args.rounds):
        return code
    from jaxspreeze.bench import references, report, suite
    from jaxspreeze.bench.record import best_matmul_peak_flops, matmul_peak_flops, versions
    from jaxspreeze.setup.devices import describe_hardware

    if args.cold:
        selected = suite.cold_selection(args.total_steps)
    else:
        selected = suite.selection(args.full, args.scale, args.only)
    if args.only:
        selected = [c for c in selected if any(s in c.id for s in args.only)]
    if args.list_cases:
        print("\n".join(c.id for c in selected))
        return 0
    refs = None if args.no_references else references
    rounds = args.rounds or (5 if args.full else 3)

    t0 = time.perf_counter()
    peak = matmul_peak_flops()
    print(f"jaxspreeze bench: {len(selected)} cases; matmul peak {peak / 1e9:.1f} GFLOP/s")
    out: dict[str, Any] = {
        "command": shlex.join(["jaxspreeze", "bench", *argv]),
        "selection": "full" if args.full else "quick",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),  # the start
        "wall_s": None,
        "hardware": describe_hardware(),
        "versions": versions(),
        "matmul_peak_flops_per_s": peak,
        "rounds": rounds,
        "warmup": args.warmup,
        "references": refs.__name__ if refs is not None else None,
        "note": args.note,
        "records": [],
    }
    folder = Path(args.out)

    def save(records: list[Any]) -> None:
        out["records"] = records
        out["matmul_peak_flops_per_s"] = best_matmul_peak_flops()
        out["wall_s"] = time.perf_counter() - t0
        report.write(out, folder)

    records = suite.run(selected, refs, rounds, args.warmup, budget_s=args.budget_s, on_record=save)
    save(records)
    print()
    print(report.table(records))
    print(f"\nwrote {folder / 'bench.json'} and {folder / 'bench.md'} ({out['wall_s']:.0f}s)")
    return 0
