"""Deterministic-policy actor-critic: DDPG, and TD3 as DDPG with three additions.

DDPG (Lillicrap et al., 2016) learns a deterministic policy pi(s) by ascending a critic's
Q(s, pi(s)) and fits the critic to a Bellman target computed with slowly moving target
networks. TD3 (Fujimoto et al., 2018) adds three things, each a field of :class:`Variant`:
twin critics whose smaller target value is used (clipped double-Q), clipped noise on the
target action (target policy smoothing), and actor and target updates only once every
``policy_delay`` critic updates (delayed updates, counted in the state). DDPG is the
variant with none of them; ``ddpg.py`` and ``td3.py`` each bind this module to their own
config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import base, common, members, off_policy
from jaxspreeze.algos.deterministic_config import DeterministicConfig
from jaxspreeze.core.types import EnvSpec, PyTree, Transition


class Smoothing(NamedTuple):
    """Target policy smoothing: the noise's std and clip (fractions of the half-width),
    read from the critic side's leaves (``target_noise``, ``target_noise_clip``)."""

    std: jax.Array
    clip: jax.Array


@dataclass(frozen=True)
class Variant:
    """What a deterministic-policy algorithm adds to DDPG (DDPG itself: nothing)."""

    name: str
    num_qs: int = 1
    """Critics in the ensemble; the Bellman target takes their smallest (2: clipped double-Q)."""
    smoothing: bool = False
    """Clipped noise on the target action, of the std and clip the critic side holds
    (``target_noise``, ``target_noise_clip``; False: the target actor's action as it is)."""
    policy_delay: int | None = None
    """Critic updates per actor and target update, counted in the state (None: every step)."""
    actor_q: str = "first"
    """The critic value the actor ascends: ``first`` (Q1) or ``min`` (the ensemble's smallest)."""
    delay_targets: bool = True
    """With a ``policy_delay``: the targets move on the actor's updates only; False: the
    critic's after every critic update, the actor's by ``policy_delay`` such steps (tau
    compounded) at each of its updates."""


class DDPGActor(NamedTuple):
    """Actor side: policy, its target (for the critic's targets) and optimiser state; tau
    and the exploration noise's std are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    tau: jax.Array
    exploration_noise: jax.Array


class DDPGCritic(NamedTuple):
    """Critic side: Q, its target and optimiser state; gamma and tau are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array


class TD3Actor(NamedTuple):
    """A delayed actor side (TD3): DDPG's, with the count of actor updates so far."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    tau: jax.Array
    exploration_noise: jax.Array
    steps: jax.Array  # actor updates so far


class TD3Critic(NamedTuple):
    """A delayed critic side (TD3): DDPG's, with the count of critic updates so far and
    the target policy smoothing's std and clip as leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array
    steps: jax.Array  # critic updates so far
    target_noise: jax.Array
    target_noise_clip: jax.Array


# a side's state: DDPG's, or TD3's with its update counter
Actor = DDPGActor | TD3Actor
Critic = DDPGCritic | TD3Critic


# the fields a population may vary per member (DDPG): each is a leaf of the state (tau of
# both sides' targets)
MEMBER_FIELDS = {
    **members.ACTOR_CRITIC_LR,
    "tau": members.all_of(members.leaf("actor", "tau"), members.leaf("critic", "tau")),
    **members.leaves("actor", "exploration_noise"),
}
# TD3's: DDPG's and the target policy smoothing's leaves on the critic side
SMOOTHING_FIELDS = members.leaves("critic", "target_noise", "target_noise_clip")
TD3_MEMBER_FIELDS = {**MEMBER_FIELDS, **SMOOTHING_FIELDS}


def smoothing_of(c: Any) -> Smoothing:
    """The target policy smoothing a critic side holds (TD3's, FastTD3's)."""
    return Smoothing(c.target_noise, c.target_noise_clip)


def smoothed(action: jax.Array, key: jax.Array, smoothing: Smoothing) -> jax.Array:
    """Target policy smoothing: ``action [B, A]`` plus clipped Gaussian noise, in ``[-1, 1]``."""
    noise = smoothing.std * jax.random.normal(key, action.shape)
    noise = jnp.clip(noise, -smoothing.clip, smoothing.clip)
    return jnp.clip(action + noise, -1.0, 1.0)


def delayed_polyak(
    target: PyTree, online: PyTree, tau: jax.Array, steps: jax.Array, delay: int
) -> tuple[PyTree, jax.Array]:
    """Polyak-average ``target`` towards ``online`` on every ``delay``-th update only.

    ``steps`` counts the updates so far, this one included. Returns ``(target, due)``.
    """
    due = steps % delay == 0
    moved = common.polyak(target, online, tau)
    return jax.tree.map(lambda new, old: jnp.where(due, new, old), moved, target), due


def make(cfg: DeterministicConfig, spec: EnvSpec, run: Any, variant: Variant) -> base.Algorithm:
    """Bind a deterministic-policy variant to its config, env spec and the run's sizes."""
    grad_steps, delay = run.grad_steps, variant.policy_delay
    # critic updates per move of the critic's target (undelayed targets: every one)
    target_delay = delay if variant.delay_targets else 1
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    actor = networks.DeterministicActor(cfg.hidden, spec.action_dim, spec.actor_obs, torso)
    critic = networks.QEnsemble(
        cfg.hidden, num_qs=variant.num_qs, obs_cols=spec.critic_obs, torso=torso
    )
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    actor_tx = common.adam(cfg.actor_lr)
    critic_tx = common.adam(cfg.critic_lr)

    def init(key: jax.Array) -> base.AgentState:
        actor_params, critic_params = off_policy.init_params(key, actor, critic, spec)
        f32 = lambda name: jnp.asarray(getattr(cfg, name), jnp.float32)
        tau, gamma, noise = f32("tau"), f32("gamma"), f32("exploration_noise")
        a = DDPGActor(actor_params, actor_params, actor_tx.init(actor_params), tau, noise)
        c = DDPGCritic(critic_params, critic_params, critic_tx.init(critic_params), gamma, tau)
        if delay is None:
            return base.AgentState(a, c)
        zero = jnp.zeros((), jnp.int32)  # TD3: DDPG's sides with their update counters
        smoothing = {name: f32(name) for name in ("target_noise", "target_noise_clip")}
        return base.AgentState(
            TD3Actor(**a._asdict(), steps=zero),
            TD3Critic(**c._asdict(), steps=zero, **smoothing),
        )

    def act(state: Actor, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        action = actor.apply(state.params, obs)
        std = 0.0 if deterministic else state.exploration_noise
        return common.explore(action, key, std, scale, bias)

    def update_critic(c: Critic, target_actor: PyTree, batch: Transition, key: jax.Array):
        # the target actor's action at the next state (smoothed: TD3), then the smallest
        # target critic's value there; bootstrap unless terminated
        action = actor.apply(target_actor, batch.next_obs)
        if variant.smoothing:
            action = smoothed(action, key, smoothing_of(c))
        next_q = critic.apply(c.target_params, batch.next_obs, action * scale + bias).min(0)
        target = off_policy.bellman_target(batch, c.gamma, next_q)
        params, opt_state, metrics = off_policy.fit_q(
            critic, critic_tx, c.params, c.opt_state, batch, target
        )
        c = c._replace(params=params, opt_state=opt_state)
        if delay is None:
            return c._replace(target_params=common.polyak(c.target_params, params, c.tau)), metrics
        steps = c.steps + 1
        target_params, due = delayed_polyak(c.target_params, params, c.tau, steps, target_delay)
        metrics["target_updates"] = due.astype(jnp.float32)  # phase mean: 1 / target_delay
        return c._replace(target_params=target_params, steps=steps), metrics

    def update_actor(a: Actor, critic_params: PyTree, obs: jax.Array, key: jax.Array):
        del key  # deterministic policy gradient: ascend Q(s, pi(s)), Q1's or the smallest

        def loss_fn(params: PyTree) -> tuple[jax.Array, None]:
            action = actor.apply(params, obs) * scale + bias
            q = critic.apply(critic_params, obs, action)
            q = q.min(0) if variant.actor_q == "min" else q[0]
            return -q.mean(), None

        params, opt_state, loss, _, gnorm = common.gradient_step(
            actor_tx, a.params, a.opt_state, loss_fn
        )
        tau = a.tau
        if delay is not None and not variant.delay_targets:
            # tau compounded over the policy_delay critic updates since the last actor
            # update (SBX moves the actor's target toward the same parameters after each)
            tau = 1.0 - (1.0 - tau) ** delay
        target_params = common.polyak(a.target_params, params, tau)
        finite = common.all_finite(loss, gnorm)
        a = a._replace(params=params, target_params=target_params, opt_state=opt_state)
        if delay is not None:
            a = a._replace(steps=a.steps + 1)
        return a, {
            "actor_loss": loss,
            "actor_grad_norm": gnorm,
            "finite": finite.astype(jnp.float32),
        }

    return off_policy.replay_algorithm(
        variant.name,
        init=init,
        act=act,
        actor_view=lambda a: a.target_params,
        critic_view=lambda c: c.params,
        update_critic=update_critic,
        update_actor=update_actor,
        critic_steps=grad_steps,
        actor_steps=grad_steps // (delay or 1),
        batch_size=run.batch_size,
        normalize_obs=spec.obs_shape if cfg.normalize_obs else None,
    )
