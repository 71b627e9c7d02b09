"""PPO's policy distributions: one class per parameterisation, chosen by the action space.

Each binds a policy network and gives ``sample`` (acting), ``log_prob_entropy`` (the
losses) and ``entropy_noise`` (the draws a sample-based entropy needs, None where the
entropy is exact), on observations as the policy reads them (normalised by the caller).
The densities are module-level functions of arrays, tested on their own.

Discrete actions obey legal-action masks (:mod:`~jaxspreeze.algos.masks`): the callers read
``ok [B, K]`` from the observations as the env gives them (``masks.legal``) and pass it
in; the categorical's illegal logits are pushed to the lowest value before sampling, the
argmax, the log-probabilities and the entropy (a softmax over the legal actions alone).
The continuous policies take ``ok`` and ignore it (None: they have no masks).

Continuous actions have two parameterisations (``--ppo.policy``): ``clipped`` (a Gaussian
with a state-independent std, clipped to the bounds) and ``tanh`` (brax's: a Gaussian
squashed by tanh, its std a softplus of a network head or of one learned parameter per
action dimension, plus a minimum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import masks
from jaxspreeze.algos.ppo_config import CONTINUOUS, TANH_STDS
from jaxspreeze.core.types import EnvSpec, PyTree


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


# the squashed actions' bound when their log-probability is computed: atanh(1 - 1e-6) =
# 7.25, so a stored action on (or rounded onto) a bound has a finite pre-squash value
TANH_BOUND = 1.0 - 1e-6

# PPO's bound on the tanh policy's log-ratio (a ratio of 5e8): a saturated action's
# log-probability sits far in the tail of a narrow Gaussian, where a small step of the
# mean moves it by millions (ppo_losses.policy_loss); the other policies have none
MAX_LOG_RATIO = 20.0


def tanh_log_det(u: jax.Array) -> jax.Array:
    """``log |d tanh(u) / du| = log(1 - tanh(u)^2)``, elementwise, in the stable form
    ``2 (log 2 - u - softplus(-2 u))`` (brax, TFP's Tanh bijector): no ``1 - t^2``
    cancellation where tanh saturates."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def tanh_gaussian_log_prob(mean: jax.Array, std: jax.Array, t: jax.Array) -> jax.Array:
    """``log pi(t) [B]`` of ``t = tanh(u)``, ``u ~ N(mean, std)`` diagonal, in ``[-1, 1]`` units.

    ``mean [B, A]``, ``std [B, A]`` or ``[A]``, the squashed action ``t [B, A]``. The
    pre-squash ``u`` is recovered as ``atanh(clip(t, +-TANH_BOUND))`` and the density is
    ``N(u) / |d tanh / du|``, the log-det in :func:`tanh_log_det`'s stable form.

    Why recompute ``u`` from the stored action rather than keep the sampled ``u``: the
    rollout stores the env action (the transition has no pre-squash field) and PPO's
    ratio needs the old and the new log-probability of the *same* action. Both are
    computed here from the same stored action, so the inversion's rounding (and the clip
    at ``TANH_BOUND``, where tanh saturated in float32) is common to both and cancels in
    the ratio: it stays finite and exact for the recovered ``u``. Keeping the sampled
    ``u`` for the old log-probability only would make the two disagree on saturated
    actions (ratios far from 1 from rounding alone).
    """
    u = jnp.arctanh(jnp.clip(t, -TANH_BOUND, TANH_BOUND))
    z = (u - mean) / std
    logp_u = -0.5 * z**2 - jnp.log(std) - 0.5 * math.log(2 * math.pi)
    return (logp_u - tanh_log_det(u)).sum(-1)


def tanh_gaussian_entropy(mean: jax.Array, std: jax.Array, eps: jax.Array | None) -> jax.Array:
    """The entropy ``[B]`` of the tanh-squashed Gaussian, estimated as brax does.

    ``H[tanh(u)] = H[u] + E[log |d tanh / du|]``: the pre-squash Gaussian's entropy plus
    the log-det at one reparameterised sample ``u = mean + std * eps`` (``eps [B, A]``
    standard normal), so the estimate falls where the policy saturates. ``eps`` None: the
    pre-squash Gaussian's entropy alone (an upper bound; for callers that drop it).
    """
    gaussian = jnp.broadcast_to(jnp.log(std) + 0.5 * (1 + math.log(2 * math.pi)), mean.shape)
    if eps is None:
        return gaussian.sum(-1)
    return (gaussian + tanh_log_det(mean + std * eps)).sum(-1)


@dataclass(frozen=True, eq=False)
class Categorical:
    """Discrete actions: a softmax over the logits of a ``CategoricalActor``."""

    net: networks.CategoricalActor | networks.RecurrentNet
    max_log_ratio: ClassVar[float | None] = None

    def sample(
        self, params: PyTree, obs: jax.Array, key: jax.Array, deterministic: bool, ok=None
    ) -> jax.Array:
        """An action ``[B]`` (int32) per observation ``[B, ...]``: sampled, or the most
        likely; among the legal actions ``ok [B, K]`` (None: all)."""
        return self.sample_out(self.net.apply(params, obs), key, deterministic, ok)

    def sample_out(
        self, logits: jax.Array, key: jax.Array, deterministic: bool, ok=None
    ) -> jax.Array:
        """:meth:`sample` from the network's output (the logits ``[B, K]``)."""
        logits = masks.masked(logits, ok)
        if deterministic:
            return jnp.argmax(logits, -1).astype(jnp.int32)
        return jax.random.categorical(key, logits).astype(jnp.int32)

    def entropy_noise(self, key: jax.Array, shape: tuple[int, ...]) -> None:
        """None: the entropy is exact."""
        return None

    def log_prob_entropy(
        self, params: PyTree, obs: jax.Array, action: jax.Array, noise: None = None, ok=None
    ) -> tuple[jax.Array, jax.Array]:
        """``(log pi(action | obs) [B], entropy [B])`` of the policy over the legal actions
        ``ok [B, K]`` (None: all)."""
        return self.log_prob_entropy_out(self.net.apply(params, obs), action, noise, ok)

    def log_prob_entropy_out(
        self, logits: jax.Array, action: jax.Array, noise: None = None, ok=None
    ) -> tuple[jax.Array, jax.Array]:
        """:meth:`log_prob_entropy` from the network's output (the logits)."""
        return categorical_log_prob_entropy(masks.masked(logits, ok), action)


@dataclass(frozen=True, eq=False)
class ClippedGaussian:
    """Continuous actions: a Gaussian in ``[-1, 1]`` units, clipped and scaled to the bounds.

    The env action is ``clip(u, -1, 1) * scale + bias`` for a Gaussian ``u`` with the
    ``GaussianActor``'s mean and its state-independent, bounded log std.
    """

    net: networks.GaussianActor | networks.RecurrentNet
    scale: jax.Array
    bias: jax.Array
    max_log_ratio: ClassVar[float | None] = None

    def mean_log_std(self, params: PyTree, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Mean ``[B, A]`` and (bounded) log std ``[A]``, in ``[-1, 1]`` action units."""
        return self.dist(self.net.apply(params, obs))

    def dist(self, out: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        """:meth:`mean_log_std` from the network's output ``(mean, log_std)``."""
        mean, log_std = out
        return mean, jnp.clip(log_std, networks.LOG_STD_MIN, networks.LOG_STD_MAX)

    def sample(
        self, params: PyTree, obs: jax.Array, key: jax.Array, deterministic: bool, ok=None
    ) -> jax.Array:
        """An env action ``[B, A]`` per observation ``[B, ...]``: sampled, or the mean's."""
        return self.sample_out(self.net.apply(params, obs), key, deterministic)

    def sample_out(self, out: PyTree, key: jax.Array, deterministic: bool, ok=None) -> jax.Array:
        """:meth:`sample` from the network's output (``ok``: no masks here, unused)."""
        mean, log_std = self.dist(out)
        u = mean if deterministic else mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return jnp.clip(u, -1.0, 1.0) * self.scale + self.bias

    def entropy_noise(self, key: jax.Array, shape: tuple[int, ...]) -> None:
        """None: the entropy (of the unclipped Gaussian) is exact."""
        return None

    def log_prob_entropy(
        self, params: PyTree, obs: jax.Array, action: jax.Array, noise: None = None, ok=None
    ) -> tuple[jax.Array, jax.Array]:
        """``(log pi(action | obs) [B], entropy [B])`` of env actions ``[B, A]``."""
        return self.log_prob_entropy_out(self.net.apply(params, obs), action)

    def log_prob_entropy_out(
        self, out: PyTree, action: jax.Array, noise: None = None, ok=None
    ) -> tuple[jax.Array, jax.Array]:
        """:meth:`log_prob_entropy` from the network's output."""
        mean, log_std = self.dist(out)
        logp = clipped_gaussian_log_prob(mean, log_std, (action - self.bias) / self.scale)
        return logp, gaussian_entropy(log_std, logp.shape)


@dataclass(frozen=True, eq=False)
class TanhGaussian:
    """Continuous actions: a Gaussian squashed by tanh, then scaled to the bounds (brax's
    ``NormalTanhDistribution``).

    The env action is ``tanh(u) * scale + bias`` for ``u ~ N(mean, std)``, with
    ``std = softplus(raw) + min_std`` from a ``SquashedGaussianActor`` (its raw scale a
    network head, or one learned parameter per dimension). The most likely action of the
    evaluation is ``tanh(mean)`` scaled. Log-probabilities are of ``[-1, 1]`` units (the
    scale's constant Jacobian cancels in PPO's ratio, as for the clipped Gaussian).
    """

    net: networks.SquashedGaussianActor | networks.RecurrentNet
    scale: jax.Array
    bias: jax.Array
    min_std: float
    # PPO's log-ratio bound for this policy (saturated actions: ppo_losses.policy_loss)
    max_log_ratio: ClassVar[float | None] = MAX_LOG_RATIO

    def mean_std(self, params: PyTree, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Pre-squash mean ``[B, A]`` and std ``[B, A]`` (state-dependent) or ``[A]``."""
        return self.dist(self.net.apply(params, obs))

    def dist(self, out: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        """:meth:`mean_std` from the network's output ``(mean, raw scale)``."""
        mean, raw = out
        return mean, jax.nn.softplus(raw) + self.min_std

    def sample(
        self, params: PyTree, obs: jax.Array, key: jax.Array, deterministic: bool, ok=None
    ) -> jax.Array:
        """An env action ``[B, A]`` per observation ``[B, ...]``: sampled, or ``tanh(mean)``."""
        return self.sample_out(self.net.apply(params, obs), key, deterministic)

    def sample_out(self, out: PyTree, key: jax.Array, deterministic: bool, ok=None) -> jax.Array:
        """:meth:`sample` from the network's output (``ok``: no masks here, unused)."""
        mean, std = self.dist(out)
        u = mean if deterministic else mean + std * jax.random.normal(key, mean.shape)
        return jnp.tanh(u) * self.scale + self.bias

    def entropy_noise(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """One standard-normal draw per row for the sample-based entropy, ``shape`` ``[M, A]``.

        Drawn from ``fold_in(key, 1)``: the phase's own key keeps shuffling the
        minibatches exactly as before. A row keeps its draw over the epochs.
        """
        return jax.random.normal(jax.random.fold_in(key, 1), shape)

    def log_prob_entropy(
        self,
        params: PyTree,
        obs: jax.Array,
        action: jax.Array,
        noise: jax.Array | None = None,
        ok=None,
    ) -> tuple[jax.Array, jax.Array]:
        """``(log pi(action | obs) [B], entropy [B])`` of env actions ``[B, A]``; the entropy
        is brax's one-sample estimate at ``noise [B, A]`` (None: the pre-squash Gaussian's)."""
        return self.log_prob_entropy_out(self.net.apply(params, obs), action, noise)

    def log_prob_entropy_out(
        self, out: PyTree, action: jax.Array, noise: jax.Array | None = None, ok=None
    ) -> tuple[jax.Array, jax.Array]:
        """:meth:`log_prob_entropy` from the network's output."""
        mean, std = self.dist(out)
        logp = tanh_gaussian_log_prob(mean, std, (action - self.bias) / self.scale)
        return logp, tanh_gaussian_entropy(mean, std, noise)


Policy = Categorical | ClippedGaussian | TanhGaussian
# the continuous parameterisations ``--ppo.policy`` names, and the std forms of ``tanh``:
# CONTINUOUS and TANH_STDS (from ppo_config, the config's no-JAX module)


def for_env(
    spec: EnvSpec,
    hidden: tuple[int, ...],
    kind: str = "clipped",
    tanh_std: str = "state",
    min_std: float = 1e-3,
    torso: str = "mlp",
    memory: str = "none",
    memory_size: int = 128,
) -> Policy:
    """The policy distribution of ``spec``'s action space, its network ``hidden`` wide
    after the torso ``torso`` (a resolved name of ``networks.TORSOS``).

    Continuous actions: ``kind`` ``clipped`` (:class:`ClippedGaussian`) or ``tanh``
    (:class:`TanhGaussian`, its std from a network head for ``tanh_std="state"`` or one
    learned parameter per dimension for ``"scalar"``, at least ``min_std``). Discrete
    actions are categorical whatever ``kind`` says.

    ``memory`` ``gru`` or ``lstm``: the network is a
    :class:`~jaxspreeze.networks.RecurrentNet` (a cell of ``memory_size`` units between
    the torso and the head); the policy then acts and scores through its ``*_out``
    methods on the network's outputs (``ppo_recurrent``).
    """
    if memory != "none":
        return _recurrent(spec, hidden, kind, tanh_std, min_std, torso, memory, memory_size)
    if spec.discrete:
        return Categorical(
            networks.CategoricalActor(hidden, spec.action_dim, spec.actor_obs, torso)
        )
    if kind not in CONTINUOUS:
        raise ValueError(f"unknown PPO policy {kind!r}; known: {', '.join(CONTINUOUS)}")
    if tanh_std not in TANH_STDS:
        raise ValueError(f"unknown tanh std {tanh_std!r}; known: {', '.join(TANH_STDS)}")
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    if kind == "tanh":
        net = networks.SquashedGaussianActor(
            hidden, spec.action_dim, spec.actor_obs, torso, state_std=tanh_std == "state"
        )
        return TanhGaussian(net, scale, bias, float(min_std))
    return ClippedGaussian(
        networks.GaussianActor(hidden, spec.action_dim, spec.actor_obs, torso), scale, bias
    )


def _recurrent(
    spec: EnvSpec,
    hidden: tuple[int, ...],
    kind: str,
    tanh_std: str,
    min_std: float,
    torso: str,
    memory: str,
    memory_size: int,
) -> Policy:
    """:func:`for_env`'s policy with a recurrent network (the same distributions)."""
    net = lambda head, out, **kw: networks.RecurrentNet(
        head, hidden, out, memory, memory_size, spec.actor_obs, torso, **kw
    )
    if spec.discrete:
        return Categorical(net("categorical", spec.action_dim))
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    if kind == "tanh":
        squashed = net("squashed", spec.action_dim, state_std=tanh_std == "state")
        return TanhGaussian(squashed, scale, bias, float(min_std))
    return ClippedGaussian(net("gaussian", spec.action_dim), scale, bias)
