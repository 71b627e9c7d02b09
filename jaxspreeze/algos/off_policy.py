"""What the off-policy actor-critics (SAC, TD3, DDPG) share: Q critics fitted over a replay buffer.

Each samples a batch from the buffer per gradient step (:func:`replay_algorithm`), fits an
ensemble of Q networks to a Bellman target held fixed (:func:`bellman_target`,
:func:`fit_q`) and moves the actor against the critic's parameters; what differs (the
next state's value, the actor's loss, when targets move) stays in the algorithm's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks, replay
from jaxspreeze.algos import base, common
from jaxspreeze.types import EnvSpec, PyTree, Transition

# the off-policy actors: SAC's squashed Gaussian, TD3's and DDPG's deterministic policy
Actor = networks.TanhGaussianActor | networks.DeterministicActor
# one gradient step of a side: (state, the other side's view, batch or obs, key) -> (state, metrics)
Update = Callable[[PyTree, PyTree, Any, jax.Array], tuple[PyTree, base.Metrics]]


def spec(
    name: str,
    config_cls: type,
    supports: Callable[[EnvSpec], str | None],
    validate: Callable[[Any, str, Any], None],
    make: Callable[[Any, EnvSpec, Any], base.Algorithm],
    **extra: Any,
) -> base.AlgoSpec:
    """The registry's entry of an off-policy algorithm: its run-level defaults are the shared ones.

    ``extra`` are the other :class:`~jaxspreeze.algos.base.AlgoSpec` fields it sets
    (``grad_step_multiple``).
    """
    return base.AlgoSpec(
        name, config_cls, False, base.OFF_POLICY_DEFAULTS, supports, validate, make, **extra
    )


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
) -> base.Algorithm:
    """An off-policy :class:`~jaxspreeze.algos.base.Algorithm`: each gradient step on a fresh batch.

    ``update_critic(critic, actor_view, batch, key)`` is one step on a sampled batch
    (drawn by ``critic_sample(buffer, key, batch_size)``),
    ``update_actor(actor, critic_view, obs, key)`` one on its observations only (so the
    actor side may keep an observation-only buffer); ``*_steps`` are per iteration.
    """
    return base.Algorithm(
        name=name,
        on_policy=False,
        init=init,
        act=act,
        actor_view=actor_view,
        critic_view=critic_view,
        critic_phase=base.replay_phase(
            update_critic, critic_steps, batch_size, sample=critic_sample
        ),
        actor_phase=base.replay_phase(update_actor, actor_steps, batch_size, _observations),
        actor_steps_per_iteration=actor_steps,
        critic_steps_per_iteration=critic_steps,
    )


def _observations(batch: Transition) -> jax.Array:
    """What the actor's update reads of a sampled batch: ``obs [B, ...]``."""
    return batch.obs
