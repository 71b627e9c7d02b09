"""Evaluation: a pure jitted ``evaluate`` of deterministic episodes on vmapped envs."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze.envs import VecEnv
from jaxspreeze.types import PyTree

ActFn = Callable[[PyTree, jax.Array, jax.Array, bool], jax.Array]


class EvalResult(NamedTuple):
    """Mean/std of the return and the mean length over the evaluated episodes."""

    return_mean: jax.Array
    return_std: jax.Array
    length_mean: jax.Array


def make_evaluate(
    act: ActFn, env: VecEnv, max_steps: int | None = None
) -> Callable[[PyTree, jax.Array], EvalResult]:
    """``evaluate(actor, key)``: one deterministic episode in each of ``env.num_envs`` envs.

    Each env's first finished episode counts; the scan runs ``max_steps`` (default: the
    env's time limit) so every episode ends.
    """
    steps = max_steps or env.spec.max_episode_steps

    def evaluate(actor: PyTree, key: jax.Array) -> EvalResult:
        k_reset, k_run = jax.random.split(key)
        obs, env_state = env.reset(k_reset)
        n = env.num_envs
        init = (obs, env_state, jnp.zeros(n, bool), jnp.zeros(n), jnp.zeros(n, jnp.int32))

        def step(carry, key):
            obs, env_state, finished, ret, length = carry
            k_act, k_env = jax.random.split(key)
            action = act(actor, obs, k_act, True)
            obs, env_state, reward, term, trunc, _ = env.step(k_env, env_state, action)
            live = ~finished
            ret = ret + jnp.where(live, reward, 0.0)
            length = length + live.astype(jnp.int32)
            finished = finished | term | trunc
            return (obs, env_state, finished, ret, length), None

        (_, _, _, ret, length), _ = jax.lax.scan(step, init, jax.random.split(k_run, steps))
        return EvalResult(ret.mean(), ret.std(), length.astype(jnp.float32).mean())

    return evaluate
