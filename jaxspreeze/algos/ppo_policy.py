"""PPO's policy distributions: one class per parameterisation, chosen by the action space.

Each binds a policy network and gives ``sample`` (acting) and ``log_prob_entropy`` (the
losses), on observations as the policy reads them (normalised by the caller). The
densities are module-level functions of arrays, tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.types import EnvSpec, PyTree


def categorical_log_prob_entropy(
    logits: jax.Array, action: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``(log pi(action) [B], entropy [B])`` of a softmax over ``logits [B, K]``, ``action [B]``."""
    log_probs = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(log_probs, action[:, None].astype(jnp.int32), -1)[:, 0]
    entropy = -(jnp.exp(log_probs) * log_probs).sum(-1)
    return logp, entropy


def clipped_gaussian_log_prob(mean: jax.Array, log_std: jax.Array, u: jax.Array) -> jax.Array:
    """``log pi(u) [B]`` of a diagonal Gaussian whose samples are clipped to ``[-1, 1]``.

    ``mean [B, A]``, ``log_std [A]`` and the action ``u [B, A]`` in ``[-1, 1]`` units. An
    action on a bound has the probability of the whole clipped tail (clipped action
    policy gradient, Fujita & Maeda 2018): exact, bounded, and no clipping bias.
    """
    z = (u - mean) / jnp.exp(log_std)
    inside = -0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi)
    return jnp.where(
        u >= 1.0 - 1e-6,
        jax.scipy.special.log_ndtr(-z),
        jnp.where(u <= -1.0 + 1e-6, jax.scipy.special.log_ndtr(z), inside),
    ).sum(-1)


def gaussian_entropy(log_std: jax.Array, batch_shape: tuple[int, ...]) -> jax.Array:
    """Entropy of a diagonal Gaussian of state-independent ``log_std [A]``, as ``[B]``."""
    return jnp.broadcast_to((log_std + 0.5 * (1 + jnp.log(2 * jnp.pi))).sum(), batch_shape)


@dataclass(frozen=True, eq=False)
class Categorical:
    """Discrete actions: a softmax over the logits of a ``CategoricalActor``."""

    net: networks.CategoricalActor

    def sample(
        self, params: PyTree, obs: jax.Array, key: jax.Array, deterministic: bool
    ) -> jax.Array:
        """An action ``[B]`` (int32) per observation ``[B, ...]``: sampled, or the most likely."""
        logits = self.net.apply(params, obs)
        if deterministic:
            return jnp.argmax(logits, -1).astype(jnp.int32)
        return jax.random.categorical(key, logits).astype(jnp.int32)

    def log_prob_entropy(
        self, params: PyTree, obs: jax.Array, action: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(log pi(action | obs) [B], entropy [B])``."""
        return categorical_log_prob_entropy(self.net.apply(params, obs), action)


@dataclass(frozen=True, eq=False)
class ClippedGaussian:
    """Continuous actions: a Gaussian in ``[-1, 1]`` units, clipped and scaled to the bounds.

    The env action is ``clip(u, -1, 1) * scale + bias`` for a Gaussian ``u`` with the
    ``GaussianActor``'s mean and its state-independent, bounded log std.
    """

    net: networks.GaussianActor
    scale: jax.Array
    bias: jax.Array

    def mean_log_std(self, params: PyTree, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Mean ``[B, A]`` and (bounded) log std ``[A]``, in ``[-1, 1]`` action units."""
        mean, log_std = self.net.apply(params, obs)
        return mean, jnp.clip(log_std, networks.LOG_STD_MIN, networks.LOG_STD_MAX)

    def sample(
        self, params: PyTree, obs: jax.Array, key: jax.Array, deterministic: bool
    ) -> jax.Array:
        """An env action ``[B, A]`` per observation ``[B, ...]``: sampled, or the mean's."""
        mean, log_std = self.mean_log_std(params, obs)
        u = mean if deterministic else mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return jnp.clip(u, -1.0, 1.0) * self.scale + self.bias

    def log_prob_entropy(
        self, params: PyTree, obs: jax.Array, action: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(log pi(action | obs) [B], entropy [B])`` of env actions ``[B, A]``."""
        mean, log_std = self.mean_log_std(params, obs)
        logp = clipped_gaussian_log_prob(mean, log_std, (action - self.bias) / self.scale)
        return logp, gaussian_entropy(log_std, logp.shape)


Policy = Categorical | ClippedGaussian


def for_env(spec: EnvSpec, hidden: tuple[int, ...]) -> Policy:
    """The policy distribution of ``spec``'s action space, its network ``hidden`` wide."""
    if spec.discrete:
        return Categorical(networks.CategoricalActor(hidden, spec.action_dim, spec.actor_obs))
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    return ClippedGaussian(
        networks.GaussianActor(hidden, spec.action_dim, spec.actor_obs), scale, bias
    )
