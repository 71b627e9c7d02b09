"""The actors (policies): a torso, then a head (:mod:`~jaxspreeze.networks.heads`).

Every actor reads the observation ``[B, ...]`` through its torso (``torso``: a resolved
name of :data:`~jaxspreeze.networks.torsos.TORSOS`; ``mlp``, the default, flattens the
columns ``obs_cols``) and hands the features to its head.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxspreeze.core.types import Columns
from jaxspreeze.networks import heads
from jaxspreeze.networks.torsos import encode


def action_scale(low: Sequence[float], high: Sequence[float]) -> tuple[jax.Array, jax.Array]:
    """(scale, bias) mapping ``[-1, 1]`` to ``[low, high]``."""
    low_a, high_a = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)
    return (high_a - low_a) / 2.0, (high_a + low_a) / 2.0


class _ContinuousActor(nn.Module):
    """What every actor over ``action_dim`` continuous actions has: its MLP's ``hidden``
    sizes, the observation columns it reads and its torso."""

    hidden: Sequence[int]
    action_dim: int
    obs_cols: Columns | None = None  # the observation columns it reads
    torso: str = "mlp"  # the torso before the head (torsos.TORSOS)


class TanhGaussianActor(_ContinuousActor):
    """SAC's actor: a Gaussian squashed by tanh, then scaled to the action bounds."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``obs [B, ...] -> (mean [B, A], log_std [B, A])`` before squashing."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.tanh_gaussian(x, self.hidden, self.action_dim)


def tanh_gaussian_sample(
    mean: jax.Array,
    log_std: jax.Array,
    key: jax.Array,
    scale: jax.Array,
    bias: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample scaled to the bounds, and its log-probability ``[B]``."""
    std = jnp.exp(log_std)
    eps = jax.random.normal(key, mean.shape)
    u = mean + std * eps
    t = jnp.tanh(u)
    logp = -0.5 * (eps**2 + 2 * log_std + jnp.log(2 * jnp.pi))
    logp = logp - jnp.log(scale * (1 - t**2) + 1e-6)
    return t * scale + bias, logp.sum(-1)


class DeterministicActor(_ContinuousActor):
    """TD3/DDPG actor: ``tanh`` output scaled to the action bounds by the caller."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> action in [-1, 1] [B, A]``."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.deterministic(x, self.hidden, self.action_dim)


class CategoricalActor(nn.Module):
    """Discrete policy: ``obs -> logits [B, num_actions]``."""

    hidden: Sequence[int]
    num_actions: int
    obs_cols: Columns | None = None  # the observation columns it reads
    torso: str = "mlp"  # the torso before the head (torsos.TORSOS)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> logits [B, num_actions]``."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.categorical(x, self.hidden, self.num_actions)


class GaussianActor(_ContinuousActor):
    """Continuous on-policy actor: mean from an MLP, state-independent log std."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``obs [B, ...] -> (mean [B, A], log_std [A])``."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.gaussian(self, x, self.hidden, self.action_dim)


class SquashedGaussianActor(_ContinuousActor):
    """PPO's tanh-squashed Gaussian actor (brax's ``NormalTanhDistribution``): the mean and
    the raw scale of the Gaussian before the squash; the policy makes the std
    ``softplus(raw) + min_std``.

    ``state_std``: the raw scale is a second head of the MLP (``[B, A]``, brax's form);
    otherwise one learned parameter per action dimension (``[A]``). Both heads start near 0
    (mean about 0, std about ``softplus(0) = 0.69``).
    """

    state_std: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``obs [B, ...] -> (mean [B, A], raw scale [B, A] or [A])`` before squashing."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.squashed_gaussian(self, x, self.hidden, self.action_dim, self.state_std)
