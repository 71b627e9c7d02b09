"""``jaxspreeze bench [--full] [--out DIR]``: measure, print a table, write bench.json/md."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

REFERENCES = Path("tests") / "benchmarks" / "references.py"


def find_references(path: str | None = None) -> Path | None:
    """The references file: ``path``, else the source checkout's, else ``./tests/...``."""
    if path:
        return Path(path)
    import jaxspreeze

    for root in (Path(jaxspreeze.__file__).resolve().parents[1], Path.cwd()):
        if (root / REFERENCES).exists():
            return root / REFERENCES
    return None


def load_references(path: Path) -> ModuleType:
    """Import the references module from its file (its folder joins ``sys.path``)."""
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # references import their sibling brax_compat
    spec = importlib.util.spec_from_file_location("jaxspreeze_bench_references", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # flax modules look their defining module up
    spec.loader.exec_module(module)
    return module


def parser() -> argparse.ArgumentParser:
    """The ``jaxspreeze bench`` options."""
    p = argparse.ArgumentParser(
        prog="jaxspreeze bench",
        description="Measure jaxspreeze's throughput (sampling, update step, training chunk; "
        "with --full also brax's trainers and time to a return threshold) side by side with "
        "bare references in this process; print a table and write bench.json and bench.md.",
    )
    p.add_argument("--full", action="store_true", help="the full selection (default: quick)")
    p.add_argument("--out", default="bench", help="folder for bench.json and bench.md")
    p.add_argument(
        "--scale", choices=("cpu", "gpu"), help="case sizes (default: from the JAX backend)"
    )
    p.add_argument("--rounds", type=int, help="timed calls per case (default 3 quick, 5 full)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before timing")
    p.add_argument(
        "--only", action="append", default=[], help="run cases whose id contains this (repeatable)"
    )
    p.add_argument("--references", help="path of references.py (default: the source checkout's)")
    p.add_argument("--no-references", action="store_true", help="time jaxspreeze only")
    p.add_argument("--note", default="", help="a note for the report (e.g. 'CPU shared')")
    p.add_argument(
        "--budget-s",
        type=float,
        help="start no case after this many seconds (the rest are reported as skipped)",
    )
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    return p


def main(argv: Sequence[str]) -> int:
    """Entry point of ``jaxspreeze bench``; returns the exit code."""
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    if args.rounds is not None and args.rounds < 1:
        print("jaxspreeze: error: --rounds: must be >= 1", file=sys.stderr)
        return 2
    from jaxspreeze.bench import report, suite

    selected = suite.selection(args.full, args.scale)
    if args.only:
        selected = [c for c in selected if any(s in c.id for s in args.only)]
    if args.list:
        print("\n".join(c.id for c in selected))
        return 0
    refs, path = None, None
    if not args.no_references:
        path = find_references(args.references)
        if path is None or not path.exists():
            print(
                "jaxspreeze bench: references not found (they live in the source checkout's "
                f"{REFERENCES}); timing jaxspreeze only. Pass --references PATH to use them.",
                file=sys.stderr,
            )
        else:
            refs = load_references(path)
    rounds = args.rounds or (5 if args.full else 3)

    from jaxspreeze.bench.record import best_matmul_peak_flops, matmul_peak_flops, versions
    from jaxspreeze.devices import describe_hardware

    t0 = time.perf_counter()
    peak = matmul_peak_flops()
    print(f"jaxspreeze bench: {len(selected)} cases; matmul peak {peak / 1e9:.1f} GFLOP/s")
    out = {
        "command": shlex.join(["jaxspreeze", "bench", *argv]),
        "selection": "full" if args.full else "quick",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),  # the start
        "wall_s": None,
        "hardware": describe_hardware(),
        "versions": versions(),
        "matmul_peak_flops_per_s": peak,
        "rounds": rounds,
        "warmup": args.warmup,
        "references": str(path) if refs is not None else None,
        "note": args.note,
        "records": [],
    }
    folder = Path(args.out)

    def save(records: list) -> None:
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
