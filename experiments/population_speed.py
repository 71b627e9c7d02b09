"""Time one fused chunk of SAC on gymnax/Pendulum-v1 (default sizes) for S slots.

Usage: python experiments/population_speed.py S [S ...] [--reps R] [--k K]
(``16m``: 16 slots with lax.map over the slots instead of vmap)
Prints per-slot ms of one iteration (median of R chunks, compile excluded).
"""

from __future__ import annotations

import dataclasses
import sys
import time

import jax
import numpy as np

from jaxspreeze import schedules
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan


def _mapped_chunk(self, s):
    """The chunk with lax.map over slots instead of vmap (one slot at a time)."""
    step = lambda s, _: jax.lax.map(self.per_seed, s)
    return jax.lax.scan(step, s, None, length=self.iterations_per_chunk)


def build(num_seeds: int, k: int, mapped: bool = False, **fields):
    cfg = resolve(
        dataclasses.replace(
            RunConfig(),
            algo="sac",
            env="gymnax/Pendulum-v1",
            total_steps=10_000,
            num_seeds=num_seeds,
            chunk_iterations=k,
            placement="single",
            **fields,
        )
    )
    sch = schedules.make(plan(cfg, devices.single()))
    if mapped:
        sch.fused_chunk = _mapped_chunk.__get__(sch)
    state = sch.init()
    sch.compile(state)
    state = sch.warmup(state)
    jax.block_until_ready(state)
    return sch, state


def main() -> None:
    args = sys.argv[1:]
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 5
    k = int(args[args.index("--k") + 1]) if "--k" in args else 10
    sizes = [
        a
        for i, a in enumerate(args)
        if (a.isdigit() or a.endswith("m")) and (i == 0 or args[i - 1] not in ("--reps", "--k"))
    ]
    built = {s: build(int(s.rstrip("m")), k, s.endswith("m")) for s in sizes}
    cfg = built[sizes[0]][0].cfg
    print(
        f"num_envs={cfg.num_envs} grad_steps={cfg.grad_steps} batch={cfg.batch_size} "
        f"buffer={cfg.buffer_size} K={k}"
    )
    times = {s: [] for s in sizes}
    cpu = {s: [] for s in sizes}
    for _ in range(reps):  # interleaved
        for s in sizes:
            sch, state = built[s]
            t0, c0 = time.perf_counter(), time.process_time()
            state, m = sch.chunk(state)
            jax.block_until_ready((state, m))
            times[s].append(time.perf_counter() - t0)
            cpu[s].append(time.process_time() - c0)
            built[s] = (sch, state)
    for s in sizes:
        med = float(np.median(times[s]))
        n = int(s.rstrip("m"))
        print(
            f"S={s:>4s} chunk median {med * 1e3:8.1f} ms  per slot-iteration {med / (k * n) * 1e3:7.3f} ms"
            f" cpu/slot-it {float(np.median(cpu[s])) / (k * n) * 1e3:7.3f} ms  all={[round(t * 1e3) for t in times[s]]}"
        )


if __name__ == "__main__":
    main()
