"""Micro-benchmarks of the pieces a population batches: S=16 slots vs S=1, per slot.

    python experiments/population_parts.py [--reps R]

Each piece is jitted once for [1, ...] and once for [16, ...] (vmap over slots, as the
fused chunk does), run 200 times inside one lax.fori_loop so dispatch is excluded, and
timed interleaved (median of R, wall and process CPU). Per-slot = time / S.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

N = 200
CAP, ROW, BATCH, H = 100_000, 10, 256, 128


def pieces():
    """Each piece maps a carry to a carry of the same shape (a loop-carried dependency)."""

    def dot(x, w):  # one 256x128 @ 128x128 layer, forward
        return jnp.tanh(x @ w), w

    def gather(buf, key, acc):  # replay.sample: uniform rows of a [CAP, ROW] buffer
        key, k = jax.random.split(key)
        idx = jax.random.randint(k, (BATCH,), 0, CAP)
        return buf, key, acc + buf[idx].sum()

    def scatter(buf, key):  # replay.add of 8 rows
        key, k = jax.random.split(key)
        idx = (jax.random.randint(k, (), 0, CAP) + jnp.arange(8)) % CAP
        return buf.at[idx].set(jnp.ones((8, ROW))), key

    def rng(key, acc):  # threefry: the keys of one iteration's 8 gradient steps
        key, k = jax.random.split(key)
        ks = jax.random.split(k, 8)
        return key, acc + jax.vmap(lambda k: jax.random.normal(k, (BATCH,)))(ks).sum()

    keys = lambda s: jax.random.split(jax.random.key(0), s)
    return {
        "dot [256,128]x[128,128]": (
            dot,
            lambda s: (jnp.ones((s, BATCH, H)), jnp.ones((s, H, H)) * 0.01),
        ),
        "gather 256 rows of [100k,10]": (
            gather,
            lambda s: (jnp.ones((s, CAP, ROW)), keys(s), jnp.zeros(s)),
        ),
        "scatter 8 rows into [100k,10]": (scatter, lambda s: (jnp.zeros((s, CAP, ROW)), keys(s))),
        "threefry split+normal 8x256": (rng, lambda s: (keys(s), jnp.zeros(s))),
    }


def looped(fn):
    vf = jax.vmap(fn)

    def run(*args):
        return jax.lax.fori_loop(0, N, lambda i, c: vf(*c), args)

    return jax.jit(run)


def main() -> None:
    args = sys.argv[1:]
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 7
    for name, (fn, make) in pieces().items():
        f = looped(fn)
        inputs = {s: make(s) for s in (1, 16)}
        for s in (1, 16):
            jax.block_until_ready(f(*inputs[s]))
        wall = {1: [], 16: []}
        cpu = {1: [], 16: []}
        for _ in range(reps):
            for s in (1, 16):
                t0, c0 = time.perf_counter(), time.process_time()
                jax.block_until_ready(f(*inputs[s]))
                wall[s].append(time.perf_counter() - t0)
                cpu[s].append(time.process_time() - c0)
        per = {s: float(np.median(wall[s])) / (N * s) * 1e6 for s in (1, 16)}
        cper = {s: float(np.median(cpu[s])) / (N * s) * 1e6 for s in (1, 16)}
        print(
            f"{name:32s} per slot us: S=1 {per[1]:8.1f} (cpu {cper[1]:8.1f})  "
            f"S=16 {per[16]:8.1f} (cpu {cper[16]:8.1f})  ratio {per[16] / per[1]:.2f}"
        )


if __name__ == "__main__":
    main()
