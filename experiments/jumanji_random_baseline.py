"""A Jumanji env's return under uniform random legal actions (the baseline of a learning row).

    python experiments/jumanji_random_baseline.py Game2048-v1 512

Steps ``N`` envs with Jumanji's own ``reset`` and ``step`` (vmapped, one ``while_loop``)
until every first episode has ended (at most 5,000 steps), each action drawn uniformly
among the legal ones of the observation's ``action_mask``; prints the mean return and its
standard error.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import jumanji
import numpy as np


def random_returns(task: str, n: int, seed: int = 0) -> np.ndarray:
    """The returns of ``n`` first episodes of ``task`` under random legal actions."""
    env = jumanji.make(task)

    @jax.jit
    def run(key):
        k_reset, k_run = jax.random.split(key)
        state, ts = jax.vmap(env.reset)(jax.random.split(k_reset, n))

        def body(c):
            state, ts, ret, done, key, t = c
            key, k = jax.random.split(key)
            logits = jnp.where(ts.observation.action_mask.reshape(n, -1), 0.0, -jnp.inf)
            flat = jax.random.categorical(k, logits, axis=-1)
            shape = ts.observation.action_mask.shape[1:]
            action = flat if len(shape) == 1 else jnp.stack(jnp.unravel_index(flat, shape), -1)
            state, ts = jax.vmap(env.step)(state, action)
            ret = ret + jnp.where(done, 0.0, ts.reward)
            return state, ts, ret, done | ts.last(), key, t + 1

        start = (state, ts, jnp.zeros(n), jnp.zeros(n, bool), k_run, 0)
        end = jax.lax.while_loop(lambda c: ~jnp.all(c[3]) & (c[5] < 5000), body, start)
        return end[2]

    return np.asarray(run(jax.random.key(seed)))


if __name__ == "__main__":
    task = sys.argv[1] if len(sys.argv) > 1 else "Game2048-v1"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    ret = random_returns(task, n)
    se = ret.std(ddof=1) / np.sqrt(n)
    print(f"{task}, random legal actions: mean {ret.mean():.1f} ± {se:.1f} s.e. over {n} episodes")
