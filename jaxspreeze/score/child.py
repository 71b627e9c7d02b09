"""One side of one time-to-score run, in its own process (what ``jaxspreeze score`` starts).

    python -m jaxspreeze.score.child --side S --task T --seed N --scale cpu \\
        --compile-cache DIR --started EPOCH --out ROW.json [--total-steps N] \\
        [--peer-settings own|matched]

``--started`` is the ``time.time()`` at which the parent started this process, so the
side's wall counts the interpreter, its imports and its compilation (the user's wall).
Writes the side's row as JSON to ``--out`` (``{"error": ...}`` if it raised; exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    """Run the side's runner on the row; returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m jaxspreeze.score.child")
    p.add_argument("--side", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--scale", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--compile-cache", required=True)
    p.add_argument("--started", type=float, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--total-steps", type=int, default=None)
    p.add_argument("--peer-settings", choices=["own", "matched"], default="own")
    args = p.parse_args(argv)

    from jaxspreeze.score import sides as score_sides
    from jaxspreeze.score.tasks import ROWS

    def say(line: str) -> None:
        print(f"[seed {args.seed}] {line.strip()}", flush=True)

    try:
        side = score_sides.sides()[args.side]
        run = score_sides.SideRun(
            args.seed,
            args.scale,
            args.compile_cache,
            args.started,
            args.total_steps,
            say,
            peer_settings=args.peer_settings,
        )
        result = score_sides.runner(side)(ROWS[args.task], run)
        status = 0
    except Exception as e:  # reported in the table; the other runs go on
        traceback.print_exc()
        result, status = {"error": f"{type(e).__name__}: {e}"}, 1
    with open(args.out, "w") as f:
        json.dump(result, f, default=str)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
