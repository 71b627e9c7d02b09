"""PPO (Schulman et al., 2017): clipped surrogate, GAE(lambda), minibatch epochs.

The value function is the critic side and the policy the actor side, so the device split
places them apart like the off-policy algorithms. Both phases get the fresh rollout
``[T, N]`` and compute the same GAE advantages from the value parameters and observation
statistics as they were at the start of the iteration (the staleness rule).

The ratio's old log-probabilities are the behaviour policy's: on the device path the
actor that collected the rollout is the one being updated, so they are computed from it;
a rollout from host workers (:class:`~jaxspreeze.algos.base.BehaviourRollout`, collected
with parameters one version older by the on-policy host schedule, HostRollout) carries the
log-probabilities the workers computed when they acted (``behaviour``), so the clipped
ratio is taken against the policy that really acted.

Legal-action masks (an env whose spec says ``action_mask``, :mod:`~jaxspreeze.algos.masks`)
are read from the observations as collected, before any normalisation, and passed to the
policy wherever it acts or is scored: sampling, the greedy action, the behaviour's and the
update's log-probabilities and the entropy (over the legal actions alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks
from jaxspreeze.algos import base, common, masks, members, ppo_losses, ppo_policy, ppo_recurrent
from jaxspreeze.algos.base import episode_starts
from jaxspreeze.algos.ppo_config import (  # noqa: F401
    DEFAULTS,
    FAMILY_DEFAULTS,
    FIELD_DEFAULTS,
    SPEC,
    PPOConfig,
    sequence_length,
    supports,
    validate,
)
from jaxspreeze.core.types import EnvSpec, PyTree, Transition


class PPOActor(NamedTuple):
    """Actor side: policy, optimiser, base learning rate and observation statistics; the
    clip range and the entropy coefficient are leaves."""

    params: PyTree
    opt_state: PyTree
    lr: jax.Array
    obs_stats: common.RunningStats
    clip_eps: jax.Array
    ent_coef: jax.Array


class PPOCritic(NamedTuple):
    """Critic side: value function, optimiser; lr, gamma, lambda, the value-loss
    coefficient and the reward scale are leaves."""

    params: PyTree
    opt_state: PyTree
    lr: jax.Array
    gamma: jax.Array
    gae_lambda: jax.Array
    vf_coef: jax.Array
    reward_scaling: jax.Array


class CriticView(NamedTuple):
    """What the actor needs from the critic to compute advantages."""

    params: PyTree
    gamma: jax.Array
    gae_lambda: jax.Array
    reward_scaling: jax.Array


class PolicyBatch(NamedTuple):
    """One minibatch of the policy update, ``[B, ...]``; ``noise``: the draws of a
    sample-based entropy (the tanh policy), None where the entropy is exact; ``ok``: the
    legal actions ``[B, K]``, None for an env without masks."""

    obs: jax.Array
    action: jax.Array
    old_logp: jax.Array
    advantage: jax.Array
    noise: jax.Array | None = None
    ok: jax.Array | None = None


class ValueBatch(NamedTuple):
    """One minibatch of the value update, ``[B, ...]``."""

    obs: jax.Array
    returns: jax.Array


def _flat(x: jax.Array) -> jax.Array:
    """``[T, N, ...] -> [T * N, ...]``."""
    return x.reshape(-1, *x.shape[2:])


def _rollout(data: Transition | base.BehaviourRollout) -> tuple[Transition, jax.Array | None]:
    """``(rollout [T, N], behaviour log-probs [T, N] or None)`` of a phase's data."""
    if isinstance(data, base.BehaviourRollout):
        return data.traj, data.extras["logp"]
    return data, None


@dataclass(frozen=True, eq=False)
class Learner:
    """PPO bound to its config, env and sizes: its first state, acting and the two phases."""

    cfg: PPOConfig
    policy: ppo_policy.Policy
    value_net: networks.ValueNet
    tx: optax.GradientTransformation
    obs_shape: tuple[int, ...]
    batch_size: int
    total_updates: int  # optimiser steps in the whole run: the lr anneals to 0 over them
    spec: EnvSpec | None = None  # the env's: its legal-action masks (None: none)

    def legal(self, obs: jax.Array) -> jax.Array | None:
        """The legal actions ``[B, K]`` of raw observations ``[B, ...]``; None: no masks."""
        return None if self.spec is None else masks.legal(self.spec, obs)

    def init(self, key: jax.Array) -> base.AgentState:
        """The first state: both networks, their optimisers and fresh observation statistics."""
        cfg, tx = self.cfg, self.tx
        k_actor, k_critic = jax.random.split(key)
        obs = jnp.zeros((1, *self.obs_shape))
        actor_params = self.policy.net.init(k_actor, obs)
        critic_params = self.value_net.init(k_critic, obs)
        f32 = lambda name: jnp.asarray(getattr(cfg, name), jnp.float32)
        lr, stats = f32("lr"), common.stats_init(self.obs_shape)
        return base.AgentState(
            PPOActor(
                actor_params, tx.init(actor_params), lr, stats, f32("clip_eps"), f32("ent_coef")
            ),
            PPOCritic(
                critic_params,
                tx.init(critic_params),
                lr,
                *(f32(name) for name in ("gamma", "gae_lambda", "vf_coef", "reward_scaling")),
            ),
        )

    def norm(self, stats: common.RunningStats, obs: jax.Array) -> jax.Array:
        """Observations as the networks read them: normalised when ``normalize_obs``."""
        return common.normalize(stats, obs) if self.cfg.normalize_obs else obs

    def act(self, state: PPOActor, obs: jax.Array, key: jax.Array, deterministic: bool):
        """An env action per observation ``[N, ...]``: sampled, or the most likely (a legal
        one)."""
        normed = self.norm(state.obs_stats, obs)
        return self.policy.sample(state.params, normed, key, deterministic, self.legal(obs))

    def behaviour(self, state: PPOActor, obs: jax.Array, key: jax.Array):
        """Act (sampling) and return the log-probability of each action: ``[N]``."""
        action = self.act(state, obs, key, False)
        logp, _ = self.policy.log_prob_entropy(
            state.params, self.norm(state.obs_stats, obs), action, ok=self.legal(obs)
        )
        return action, {"logp": logp}

    def annealed(self, opt_state: PyTree, lr: jax.Array) -> PyTree:
        """The optimiser state with this step's learning rate (linear decay to 0)."""
        if not self.cfg.anneal_lr:
            return opt_state
        frac = 1.0 - common.opt_step_count(opt_state) / self.total_updates
        return common.set_learning_rate(opt_state, lr * jnp.maximum(frac, 0.0))

    def advantages(self, view: CriticView, stats, traj: Transition):
        """GAE(lambda) ``(advantages, returns)`` ``[T, N]`` of a rollout under V(params),
        with the view's gamma, lambda and reward scale."""
        obs, next_obs = self.norm(stats, traj.obs), self.norm(stats, traj.next_obs)
        # at a scale of 1 the rewards themselves, not their product with the leaf: XLA
        # fuses a product into GAE's sums otherwise than the rewards (a changed rounding
        # of the default run; a select keeps the program's numbers as they were)
        scale = view.reward_scaling
        reward = jnp.where(scale == 1.0, traj.reward, traj.reward * scale)
        traj = traj._replace(obs=obs, next_obs=next_obs, reward=reward)
        return ppo_losses.advantages(self.value_net, view.params, view.gamma, view.gae_lambda, traj)

    # ---------------------------------------------------------------- critic: value fn
    def value_step(self, c: PPOCritic, loss_fn: Callable[[PyTree], Any]):
        """One gradient step of the value function on ``loss_fn(params) -> (loss, values)``
        at the annealed learning rate, with its metrics (both learners' updates)."""
        opt_state = self.annealed(c.opt_state, c.lr)
        params, opt_state, loss, v, gnorm = common.gradient_step(
            self.tx, c.params, opt_state, loss_fn
        )
        finite = common.all_finite(loss, gnorm)
        return c._replace(params=params, opt_state=opt_state), {
            "value_loss": loss,
            "value_mean": v.mean(),
            "critic_grad_norm": gnorm,
            "finite": finite.astype(jnp.float32),
        }

    def update_critic(self, c: PPOCritic, batch: ValueBatch):
        """One gradient step of the value function on a minibatch."""

        def loss_fn(params):
            v = self.value_net.apply(params, batch.obs)
            return ppo_losses.value_loss(v, batch.returns, c.vf_coef), v

        return self.value_step(c, loss_fn)

    def critic_phase(self, c: PPOCritic, stats: common.RunningStats, data, key: jax.Array):
        """Minibatch epochs of the value function towards the rollout's GAE returns."""
        # returns from the critic's own params at the start of the phase
        traj, _ = _rollout(data)
        _, returns = self.advantages(critic_view(c), stats, traj)
        data = ValueBatch(_flat(self.norm(stats, traj.obs)), _flat(returns))
        return common.minibatch_epochs(
            self.update_critic, c, data, key, self.cfg.epochs, self.batch_size
        )

    # ---------------------------------------------------------------- actor: policy
    def policy_step(self, a: PPOActor, loss_fn: Callable[[PyTree], Any]):
        """One gradient step of the policy on ``loss_fn(params) -> (loss, info)`` at the
        annealed learning rate, with the policy's metrics (both learners' updates)."""
        opt_state = self.annealed(a.opt_state, a.lr)
        params, opt_state, loss, info, gnorm = common.gradient_step(
            self.tx, a.params, opt_state, loss_fn
        )
        finite = common.all_finite(loss, gnorm)
        lr = optax.tree_utils.tree_get(opt_state, "learning_rate")
        return a._replace(params=params, opt_state=opt_state), {
            "actor_loss": loss,
            "entropy": info.entropy,
            "approx_kl": info.approx_kl,
            "clip_frac": info.clip_frac,
            "actor_grad_norm": gnorm,
            "lr": lr,
            "finite": finite.astype(jnp.float32),
        }

    def update_actor(self, a: PPOActor, batch: PolicyBatch):
        """One gradient step of the policy's clipped surrogate on a minibatch."""
        cfg = self.cfg
        adv = (
            ppo_losses.normalized(batch.advantage) if cfg.normalize_advantages else batch.advantage
        )

        def loss_fn(params):
            logp, entropy = self.policy.log_prob_entropy(
                params, batch.obs, batch.action, batch.noise, batch.ok
            )
            return ppo_losses.policy_loss(
                logp,
                batch.old_logp,
                adv,
                entropy,
                a.clip_eps,
                a.ent_coef,
                self.policy.max_log_ratio,
            )

        return self.policy_step(a, loss_fn)

    def actor_phase(self, a: PPOActor, view: CriticView, data, key: jax.Array):
        """Minibatch epochs of the policy on the rollout's advantages, then the obs statistics."""
        # advantages from the critic's params at the start of the iteration; old
        # log-probs from the params (and observation statistics) that acted: this actor
        # on the device path, the workers' own numbers for a behaviour rollout
        traj, behaviour_logp = _rollout(data)
        adv, _ = self.advantages(view, a.obs_stats, traj)
        obs = _flat(self.norm(a.obs_stats, traj.obs))
        action = _flat(traj.action)
        ok = self.legal(_flat(traj.obs))
        if behaviour_logp is None:
            old_logp, _ = self.policy.log_prob_entropy(a.params, obs, action, ok=ok)
        else:
            old_logp = _flat(behaviour_logp)
        noise = self.policy.entropy_noise(key, action.shape)  # None but for the tanh policy
        data = PolicyBatch(obs, action, jax.lax.stop_gradient(old_logp), _flat(adv), noise, ok)
        a, metrics = common.minibatch_epochs(
            self.update_actor, a, data, key, self.cfg.epochs, self.batch_size
        )
        if self.cfg.normalize_obs:  # the next rollout (and the critic's view) use the new stats
            a = a._replace(obs_stats=common.stats_update(a.obs_stats, _flat(traj.obs)))
        return a, metrics


@dataclass(frozen=True, eq=False)
class RecurrentLearner(Learner):
    """PPO with a recurrent actor and value function (``--ppo.memory``): the same
    phases on sequences of the rollout replayed from its starting carry
    (:mod:`~jaxspreeze.algos.ppo_recurrent`)."""

    length: int = 0  # steps per training sequence (--ppo.recurrent-chunk or the rollout)

    def init(self, key: jax.Array) -> base.AgentState:
        """The first state: both recurrent networks, their optimisers, fresh statistics."""
        cfg, tx = self.cfg, self.tx
        k_actor, k_critic = jax.random.split(key)
        obs, resets = jnp.zeros((1, 1, *self.obs_shape)), jnp.zeros((1, 1), bool)
        actor_net, value_net = self.policy.net, self.value_net
        actor_params = actor_net.init(k_actor, actor_net.initialize_carry(1), obs, resets)
        critic_params = value_net.init(k_critic, value_net.initialize_carry(1), obs, resets)
        f32 = lambda name: jnp.asarray(getattr(cfg, name), jnp.float32)
        lr, stats = f32("lr"), common.stats_init(self.obs_shape)
        actor = ppo_recurrent.RecurrentActor(
            actor_params,
            tx.init(actor_params),
            lr,
            stats,
            f32("clip_eps"),
            f32("ent_coef"),
            critic_params,
        )
        critic = PPOCritic(
            critic_params,
            tx.init(critic_params),
            lr,
            *(f32(name) for name in ("gamma", "gae_lambda", "vf_coef", "reward_scaling")),
        )
        return base.AgentState(actor, critic)

    def initial_carry(self, n: int):
        """Both cells' carries at an episode's first step, for ``n`` envs."""
        return ppo_recurrent.initial(self.policy.net, self.value_net, n)

    def step(self, a, carry, obs: jax.Array, deterministic: bool):
        """One step of both cells: ``(actor's outputs, carry)``; a deterministic step (the
        evaluations) passes the value cell's carry through."""
        actor_c, value_c = carry
        obs = self.norm(a.obs_stats, obs)
        actor_c, out = ppo_recurrent.step(self.policy.net, a.params, actor_c, obs)
        if not deterministic:
            value_c, _ = ppo_recurrent.step(self.value_net, a.value_params, value_c, obs)
        return out, (actor_c, value_c)

    def act_carry(self, a, carry, obs: jax.Array, key: jax.Array, deterministic: bool):
        """:attr:`Algorithm.act`: an action per observation and the next carry."""
        out, carry = self.step(a, carry, obs, deterministic)
        return self.policy.sample_out(out, key, deterministic, self.legal(obs)), carry

    def behaviour_carry(self, a, carry, obs: jax.Array, key: jax.Array):
        """:attr:`Algorithm.behaviour`: act, with the log-probability and the carry each
        row acted with (its first row is a host rollout's stored start)."""
        out, next_carry = self.step(a, carry, obs, False)
        ok = self.legal(obs)
        action = self.policy.sample_out(out, key, False, ok)
        logp, _ = self.policy.log_prob_entropy_out(out, action, ok=ok)
        return action, {"logp": logp, **ppo_recurrent.carry_leaves(carry)}, next_carry

    def unpack(self, data):
        """``(rollout, (actor start, value start), behaviour log-probs or None)``."""
        return ppo_recurrent.unpack(data, self.initial_carry(1))

    def seq_advantages(self, view: CriticView, stats, traj: Transition, start, resets):
        """GAE ``(advantages, returns, value carries)`` ``[T, N]`` of the value cell unrolled
        from ``start`` under the view's parameters."""
        obs, next_obs = self.norm(stats, traj.obs), self.norm(stats, traj.next_obs)
        v, next_v, carries = ppo_recurrent.unroll_values(
            self.value_net, view.params, start, obs, next_obs, resets
        )
        reward = traj.reward * view.reward_scaling
        adv, returns = common.gae(
            reward, v, next_v, traj.terminated, traj.truncated, view.gamma, view.gae_lambda
        )
        return adv, returns, carries

    def update_critic(self, c: PPOCritic, batch: ppo_recurrent.SeqValueBatch):
        """One gradient step of the value function on a minibatch of sequences."""

        def loss_fn(params):
            _, v, _ = self.value_net.apply(params, batch.start, batch.obs, batch.resets)
            return ppo_losses.value_loss(v, batch.returns.reshape(-1), c.vf_coef), v

        return self.value_step(c, loss_fn)

    def critic_phase(self, c: PPOCritic, stats: common.RunningStats, data, key: jax.Array):
        """Epochs of the value function on the rollout's sequences towards its GAE returns."""
        traj, (_, start), _ = self.unpack(data)
        resets = episode_starts(traj)
        _, returns, carries = self.seq_advantages(critic_view(c), stats, traj, start, resets)
        L, seq = self.length, lambda x: ppo_recurrent.sequences(x, self.length)
        batch = ppo_recurrent.SeqValueBatch(
            seq(self.norm(stats, traj.obs)),
            seq(returns),
            seq(resets),
            ppo_recurrent.chunk_starts(start, carries, L),
        )
        return ppo_recurrent.sequence_epochs(
            self.update_critic, c, batch, key, self.cfg.epochs, self.batch_size // L
        )

    def update_actor(self, a, batch: ppo_recurrent.SeqPolicyBatch):
        """One gradient step of the clipped surrogate on a minibatch of sequences."""
        cfg, flat = self.cfg, lambda x: x.reshape(-1, *x.shape[2:])
        adv = flat(batch.advantage)
        adv = ppo_losses.normalized(adv) if cfg.normalize_advantages else adv
        noise = None if batch.noise is None else flat(batch.noise)
        ok = None if batch.ok is None else flat(batch.ok)

        def loss_fn(params):
            _, out, _ = self.policy.net.apply(params, batch.start, batch.obs, batch.resets)
            logp, entropy = self.policy.log_prob_entropy_out(out, flat(batch.action), noise, ok)
            return ppo_losses.policy_loss(
                logp,
                flat(batch.old_logp),
                adv,
                entropy,
                a.clip_eps,
                a.ent_coef,
                self.policy.max_log_ratio,
            )

        return self.policy_step(a, loss_fn)

    def policy_batch(self, a, view: CriticView, data, key: jax.Array):
        """The rollout's sequences for the policy update: advantages from the view's value
        cell, old log-probabilities from the actor's unroll (device) or the workers'
        (host), each sequence's starting carry from the actor's unroll."""
        traj, (actor_start, value_start), behaviour_logp = self.unpack(data)
        resets = episode_starts(traj)
        adv, _, _ = self.seq_advantages(view, a.obs_stats, traj, value_start, resets)
        T, N = traj.reward.shape
        obs = self.norm(a.obs_stats, traj.obs)
        _, out, carries = self.policy.net.apply(a.params, actor_start, obs, resets)
        ok = self.legal(_flat(traj.obs))  # [T * N, K] or None
        if behaviour_logp is None:
            old_logp, _ = self.policy.log_prob_entropy_out(out, _flat(traj.action), ok=ok)
            old_logp = old_logp.reshape(T, N)
        else:
            old_logp = behaviour_logp
        noise = self.policy.entropy_noise(key, traj.action.shape)  # None but for tanh
        L, seq = self.length, lambda x: ppo_recurrent.sequences(x, self.length)
        return ppo_recurrent.SeqPolicyBatch(
            seq(obs),
            seq(traj.action),
            seq(jax.lax.stop_gradient(old_logp)),
            seq(adv),
            seq(resets),
            None if noise is None else seq(noise),
            ppo_recurrent.chunk_starts(actor_start, carries, L),
            None if ok is None else seq(ok.reshape(T, N, -1)),
        )

    def actor_phase(self, a, view: CriticView, data, key: jax.Array):
        """Epochs of the policy on the rollout's sequences, then the observation statistics
        and the value parameters the next rollout steps the value cell with."""
        batch = self.policy_batch(a, view, data, key)
        a, metrics = ppo_recurrent.sequence_epochs(
            self.update_actor, a, batch, key, self.cfg.epochs, self.batch_size // self.length
        )
        if self.cfg.normalize_obs:
            traj = self.unpack(data)[0]
            a = a._replace(obs_stats=common.stats_update(a.obs_stats, _flat(traj.obs)))
        return a._replace(value_params=view.params), metrics


def critic_view(c: PPOCritic) -> CriticView:
    """The critic side's parameters and what the advantages need of its leaves."""
    return CriticView(c.params, c.gamma, c.gae_lambda, c.reward_scaling)


def make(cfg: PPOConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind PPO to its config, env spec and the run's rollout and minibatch sizes (fields
    left unset take the env family's defaults, as ``config.resolve`` gives them)."""
    cfg = base.filled(SPEC, cfg, base.family_of(spec.name))
    rollout_size = run.num_envs * run.rollout_steps
    updates_per_phase = cfg.epochs * (rollout_size // run.batch_size)
    total_updates = max(math.ceil(run.total_steps / rollout_size), 1) * updates_per_phase
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    if cfg.memory != "none":
        return _recurrent(cfg, spec, run, torso, total_updates, updates_per_phase)
    learner = Learner(
        cfg,
        policy=ppo_policy.for_env(spec, cfg.hidden, cfg.policy, cfg.tanh_std, cfg.min_std, torso),
        value_net=networks.ValueNet(cfg.hidden, spec.critic_obs, torso),
        tx=common.adam(cfg.lr, cfg.max_grad_norm),
        obs_shape=spec.obs_shape,
        batch_size=run.batch_size,
        total_updates=total_updates,
        spec=spec,
    )
    return base.Algorithm(
        name="ppo",
        on_policy=True,
        init=learner.init,
        act=base.feed_forward(learner.act),
        actor_view=lambda a: a.obs_stats,
        critic_view=critic_view,
        critic_phase=learner.critic_phase,
        actor_phase=learner.actor_phase,
        actor_steps_per_iteration=updates_per_phase,
        critic_steps_per_iteration=updates_per_phase,
        behaviour=base.feed_forward_behaviour(learner.behaviour),
    )


def _recurrent(
    cfg: PPOConfig, spec: EnvSpec, run: Any, torso: str, total_updates: int, updates: int
) -> base.Algorithm:
    """:func:`make`'s recurrent PPO (``--ppo.memory``): its learner and carry."""
    policy = ppo_policy.for_env(
        spec,
        cfg.hidden,
        cfg.policy,
        cfg.tanh_std,
        cfg.min_std,
        torso,
        cfg.memory,
        cfg.memory_size,
    )
    value_net = networks.RecurrentNet(
        "value", cfg.hidden, 1, cfg.memory, cfg.memory_size, spec.critic_obs, torso
    )
    learner = RecurrentLearner(
        cfg,
        policy=policy,
        value_net=value_net,
        tx=common.adam(cfg.lr, cfg.max_grad_norm),
        obs_shape=spec.obs_shape,
        batch_size=run.batch_size,
        total_updates=total_updates,
        spec=spec,
        length=sequence_length(cfg, run.rollout_steps),
    )
    return base.Algorithm(
        name="ppo",
        on_policy=True,
        init=learner.init,
        act=learner.act_carry,
        actor_view=lambda a: a.obs_stats,
        critic_view=critic_view,
        critic_phase=learner.critic_phase,
        actor_phase=learner.actor_phase,
        actor_steps_per_iteration=updates,
        critic_steps_per_iteration=updates,
        behaviour=learner.behaviour_carry,
        initial_carry=learner.initial_carry,
    )


# the fields a population may vary per member: each is a leaf of the state (the learning
# rate both sides' leaves and optimiser states hold; anneal_lr reads the leaves; the clip
# range and entropy coefficient on the actor side, the value-loss coefficient and reward
# scale on the critic side)
MEMBER_FIELDS = {
    "lr": members.all_of(
        *(members.leaf(side, "lr") for side in ("actor", "critic")),
        *(members.learning_rate(side) for side in ("actor", "critic")),
    ),
    "gamma": members.leaf("critic", "gamma"),
    "gae_lambda": members.leaf("critic", "gae_lambda"),
    **members.leaves("actor", "clip_eps", "ent_coef"),
    **members.leaves("critic", "vf_coef", "reward_scaling"),
}
