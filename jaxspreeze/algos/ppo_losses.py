"""PPO's losses and advantages (Schulman et al., 2017), as functions of arrays.

The clipped surrogate with its entropy bonus (the policy's loss), the value loss, the
per-minibatch advantage normalisation and GAE(lambda) advantages of a rollout; ``ppo.py``
binds them to the networks and runs them over minibatch epochs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import common
from jaxspreeze.core.types import PyTree, Transition


class PolicyLossInfo(NamedTuple):
    """What the policy loss reports besides its value: means over the minibatch."""

    entropy: jax.Array
    approx_kl: jax.Array  # mean of (r - 1) - log r, Schulman's low-variance estimator
    clip_frac: jax.Array  # fraction of ratios outside [1 - clip_eps, 1 + clip_eps]


def normalized(advantage: jax.Array) -> jax.Array:
    """Advantages ``[B]`` shifted and scaled to mean 0 and std 1 over the minibatch."""
    return (advantage - advantage.mean()) / (advantage.std() + 1e-8)


def policy_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantage: jax.Array,
    entropy: jax.Array,
    clip_eps: jax.Array | float,
    ent_coef: jax.Array | float,
    max_log_ratio: float | None = None,
) -> tuple[jax.Array, PolicyLossInfo]:
    """``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A)) - ent_coef * mean(entropy)`` over ``[B]``.

    ``r = exp(logp - old_logp)`` is the probability ratio of the policy being updated to
    the one that acted; ``clip_eps`` and ``ent_coef`` are float32 scalars (the actor
    side's leaves) or Python floats.

    ``max_log_ratio`` (the tanh policy's, ``ppo_policy.MAX_LOG_RATIO``; None: none) clips the
    log-ratio, so a sample whose probability changed by more (a tanh policy's saturated
    action: its density far in the tail of a narrow Gaussian, where a small step of the
    mean moves the log-probability by millions) gives a finite loss and no gradient,
    instead of an infinite ratio and NaN parameters.
    """
    log_ratio = logp - old_logp
    if max_log_ratio is not None:
        log_ratio = jnp.clip(log_ratio, -max_log_ratio, max_log_ratio)
    ratio = jnp.exp(log_ratio)
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = jnp.minimum(ratio * advantage, clipped * advantage).mean()
    loss = -surrogate - ent_coef * entropy.mean()
    kl = ((ratio - 1.0) - log_ratio).mean()
    clip_frac = (jnp.abs(ratio - 1.0) > clip_eps).mean()
    return loss, PolicyLossInfo(entropy.mean(), kl, clip_frac)


def value_loss(value: jax.Array, returns: jax.Array, vf_coef: jax.Array | float) -> jax.Array:
    """``vf_coef * 0.5 * mean((V - returns)^2)`` over ``[B]`` (``vf_coef`` a float32 scalar,
    the critic side's leaf, or a Python float)."""
    return vf_coef * 0.5 * ((value - returns) ** 2).mean()


def rollout_values(value_net: networks.ValueNet, params: PyTree, obs: jax.Array) -> jax.Array:
    """V over ``[T, N, ...]`` observations -> ``[T, N]``."""
    return value_net.apply(params, obs.reshape(-1, *obs.shape[2:])).reshape(obs.shape[:2])


def advantages(
    value_net: networks.ValueNet,
    params: PyTree,
    gamma: jax.Array,
    lam: jax.Array,
    traj: Transition,
) -> tuple[jax.Array, jax.Array]:
    """GAE(lambda) ``(advantages, returns)`` ``[T, N]`` of a rollout ``[T, N]`` under V(params).

    ``traj``'s observations are as the value network reads them (normalised by the
    caller); ``next_obs`` is the final observation where an episode ended.
    """
    v = rollout_values(value_net, params, traj.obs)
    next_v = rollout_values(value_net, params, traj.next_obs)
    return common.gae(traj.reward, v, next_v, traj.terminated, traj.truncated, gamma, lam)
