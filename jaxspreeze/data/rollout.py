"""Collect experience: ``lax.scan`` over T steps of the vmapped env and a policy.

The policy may keep a state between steps (its *carry*, :attr:`EnvCarry.policy`: leaves
``[N, ...]``, ``()`` for a feed-forward policy): the rollout hands it to the policy at
each step and resets an env's row to ``initial`` where its episode ended (a termination
or a truncation: the env's next observation starts a new episode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax

from jaxspreeze.core.types import Carry, Transition, reset_carry
from jaxspreeze.envs.base import EnvState, VecEnv

# (carry, obs [N, ...], key) -> (action [N, ...], carry)
Policy = Callable[[Carry, jax.Array, jax.Array], tuple[jax.Array, Carry]]


class EnvCarry(NamedTuple):
    """What a rollout carries from one step to the next."""

    obs: jax.Array  # [N, *obs_shape]
    env_state: EnvState
    policy: Carry = ()  # the policy's carry for the next step (leaves [N, ...])


class Episodes(NamedTuple):
    """Episodes that ended during a rollout, ``[T, N]``: a mask and their return/length."""

    done: jax.Array
    returns: jax.Array
    lengths: jax.Array


def env_init(env: VecEnv, key: jax.Array, policy: Carry = ()) -> EnvCarry:
    """Reset ``env`` and wrap it as a rollout carry, with the policy's initial carry."""
    return EnvCarry(*env.reset(key), policy)


def rollout(
    env: VecEnv,
    policy: Policy,
    carry: EnvCarry,
    key: jax.Array,
    num_steps: int,
    initial: Carry = (),
) -> tuple[EnvCarry, Transition, Episodes]:
    """Run ``num_steps`` steps of ``policy`` in all envs; the transition is ``[T, N, ...]``.

    ``initial``: the policy's initial carry for ``N`` envs, which a row of the carry is
    reset to where an episode ends (``()``: a policy without memory)."""

    def step(carry: EnvCarry, key: jax.Array):
        k_act, k_env = jax.random.split(key)
        action, policy_carry = policy(carry.policy, carry.obs, k_act)
        obs, env_state, reward, terminated, truncated, final_obs = env.step(
            k_env, carry.env_state, action
        )
        tr = Transition(carry.obs, action, reward, terminated, truncated, final_obs)
        done = terminated | truncated
        ep = Episodes(done, env_state.last_return, env_state.last_length)
        policy_carry = reset_carry(policy_carry, initial, done)
        return EnvCarry(obs, env_state, policy_carry), (tr, ep)

    carry, (traj, eps) = jax.lax.scan(step, carry, jax.random.split(key, num_steps))
    return carry, traj, eps


def random_policy(env: VecEnv) -> Policy:
    """A policy that acts uniformly at random (warm-up), reading the observation only for
    its legal actions (an env with masks); the carry passes through (reset only where
    episodes end)."""
    return lambda carry, obs, key: (env.random_actions(key, obs), carry)
