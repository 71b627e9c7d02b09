"""Soft Actor-Critic (Haarnoja et al., 2018) with automatic entropy tuning."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks
from jaxspreeze.algos import base, common, members, off_policy
from jaxspreeze.algos.sac_config import SPEC, SACConfig, supports, validate  # noqa: F401
from jaxspreeze.core.types import EnvSpec, PyTree, Transition


class SACActor(NamedTuple):
    """Actor side: policy and entropy temperature, with their optimiser states; the target
    entropy's scale is a leaf (``target_entropy = -scale * action_dim``)."""

    params: PyTree
    opt_state: PyTree
    log_alpha: jax.Array
    alpha_opt_state: PyTree
    target_entropy_scale: jax.Array


class SACCritic(NamedTuple):
    """Critic side: twin Q, its target and optimiser state; gamma and tau are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array


class ActorView(NamedTuple):
    """What the critic needs from the actor: policy params and temperature."""

    params: PyTree
    log_alpha: jax.Array


def update_temperature(
    tx: optax.GradientTransformation,
    log_alpha: jax.Array,
    opt_state: PyTree,
    logp: jax.Array,
    target_entropy: jax.Array,
) -> tuple[jax.Array, PyTree]:
    """One step of automatic entropy tuning on ``logp [B]``: ``(log_alpha, opt_state)``.

    The gradient of ``-log_alpha * (logp + target_entropy)`` averaged over the batch: alpha
    grows while the policy's entropy is below the target and shrinks while above.
    """
    entropy_gap = jax.lax.stop_gradient(logp + target_entropy).mean()
    alpha_grad = -entropy_gap
    update, opt_state = tx.update(alpha_grad, opt_state)
    return optax.apply_updates(log_alpha, update), opt_state


def sample(
    actor: networks.TanhGaussianActor,
    params: PyTree,
    obs: jax.Array,
    key: jax.Array,
    scale: jax.Array,
    bias: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """A squashed-Gaussian action ``[B, A]`` in the bounds and its log-probability ``[B]``."""
    mean, log_std = actor.apply(params, obs)
    return networks.tanh_gaussian_sample(mean, log_std, key, scale, bias)


def act(
    actor: networks.TanhGaussianActor,
    scale: jax.Array,
    bias: jax.Array,
    state: SACActor,
    obs: jax.Array,
    key: jax.Array,
    deterministic: bool,
) -> jax.Array:
    """The policy's action: a sample, or the squashed mean when ``deterministic``."""
    if deterministic:
        mean, _ = actor.apply(state.params, obs)
        return jnp.tanh(mean) * scale + bias
    return sample(actor, state.params, obs, key, scale, bias)[0]


def actor_step(
    actor_tx: optax.GradientTransformation,
    alpha_tx: optax.GradientTransformation,
    a: SACActor,
    sample_fn: Callable[[PyTree, jax.Array, jax.Array], tuple[jax.Array, jax.Array]],
    q_fn: Callable[[jax.Array, jax.Array], jax.Array],
    obs: jax.Array,
    key: jax.Array,
    action_dim: int,
) -> tuple[SACActor, base.Metrics]:
    """One SAC actor step and one temperature step: ``(actor, metrics)``.

    The actor minimises ``alpha * logp - q_fn(obs, action)`` at sampled actions
    (``sample_fn(params, obs, key) -> (action, logp)``; ``q_fn -> [B]``, e.g. the smaller
    of twin critics), then :func:`update_temperature` moves alpha towards the target
    entropy ``-a.target_entropy_scale * action_dim``.
    """
    target_entropy = -a.target_entropy_scale * action_dim
    alpha = jnp.exp(a.log_alpha)

    def loss_fn(params):
        action, logp = sample_fn(params, obs, key)
        return (alpha * logp - q_fn(obs, action)).mean(), logp

    params, opt_state, loss, logp, gnorm = common.gradient_step(
        actor_tx, a.params, a.opt_state, loss_fn
    )
    log_alpha, alpha_opt_state = update_temperature(
        alpha_tx, a.log_alpha, a.alpha_opt_state, logp, target_entropy
    )
    finite = common.all_finite(loss, gnorm, log_alpha)
    a = a._replace(
        params=params, opt_state=opt_state, log_alpha=log_alpha, alpha_opt_state=alpha_opt_state
    )
    return a, {
        "actor_loss": loss,
        "entropy": -logp.mean(),
        "alpha": jnp.exp(log_alpha),
        "actor_grad_norm": gnorm,
        "finite": finite.astype(jnp.float32),
    }


def init_actor(cfg: Any, params: PyTree, actor_tx: Any, alpha_tx: Any) -> SACActor:
    """A fresh actor side (SAC, FastSAC): the policy, the first temperature ``init_alpha``,
    their optimiser states and the target entropy's scale."""
    log_alpha = jnp.log(jnp.asarray(cfg.init_alpha, jnp.float32))
    scale = jnp.asarray(cfg.target_entropy_scale, jnp.float32)
    return SACActor(params, actor_tx.init(params), log_alpha, alpha_tx.init(log_alpha), scale)


def make(cfg: SACConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind SAC to its config, env spec and the run's per-iteration update sizes."""
    cfg = base.filled(SPEC, cfg, base.family_of(spec.name))
    grad_steps = run.grad_steps
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    actor = networks.TanhGaussianActor(cfg.hidden, spec.action_dim, spec.actor_obs, torso)
    critic = networks.QEnsemble(cfg.hidden, num_qs=2, obs_cols=spec.critic_obs, torso=torso)
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    actor_tx = common.adam(cfg.actor_lr)
    critic_tx = common.adam(cfg.critic_lr)
    alpha_tx = common.adam(cfg.alpha_lr)
    policy = functools.partial(sample, actor, scale=scale, bias=bias)

    def init(key: jax.Array) -> base.AgentState:
        actor_params, critic_params = off_policy.init_params(key, actor, critic, spec)
        return base.AgentState(
            init_actor(cfg, actor_params, actor_tx, alpha_tx),
            SACCritic(
                critic_params,
                critic_params,
                critic_tx.init(critic_params),
                jnp.asarray(cfg.gamma, jnp.float32),
                jnp.asarray(cfg.tau, jnp.float32),
            ),
        )

    def update_critic(c: SACCritic, view: ActorView, batch: Transition, key: jax.Array):
        # soft Bellman target: the smaller target Q at a sampled next action, less alpha
        # times its log-probability
        next_action, next_logp = policy(view.params, batch.next_obs, key)
        next_q = critic.apply(c.target_params, batch.next_obs, next_action).min(0)
        alpha = jnp.exp(view.log_alpha)
        target = off_policy.bellman_target(batch, c.gamma, next_q - alpha * next_logp)
        params, opt_state, metrics = off_policy.fit_q(
            critic, critic_tx, c.params, c.opt_state, batch, target
        )
        target_params = common.polyak(c.target_params, params, c.tau)
        c = c._replace(params=params, target_params=target_params, opt_state=opt_state)
        return c, metrics

    def update_actor(a: SACActor, critic_params: PyTree, obs: jax.Array, key: jax.Array):
        q_fn = lambda o, action: critic.apply(critic_params, o, action).min(0)
        return actor_step(actor_tx, alpha_tx, a, policy, q_fn, obs, key, spec.action_dim)

    return off_policy.replay_algorithm(
        "sac",
        init=init,
        act=functools.partial(act, actor, scale, bias),
        actor_view=lambda a: ActorView(a.params, a.log_alpha),
        critic_view=lambda c: c.params,
        update_critic=update_critic,
        update_actor=update_actor,
        critic_steps=grad_steps,
        actor_steps=grad_steps,
        batch_size=run.batch_size,
        normalize_obs=spec.obs_shape if cfg.normalize_obs else None,
    )


# the fields a population may vary per member: each is a leaf of the state
MEMBER_FIELDS = {
    **members.ACTOR_CRITIC_LR,
    **members.TEMPERATURE,
    "tau": members.leaf("critic", "tau"),
}

