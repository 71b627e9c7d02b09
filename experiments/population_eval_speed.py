"""Time one evaluation (16 deterministic episodes per slot, 200 steps) for S slots.

Usage: python experiments/population_eval_speed.py S [S ...] [--reps R]
Evaluation as the trainer runs it (threads.make_evaluate: vmap over slots of the
per-slot scan); compile excluded; medians of R calls, the sizes interleaved.
"""

from __future__ import annotations

import sys
import time

import jax
import numpy as np
from population_speed import build

from jaxspreeze.run import threads


def main() -> None:
    args = sys.argv[1:]
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 5
    sizes = [
        int(a) for i, a in enumerate(args) if a.isdigit() and (i == 0 or args[i - 1] != "--reps")
    ]
    built = {}
    for s in sizes:
        sch, state = build(s, 1)
        ev = threads.make_evaluate(sch)
        ev.compile(state.agent.actor)
        jax.block_until_ready(ev(state.agent.actor))
        built[s] = (ev, state.agent.actor)
    times = {s: [] for s in sizes}
    for _ in range(reps):
        for s in sizes:
            ev, actor = built[s]
            t0 = time.perf_counter()
            jax.block_until_ready(ev(actor))
            times[s].append(time.perf_counter() - t0)
    for s in sizes:
        med = float(np.median(times[s]))
        print(
            f"S={s:3d} eval median {med * 1e3:8.1f} ms  per slot {med / s * 1e3:7.2f} ms"
            f"  all={[round(t * 1e3) for t in times[s]]}"
        )


if __name__ == "__main__":
    main()
