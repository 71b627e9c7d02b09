"""Networks (flax linen): MLP torso, actors and critics. Batch shapes are ``[B, ...]``.

Every actor and critic flattens its observation to ``[B, D]`` and reads the columns
``obs_cols`` of it (``(start, stop)``; None: all): with asymmetric observations the env
observes the actor's part and the critic's part side by side
(:attr:`~jaxspreeze.types.EnvSpec.actor_obs`, ``critic_obs``) and each network sees only
its own, so its first layer is as wide as its part.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxspreeze.types import Columns

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class MLP(nn.Module):
    """Dense layers with ReLU between them; ``out`` adds a final linear layer.

    ``layer_norm``: a LayerNorm after every hidden Dense, before its ReLU (off: the
    parameters are exactly the plain MLP's)."""

    hidden: Sequence[int]
    out: int | None = None
    out_scale: float = 1.0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """``[B, in] -> [B, hidden[-1] or out]``."""
        for width in self.hidden:
            x = nn.Dense(width)(x)
            x = nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)
        if self.out is not None:
            init = nn.initializers.variance_scaling(self.out_scale, "fan_avg", "uniform")
            x = nn.Dense(self.out, kernel_init=init)(x)
        return x


def _flat(obs: jax.Array, cols: Columns | None) -> jax.Array:
    """``obs [B, ...] -> [B, D]``, then its columns ``cols`` (all when None)."""
    x = obs.reshape(obs.shape[0], -1)
    return x if cols is None else x[:, cols[0] : cols[1]]


def action_scale(low: Sequence[float], high: Sequence[float]) -> tuple[jax.Array, jax.Array]:
    """(scale, bias) mapping ``[-1, 1]`` to ``[low, high]``."""
    low_a, high_a = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)
    return (high_a - low_a) / 2.0, (high_a + low_a) / 2.0


class _ContinuousActor(nn.Module):
    """What every actor over ``action_dim`` continuous actions has: its MLP's ``hidden``
    sizes and the observation columns it reads."""

    hidden: Sequence[int]
    action_dim: int
    obs_cols: Columns | None = None  # the observation columns it reads


class TanhGaussianActor(_ContinuousActor):
    """SAC's actor: a Gaussian squashed by tanh, then scaled to the action bounds."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``obs [B, ...] -> (mean [B, A], log_std [B, A])`` before squashing."""
        h = MLP(self.hidden)(_flat(obs, self.obs_cols))
        mean = nn.Dense(self.action_dim)(h)
        log_std = nn.Dense(self.action_dim)(h)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(log_std) + 1)
        return mean, log_std


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
        return jnp.tanh(MLP(self.hidden, self.action_dim)(_flat(obs, self.obs_cols)))


def _ensemble(
    hidden: Sequence[int],
    out: int,
    num_qs: int,
    obs: jax.Array,
    action: jax.Array,
    obs_cols: Columns | None,
    layer_norm: bool = False,
) -> jax.Array:
    """``num_qs`` independent MLPs of (obs, action) -> ``out``, stacked: ``[num_qs, B, out]``
    (called inside a compact module: the MLPs are its submodules)."""
    x = jnp.concatenate([_flat(obs, obs_cols), action], axis=-1)
    ensemble = nn.vmap(
        MLP,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=0,
        axis_size=num_qs,
    )
    return ensemble(hidden, out, layer_norm=layer_norm)(x)


class QEnsemble(nn.Module):
    """``num_qs`` independent Q(s, a) MLPs evaluated together: ``[num_qs, B]``."""

    hidden: Sequence[int]
    num_qs: int = 2
    obs_cols: Columns | None = None  # the observation columns it reads

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``(obs [B, ...], action [B, A]) -> Q [num_qs, B]``."""
        return _ensemble(self.hidden, 1, self.num_qs, obs, action, self.obs_cols)[..., 0]


class DistributionalQEnsemble(nn.Module):
    """``num_qs`` categorical critics (C51) evaluated together: logits ``[num_qs, B, num_atoms]``.

    Each is an MLP over the observation and action whose last layer gives the logits of
    the return's distribution over ``num_atoms`` fixed atoms (the algorithm holds them).
    """

    hidden: Sequence[int]
    num_atoms: int
    num_qs: int = 2
    obs_cols: Columns | None = None  # the observation columns it reads
    layer_norm: bool = False  # a LayerNorm after each hidden layer (MLP's)

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``(obs [B, ...], action [B, A]) -> logits [num_qs, B, num_atoms]``."""
        return _ensemble(
            self.hidden, self.num_atoms, self.num_qs, obs, action, self.obs_cols, self.layer_norm
        )


class ValueNet(nn.Module):
    """State value V(s): ``[B]``."""

    hidden: Sequence[int]
    obs_cols: Columns | None = None  # the observation columns it reads

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> V [B]``."""
        return MLP(self.hidden, 1)(_flat(obs, self.obs_cols))[..., 0]


class CategoricalActor(nn.Module):
    """Discrete policy: ``obs -> logits [B, num_actions]``."""

    hidden: Sequence[int]
    num_actions: int
    obs_cols: Columns | None = None  # the observation columns it reads

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> logits [B, num_actions]``."""
        return MLP(self.hidden, self.num_actions, out_scale=0.01)(_flat(obs, self.obs_cols))


class GaussianActor(_ContinuousActor):
    """Continuous on-policy actor: mean from an MLP, state-independent log std."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``obs [B, ...] -> (mean [B, A], log_std [A])``."""
        mean = MLP(self.hidden, self.action_dim, out_scale=0.01)(_flat(obs, self.obs_cols))
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return mean, log_std


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
        x = _flat(obs, self.obs_cols)
        if self.state_std:
            out = MLP(self.hidden, 2 * self.action_dim, out_scale=0.01)(x)
            return out[:, : self.action_dim], out[:, self.action_dim :]
        mean = MLP(self.hidden, self.action_dim, out_scale=0.01)(x)
        raw = self.param("raw_std", nn.initializers.zeros, (self.action_dim,))
        return mean, raw
