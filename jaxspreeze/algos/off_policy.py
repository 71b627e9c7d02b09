"""What the off-policy actor-critics (SAC, TD3, DDPG) share: Q critics fitted over a replay buffer.

Each samples a batch from the buffer per gradient step (:func:`replay_algorithm`), fits an
ensemble of Q networks to a Bellman target held fixed (:func:`bellman_target`,
:func:`fit_q`) and moves the actor against the critic's parameters; what differs (the
next state's value, the actor's loss, when targets move) stays in the algorithm's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks
from jaxspreeze.algos import base, common
from jaxspreeze.core.types import EnvSpec, PyTree, Transition
from jaxspreeze.data import replay

# the off-policy actors: SAC's squashed Gaussian, TD3's and DDPG's deterministic policy
Actor = networks.TanhGaussianActor | networks.DeterministicActor
# one gradient step of a side: (state, the other side's view, batch or obs, key) -> (state, metrics)
Update = Callable[[PyTree, PyTree, Any, jax.Array], tuple[PyTree, base.Metrics]]


def init_params(
    key: jax.Array, actor: Actor, critic: networks.QEnsemble, spec: EnvSpec
) -> tuple[PyTree, PyTree]:
    """The actor's and the Q critic's first parameters from ``key`` (split: actor, critic)."""
    k_actor, k_critic = jax.random.split(key)
    obs = jnp.zeros((1, *spec.obs_shape))
    act = jnp.zeros((1, spec.action_dim))
    return actor.init(k_actor, obs), critic.init(k_critic, obs, act)


def bellman_target(batch: Transition, gamma: jax.Array, next_value: jax.Array) -> jax.Array:
    """``r + gamma * (1 - terminated) * next_value`` ``[B]``, held fixed (no gradient).

    A terminated step bootstraps from 0; a truncated one (a time limit) still bootstraps.
    """
    not_term = 1.0 - batch.terminated.astype(jnp.float32)
    return jax.lax.stop_gradient(batch.reward + gamma * not_term * next_value)


def fit_q(
    critic: networks.QEnsemble,
    tx: optax.GradientTransformation,
    params: PyTree,
    opt_state: PyTree,
    batch: Transition,
    target: jax.Array,
) -> tuple[PyTree, PyTree, base.Metrics]:
    """One gradient step of the Q ensemble ``[Q, B]`` towards ``target [B]``; its metrics.

    The loss is half the squared error, averaged over the batch and summed over the
    ensemble. Returns ``(params, opt_state, metrics)``.
    """

    def loss_fn(params: PyTree) -> tuple[jax.Array, jax.Array]:
        q = critic.apply(params, batch.obs, batch.action)
        return 0.5 * ((q - target) ** 2).mean(-1).sum(), q

    params, opt_state, loss, q, gnorm = common.gradient_step(tx, params, opt_state, loss_fn)
    finite = common.all_finite(loss, gnorm)
    return (
        params,
        opt_state,
        {
            "critic_loss": loss,
            "q_mean": q.mean(),
            "critic_grad_norm": gnorm,
            "finite": finite.astype(jnp.float32),
        },
    )


def replay_algorithm(
    name: str,
    *,
    init: Callable[[jax.Array], base.AgentState],
    act: Callable[[PyTree, jax.Array, jax.Array, bool], jax.Array],
    actor_view: Callable[[PyTree], PyTree],
    critic_view: Callable[[PyTree], PyTree],
    update_critic: Update,
    update_actor: Update,
    critic_steps: int,
    actor_steps: int,
    batch_size: int,
    critic_sample: Callable[[Any, jax.Array, int], Any] = replay.sample,
    normalize_obs: tuple[int, ...] | None = None,
    layer_norm: bool = False,
) -> base.Algorithm:
    """An off-policy :class:`~jaxspreeze.algos.base.Algorithm`: each gradient step on a fresh batch.

    ``update_critic(critic, actor_view, batch, key)`` is one step on a sampled batch
    (drawn by ``critic_sample(buffer, key, batch_size)``),
    ``update_actor(actor, critic_view, obs, key)`` one on its observations only (so the
    actor side may keep an observation-only buffer); ``*_steps`` are per iteration.
    ``normalize_obs``: the observations' shape, to normalise them by running statistics
    (:class:`ObsNormActor`); None: the networks read them raw. ``layer_norm``: the
    learning network has LayerNorms (:attr:`~jaxspreeze.algos.base.Algorithm.layer_norm`).
    """
    observe = None
    if normalize_obs is not None:
        init, act, actor_view, update_critic, update_actor, observe = _obs_normalized(
            normalize_obs, init, act, actor_view, update_critic, update_actor
        )
    return base.Algorithm(
        name=name,
        on_policy=False,
        init=init,
        act=base.feed_forward(act),
        actor_view=actor_view,
        critic_view=critic_view,
        critic_phase=base.replay_phase(
            update_critic, critic_steps, batch_size, sample=critic_sample
        ),
        actor_phase=base.replay_phase(update_actor, actor_steps, batch_size, _observations),
        actor_steps_per_iteration=actor_steps,
        critic_steps_per_iteration=critic_steps,
        observe=observe,
        layer_norm=layer_norm,
    )


class ObsNormActor(NamedTuple):
    """An actor side whose networks read normalised observations: the algorithm's own
    actor state and the running statistics of the observations collected so far."""

    inner: PyTree
    obs_stats: common.RunningStats


class ObsNormView(NamedTuple):
    """The actor view handed to the critic side: the algorithm's own and the statistics."""

    inner: PyTree
    obs_stats: common.RunningStats


def _obs_normalized(
    obs_shape: tuple[int, ...],
    init: Callable[[jax.Array], base.AgentState],
    act: Callable[[PyTree, jax.Array, jax.Array, bool], jax.Array],
    actor_view: Callable[[PyTree], PyTree],
    update_critic: Update,
    update_actor: Update,
) -> tuple[Callable[..., Any], ...]:
    """The algorithm's functions with observation normalisation around them.

    The running statistics (:class:`~jaxspreeze.algos.common.RunningStats`) live on the
    actor side (:class:`ObsNormActor`) and are merged with the observations it collects
    (``observe``, after the actor phase: both phases of an iteration read the statistics
    of its start). Acting, the actor's updates and (through :class:`ObsNormView`) the
    critic's batches (``obs`` and ``next_obs``) are normalised; the replay buffer keeps
    raw observations. Evaluation and the saved policy act with the statistics of their
    snapshot of the actor side. Returns ``(init, act, actor_view, update_critic,
    update_actor, observe)``.
    """

    def norm_init(key: jax.Array) -> base.AgentState:
        agent = init(key)
        return base.AgentState(
            ObsNormActor(agent.actor, common.stats_init(obs_shape)), agent.critic
        )

    def norm_act(a: ObsNormActor, obs: jax.Array, key: jax.Array, deterministic: bool):
        return act(a.inner, common.normalize(a.obs_stats, obs), key, deterministic)

    def norm_view(a: ObsNormActor) -> ObsNormView:
        return ObsNormView(actor_view(a.inner), a.obs_stats)

    def norm_critic(c: PyTree, view: ObsNormView, batch: Transition, key: jax.Array):
        stats = view.obs_stats
        batch = batch._replace(
            obs=common.normalize(stats, batch.obs), next_obs=common.normalize(stats, batch.next_obs)
        )
        return update_critic(c, view.inner, batch, key)

    def norm_actor(a: ObsNormActor, critic_view: PyTree, obs: jax.Array, key: jax.Array):
        inner, metrics = update_actor(a.inner, critic_view, common.normalize(a.obs_stats, obs), key)
        return a._replace(inner=inner), metrics

    def observe(a: ObsNormActor, obs: jax.Array) -> ObsNormActor:
        flat = obs.reshape(-1, *obs_shape)
        return a._replace(obs_stats=common.stats_update(a.obs_stats, flat))

    return norm_init, norm_act, norm_view, norm_critic, norm_actor, observe


def _observations(batch: Transition) -> jax.Array:
    """What the actor's update reads of a sampled batch: ``obs [B, ...]``."""
    return batch.obs
