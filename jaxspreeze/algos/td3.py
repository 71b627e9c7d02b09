"""TD3 (Fujimoto et al., 2018): twin critics, clipped double-Q, smoothing, delayed updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import base, common
from jaxspreeze.errors import ConfigError
from jaxspreeze.types import EnvSpec, PyTree, Transition


@dataclass(frozen=True)
class TD3Config:
    """TD3's own hyperparameters."""

    actor_lr: float = 1e-3
    """Actor learning rate (Adam)."""
    critic_lr: float = 1e-3
    """Critic learning rate (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target updates."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range half-width."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise (fraction of the half-width)."""
    target_noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (fraction of the half-width)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and the critic."""


class TD3Actor(NamedTuple):
    """Actor side: policy, its target (for the critic's targets), optimiser, update count."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    tau: jax.Array
    steps: jax.Array  # actor updates so far


class TD3Critic(NamedTuple):
    """Critic side: twin Q, its target, optimiser and update count; gamma, tau are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array
    steps: jax.Array  # critic updates so far


def supports(spec: EnvSpec) -> str | None:
    """Why TD3 cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return "TD3 needs a continuous action space; use --algo ppo for discrete actions"
    return None


def validate(cfg: TD3Config, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad TD3 field (and grad_steps when ``run`` is given)."""

    base.check_positive(cfg, prefix, ("actor_lr", "critic_lr", "policy_delay"))
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    for name in ("exploration_noise", "target_noise", "target_noise_clip"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{prefix}{name}", f"must be >= 0, got {value!r}")
    if not isinstance(cfg.policy_delay, int):
        raise ConfigError(f"{prefix}policy_delay", f"must be an integer, got {cfg.policy_delay!r}")
    if run is not None and run.grad_steps % cfg.policy_delay:
        raise ConfigError(
            "grad_steps",
            f"must be a multiple of {prefix}policy_delay ({cfg.policy_delay}) so the actor "
            f"updates every policy_delay critic updates; got {run.grad_steps}",
        )
    base.check_hidden(cfg, prefix)


def grad_step_multiple(cfg: TD3Config) -> int:
    """Gradient steps per iteration must be a multiple of ``policy_delay``."""
    return cfg.policy_delay


def make(cfg: TD3Config, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind TD3 to its config, env spec and the run's per-iteration update sizes."""
    grad_steps, batch_size, delay = run.grad_steps, run.batch_size, cfg.policy_delay
    actor = networks.DeterministicActor(cfg.hidden, spec.action_dim, spec.actor_obs)
    critic = networks.QEnsemble(cfg.hidden, num_qs=2, obs_cols=spec.critic_obs)
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    actor_tx = common.adam(cfg.actor_lr)
    critic_tx = common.adam(cfg.critic_lr)

    def init(key: jax.Array) -> base.AgentState:
        k_actor, k_critic = jax.random.split(key)
        obs = jnp.zeros((1, *spec.obs_shape))
        act = jnp.zeros((1, spec.action_dim))
        actor_params = actor.init(k_actor, obs)
        critic_params = critic.init(k_critic, obs, act)
        zero = jnp.zeros((), jnp.int32)
        tau = jnp.asarray(cfg.tau, jnp.float32)
        return base.AgentState(
            TD3Actor(actor_params, actor_params, actor_tx.init(actor_params), tau, zero),
            TD3Critic(
                critic_params,
                critic_params,
                critic_tx.init(critic_params),
                jnp.asarray(cfg.gamma, jnp.float32),
                tau,
                zero,
            ),
        )

    def act(state: TD3Actor, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        action = actor.apply(state.params, obs)
        std = 0.0 if deterministic else cfg.exploration_noise
        return common.explore(action, key, std, scale, bias)

    def update_critic(c: TD3Critic, target_actor: PyTree, batch: Transition, key: jax.Array):
        # target policy smoothing: clipped noise on the target actor's action
        action = actor.apply(target_actor, batch.next_obs)
        noise = cfg.target_noise * jax.random.normal(key, action.shape)
        noise = jnp.clip(noise, -cfg.target_noise_clip, cfg.target_noise_clip)
        next_action = jnp.clip(action + noise, -1.0, 1.0) * scale + bias
        # clipped double-Q target: bootstrap unless terminated (truncation still bootstraps)
        next_q = critic.apply(c.target_params, batch.next_obs, next_action).min(0)
        not_term = 1.0 - batch.terminated.astype(jnp.float32)
        target = jax.lax.stop_gradient(batch.reward + c.gamma * not_term * next_q)

        def loss_fn(params):
            q = critic.apply(params, batch.obs, batch.action)
            return 0.5 * ((q - target) ** 2).mean(-1).sum(), q

        params, opt_state, loss, q, gnorm = common.gradient_step(
            critic_tx, c.params, c.opt_state, loss_fn
        )
        # delayed target update: once every policy_delay critic updates
        steps = c.steps + 1
        due = steps % delay == 0
        target_params = jax.tree.map(
            lambda new, old: jnp.where(due, new, old),
            common.polyak(c.target_params, params, c.tau),
            c.target_params,
        )
        finite = common.all_finite(loss, gnorm)
        c = TD3Critic(params, target_params, opt_state, c.gamma, c.tau, steps)
        return c, {
            "critic_loss": loss,
            "q_mean": q.mean(),
            "critic_grad_norm": gnorm,
            "target_updates": due.astype(jnp.float32),  # phase mean: 1 / policy_delay
            "finite": finite.astype(jnp.float32),
        }

    def update_actor(a: TD3Actor, critic_params: PyTree, obs: jax.Array, key: jax.Array):
        del key  # deterministic policy gradient

        def loss_fn(params):
            action = actor.apply(params, obs) * scale + bias
            q1 = critic.apply(critic_params, obs, action)[0]
            return -q1.mean(), None

        params, opt_state, loss, _, gnorm = common.gradient_step(
            actor_tx, a.params, a.opt_state, loss_fn
        )
        target_params = common.polyak(a.target_params, params, a.tau)
        finite = common.all_finite(loss, gnorm)
        a = TD3Actor(params, target_params, opt_state, a.tau, a.steps + 1)
        return a, {
            "actor_loss": loss,
            "actor_grad_norm": gnorm,
            "finite": finite.astype(jnp.float32),
        }

    actor_steps = grad_steps // delay
    return base.Algorithm(
        name="td3",
        on_policy=False,
        init=init,
        act=act,
        actor_view=lambda a: a.target_params,
        critic_view=lambda c: c.params,
        critic_phase=base.replay_phase(update_critic, grad_steps, batch_size),
        actor_phase=base.replay_phase(update_actor, actor_steps, batch_size, lambda b: b.obs),
        actor_steps_per_iteration=actor_steps,
        critic_steps_per_iteration=grad_steps,
    )


SPEC = base.AlgoSpec(
    name="td3",
    config_cls=TD3Config,
    on_policy=False,
    defaults=base.OFF_POLICY_DEFAULTS,
    supports=supports,
    validate=validate,
    make=make,
    grad_step_multiple=grad_step_multiple,
    shape_fields=("hidden",),
)
