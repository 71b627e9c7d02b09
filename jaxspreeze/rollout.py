"""Collect experience: ``lax.scan`` over T steps of the vmapped env and a policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax

from jaxspreeze.envs.base import EnvState, VecEnv
from jaxspreeze.types import Transition

Policy = Callable[[jax.Array, jax.Array], jax.Array]  # (obs [N, ...], key) -> action [N, ...]


class EnvCarry(NamedTuple):
    """What a rollout carries from one step to the next."""

    obs: jax.Array  # [N, *obs_shape]
    env_state: EnvState


class Episodes(NamedTuple):
    """Episodes that ended during a rollout, ``[T, N]``: a mask and their return/length."""

    done: jax.Array
    returns: jax.Array
    lengths: jax.Array


def env_init(env: VecEnv, key: jax.Array) -> EnvCarry:
    """Reset ``env`` and wrap it as a rollout carry."""
    return EnvCarry(*env.reset(key))


def rollout(
    env: VecEnv, policy: Policy, carry: EnvCarry, key: jax.Array, num_steps: int
) -> tuple[EnvCarry, Transition, Episodes]:
    """Run ``num_steps`` steps of ``policy`` in all envs; the transition is ``[T, N, ...]``."""

    def step(carry: EnvCarry, key: jax.Array):
        k_act, k_env = jax.random.split(key)
        action = policy(carry.obs, k_act)
        obs, env_state, reward, terminated, truncated, final_obs = env.step(
            k_env, carry.env_state, action
        )
        tr = Transition(carry.obs, action, reward, terminated, truncated, final_obs)
        done = terminated | truncated
        ep = Episodes(done, env_state.last_return, env_state.last_length)
        return EnvCarry(obs, env_state), (tr, ep)

    carry, (traj, eps) = jax.lax.scan(step, carry, jax.random.split(key, num_steps))
    return carry, traj, eps


def random_policy(env: VecEnv) -> Policy:
    """A policy that ignores the observation and acts uniformly at random (warm-up)."""
    return lambda obs, key: env.random_actions(key)
