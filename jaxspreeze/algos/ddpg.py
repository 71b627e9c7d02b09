"""DDPG (Lillicrap et al., 2016): deterministic actor, one critic, target networks."""

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
class DDPGConfig:
    """DDPG's own hyperparameters."""

    actor_lr: float = 1e-3
    """Actor learning rate (Adam)."""
    critic_lr: float = 1e-3
    """Critic learning rate (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target updates."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range half-width."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and the critic."""


class DDPGActor(NamedTuple):
    """Actor side: policy, its target (for the critic's targets) and optimiser state."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    tau: jax.Array


class DDPGCritic(NamedTuple):
    """Critic side: Q, its target and optimiser state; gamma and tau are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array


def supports(spec: EnvSpec) -> str | None:
    """Why DDPG cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return "DDPG needs a continuous action space; use --algo ppo for discrete actions"
    return None


def validate(cfg: DDPGConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad DDPG field."""

    base.check_positive(cfg, prefix, ("actor_lr", "critic_lr"))
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    noise = cfg.exploration_noise
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or noise < 0:
        raise ConfigError(f"{prefix}exploration_noise", f"must be >= 0, got {noise!r}")
    base.check_hidden(cfg, prefix)


def make(cfg: DDPGConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind DDPG to its config, env spec and the run's per-iteration update sizes."""
    grad_steps, batch_size = run.grad_steps, run.batch_size
    actor = networks.DeterministicActor(cfg.hidden, spec.action_dim, spec.actor_obs)
    critic = networks.QEnsemble(cfg.hidden, num_qs=1, obs_cols=spec.critic_obs)
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    actor_tx = common.adam(cfg.actor_lr)
    critic_tx = common.adam(cfg.critic_lr)

    def init(key: jax.Array) -> base.AgentState:
        k_actor, k_critic = jax.random.split(key)
        obs = jnp.zeros((1, *spec.obs_shape))
        act = jnp.zeros((1, spec.action_dim))
        actor_params = actor.init(k_actor, obs)
        critic_params = critic.init(k_critic, obs, act)
        tau = jnp.asarray(cfg.tau, jnp.float32)
        return base.AgentState(
            DDPGActor(actor_params, actor_params, actor_tx.init(actor_params), tau),
            DDPGCritic(
                critic_params,
                critic_params,
                critic_tx.init(critic_params),
                jnp.asarray(cfg.gamma, jnp.float32),
                tau,
            ),
        )

    def act(state: DDPGActor, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        action = actor.apply(state.params, obs)
        std = 0.0 if deterministic else cfg.exploration_noise
        return common.explore(action, key, std, scale, bias)

    def update_critic(c: DDPGCritic, target_actor: PyTree, batch: Transition, key: jax.Array):
        del key  # the target is deterministic
        # Bellman target with both targets: bootstrap unless terminated
        next_action = actor.apply(target_actor, batch.next_obs) * scale + bias
        next_q = critic.apply(c.target_params, batch.next_obs, next_action)[0]
        not_term = 1.0 - batch.terminated.astype(jnp.float32)
        target = jax.lax.stop_gradient(batch.reward + c.gamma * not_term * next_q)

        def loss_fn(params):
            q = critic.apply(params, batch.obs, batch.action)[0]
            return 0.5 * ((q - target) ** 2).mean(), q

        params, opt_state, loss, q, gnorm = common.gradient_step(
            critic_tx, c.params, c.opt_state, loss_fn
        )
        target_params = common.polyak(c.target_params, params, c.tau)
        finite = common.all_finite(loss, gnorm)
        c = c._replace(params=params, target_params=target_params, opt_state=opt_state)
        return c, {
            "critic_loss": loss,
            "q_mean": q.mean(),
            "critic_grad_norm": gnorm,
            "finite": finite.astype(jnp.float32),
        }

    def update_actor(a: DDPGActor, critic_params: PyTree, obs: jax.Array, key: jax.Array):
        del key  # deterministic policy gradient

        def loss_fn(params):
            action = actor.apply(params, obs) * scale + bias
            return -critic.apply(critic_params, obs, action)[0].mean(), None

        params, opt_state, loss, _, gnorm = common.gradient_step(
            actor_tx, a.params, a.opt_state, loss_fn
        )
        target_params = common.polyak(a.target_params, params, a.tau)
        finite = common.all_finite(loss, gnorm)
        a = DDPGActor(params, target_params, opt_state, a.tau)
        return a, {
            "actor_loss": loss,
            "actor_grad_norm": gnorm,
            "finite": finite.astype(jnp.float32),
        }

    return base.Algorithm(
        name="ddpg",
        on_policy=False,
        init=init,
        act=act,
        actor_view=lambda a: a.target_params,
        critic_view=lambda c: c.params,
        critic_phase=base.replay_phase(update_critic, grad_steps, batch_size),
        actor_phase=base.replay_phase(update_actor, grad_steps, batch_size, lambda b: b.obs),
        actor_steps_per_iteration=grad_steps,
        critic_steps_per_iteration=grad_steps,
    )


SPEC = base.AlgoSpec(
    name="ddpg",
    config_cls=DDPGConfig,
    on_policy=False,
    defaults=base.OFF_POLICY_DEFAULTS,
    supports=supports,
    validate=validate,
    make=make,
    shape_fields=("hidden",),
)
