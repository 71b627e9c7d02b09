"""What resets that explore cost: env steps/s of a jitted rollout, per auto-reset variant.

- ``first``: the auto-reset jaxspreeze had before (each env returns to its own cached first
  state; no reset computed in the step), rebuilt here from the same library functions.
- ``every``: :func:`jaxspreeze.envs.base.auto_reset` with ``refresh_every=1``: every env
  draws its next initial state at every step (a full batch of resets per step).
- ``pool16`` (jaxspreeze's default, ``REFRESH_EVERY``): ``ceil(N/16)`` draws per step, in
  turn, so each env's next initial state is at most 16 steps old.

Same envs, same random actions, same scan; compile timed apart; ``--rounds`` interleaved
timed calls, median reported.

    JAX_PLATFORMS=cpu python experiments/reset_cost.py --envs brax/inverted_pendulum brax/reacher
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze.envs import VecEnv, make_env
from jaxspreeze.envs.base import REFRESH_EVERY, auto_reset


class FirstInner(NamedTuple):
    """The old brax inner state: the library state, the cached first state, the step count."""

    state: Any
    first: Any
    steps: jax.Array


def first_state_reset(reset, step, max_steps):
    """The auto-reset jaxspreeze had before: back to each env's own first state."""

    def reset_one(key):
        obs, state = reset(key)
        return obs, FirstInner(state, state, jnp.zeros((), jnp.int32))

    def step_one(key, inner, action):
        del key  # the old reset discarded the step key
        obs, nxt, reward, terminated = step(inner.state, action)
        steps = inner.steps + 1
        truncated = steps >= max_steps
        done = terminated | truncated
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), inner.first, nxt)
        first_obs, _ = reset_obs_state(inner.first)
        out = jnp.where(done, first_obs, obs)
        return (
            out,
            FirstInner(state, inner.first, jnp.where(done, 0, steps)),
            reward,
            terminated,
            truncated,
            obs,
        )

    return reset_one, step_one


def reset_obs_state(state):
    """(obs, state) of a library state whose ``obs`` is an array (brax, dm_control tasks)."""
    return state.obs, state


def raw_functions(vec: VecEnv):
    """The library's reset and step without any reset, as the family adapters use them."""
    env = vec.render_state

    def reset(key):
        state = env.reset(key)
        return state.obs, state

    def step(state, action):
        nxt = env.step(state, action)
        return nxt.obs, nxt.replace(done=jnp.zeros_like(nxt.done)), nxt.reward, nxt.done > 0.5

    return reset, step


def rollout_fn(env: VecEnv, steps: int):
    """A jitted ``steps``-step rollout of uniform random actions; returns the final carry."""

    def run(key):
        k_reset, k_run = jax.random.split(key)
        carry = env.reset(k_reset)

        def body(carry, k):
            obs, state = carry
            k_act, k_env = jax.random.split(k)
            obs, state, *_ = env.step(k_env, state, env.random_actions(k_act))
            return (obs, state), None

        carry, _ = jax.lax.scan(body, carry, jax.random.split(k_run, steps))
        return carry

    return jax.jit(run)


def step_cost(env: VecEnv) -> dict[str, float]:
    """XLA's cost analysis (flops, bytes accessed) of one batched ``env.step``."""
    _, state = jax.jit(env.reset)(jax.random.key(0))
    action = jnp.zeros((env.num_envs, *env.spec.action_shape))
    ca = jax.jit(env.step).lower(jax.random.key(1), state, action).compile().cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    return {"flops": float(ca.get("flops", -1)), "bytes": float(ca.get("bytes accessed", -1))}


def measure(name: str, num_envs: int, steps: int, rounds: int) -> dict:
    """Compile both variants, then time them in interleaved rounds."""
    lib = make_env(name, num_envs)
    spec = lib.spec
    reset, step = raw_functions(lib)
    r1, s1 = first_state_reset(reset, step, spec.max_episode_steps)
    r2, s2, _ = auto_reset(reset, step, spec.max_episode_steps, refresh_every=1)
    variants = {
        "first": VecEnv(spec, num_envs, r1, jax.vmap(s1)),
        "every": VecEnv(spec, num_envs, r2, s2),
        f"pool{REFRESH_EVERY}": lib,
    }
    compiled, compile_s, cost = {}, {}, {}
    for v, env in variants.items():
        cost[v] = step_cost(env)
        t = time.perf_counter()
        compiled[v] = rollout_fn(env, steps).lower(jax.random.key(0)).compile()
        compile_s[v] = time.perf_counter() - t
        jax.block_until_ready(compiled[v](jax.random.key(0)))  # first call apart
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for v in variants:
            t = time.perf_counter()
            jax.block_until_ready(compiled[v](jax.random.key(r + 1)))
            times[v].append(time.perf_counter() - t)
    rate = {v: steps * num_envs / statistics.median(ts) for v, ts in times.items()}
    return {
        "env": name,
        "num_envs": num_envs,
        "steps_per_call": steps,
        "rounds": rounds,
        "compile_s": compile_s,
        "call_s": times,
        "xla_cost_per_batched_step": cost,
        "env_steps_per_s": rate,
        "over_first": {v: r / rate["first"] for v, r in rate.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", nargs="+", default=["brax/inverted_pendulum", "brax/reacher"])
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="experiments/results/reset_cost_cpu.json")
    a = p.parse_args()
    rows = []
    for name in a.envs:
        row = measure(name, a.num_envs, a.steps, a.rounds)
        rows.append(row)
        cells = [
            f"{v} {r:,.0f}/s ({row['over_first'][v]:.2f}x, compile {row['compile_s'][v]:.0f} s, "
            f"{row['xla_cost_per_batched_step'][v]['flops']:.3g} flops)"
            for v, r in row["env_steps_per_s"].items()
        ]
        print(f"{name} x{a.num_envs}: " + "; ".join(cells), flush=True)
    meta = {
        "backend": jax.default_backend(),
        "devices": str(jax.devices()),
        "load_avg": os.getloadavg(),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
