"""PQN (Gallici et al., 2025, "Simplifying Deep Temporal Difference Learning"): parallelised
Q-learning with no replay buffer and no target network.

A LayerNorm Q-network acts epsilon-greedily in many vmapped envs (epsilon falls linearly
from ``eps_start`` to ``eps_end`` over the first ``eps_decay`` of the run); each fresh
rollout ``[T, N]`` gets Q(lambda) targets by a reverse scan (:func:`q_lambda_targets`,
from the network as it acted), then several epochs of shuffled minibatches regress
``Q(s, a)`` on them (RAdam or Adam, the gradients' norm clipped, the learning rate
annealed linearly to 0 when ``anneal_lr``).

One network acts and learns, so the whole state is the actor side (acting, the
evaluation, the saved policy and the host workers read it) and the critic side is empty:
its phase does nothing, and the spec says so (``splits=False``: no split placement). The
epsilon schedule and the learning rate's annealing read the optimiser's step count
(every iteration takes the same number of steps), so they resume with the checkpoint.

Legal-action masks (:mod:`~jaxspreeze.algos.masks`): the greedy action is the argmax of
the legal actions, a random one is drawn among them, and the targets' ``max_a Q(s', a)``
is over the actions legal in ``s'``.

Recurrent PQN (``--pqn.memory gru|lstm``, :class:`RecurrentLearner`): the Q-network has a
cell between its torso and its hidden layers (:mod:`~jaxspreeze.algos.pqn_recurrent`),
whose state (and, with ``--pqn.last-action``, the previous action) is the policy's carry;
the targets and the epochs replay each env's rollout from the carry it started with, a
minibatch holding whole envs' rollouts in time order (recurrent PPO's sequence machinery,
:mod:`~jaxspreeze.algos.ppo_recurrent`, with one sequence per env).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks
from jaxspreeze.algos import (
    base,
    common,
    epsilon_config,
    masks,
    members,
    ppo_recurrent,
    pqn_recurrent,
)
from jaxspreeze.algos.base import episode_starts
from jaxspreeze.algos.pqn_config import (  # noqa: F401
    DEFAULTS,
    OPTIMIZERS,
    SPEC,
    PQNConfig,
    supports,
    validate,
)
from jaxspreeze.core.types import Carry, EnvSpec, PyTree, Transition


class PQNActor(NamedTuple):
    """The whole state: the Q-network, its optimiser and the hyperparameters' leaves (each
    a float32 scalar a sweep may set per member)."""

    params: PyTree
    opt_state: PyTree
    lr: jax.Array
    gamma: jax.Array
    q_lambda: jax.Array
    eps_start: jax.Array
    eps_end: jax.Array
    eps_decay: jax.Array
    reward_scaling: jax.Array


class QBatch(NamedTuple):
    """One minibatch of the regression, ``[B, ...]``: observations, actions, targets."""

    obs: jax.Array
    action: jax.Array
    target: jax.Array


def q_lambda_targets(
    reward: jax.Array,
    next_q: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: jax.Array | float,
    lam: jax.Array | float,
) -> jax.Array:
    """Q(lambda) targets ``[T, N]`` of a rollout by a reverse scan (Peng's Q(lambda), PQN's).

    ``next_q [T, N]`` is ``max_a Q(next_obs, a)``, where ``next_obs`` is the final
    observation at an episode end. ``G_t = r_t + gamma (1 - terminated_t) [(1 - lambda)
    next_q_t + lambda G_{t+1}]``, where the trace stops at every episode end (after a
    truncation ``G_{t+1}`` is ``next_q_t``: the truncated step bootstraps from its final
    observation) and at the rollout's last step (``G_T = next_q_{T-1}``). lambda 0 is
    one-step Q-learning, lambda 1 the Monte Carlo return up to the episode's or the
    rollout's end, bootstrapped there unless the episode terminated.
    """
    not_term = 1.0 - terminated.astype(jnp.float32)
    cont = not_term * (1.0 - truncated.astype(jnp.float32))

    def step(next_return, xs):
        r, q, nt, c = xs
        g = r + gamma * nt * (q + lam * c * (next_return - q))
        return g, g

    _, targets = jax.lax.scan(step, next_q[-1], (reward, next_q, not_term, cont), reverse=True)
    return targets


def epsilon(
    start: jax.Array, end: jax.Array, decay: jax.Array, step: jax.Array, total: int
) -> jax.Array:
    """Epsilon after ``step`` of the run's ``total`` updates: ``start`` falling linearly to
    ``end`` over the first ``decay`` (a fraction in (0, 1]) of them, then ``end``."""
    frac = jnp.clip(step / jnp.maximum(decay * total, 1e-8), 0.0, 1.0)
    return start + (end - start) * frac


def epsilon_greedy(
    q: jax.Array, key: jax.Array, eps: jax.Array, ok: jax.Array | None = None
) -> jax.Array:
    """An action ``[B]`` (int32) per row of ``q [B, K]``: with probability ``eps`` one drawn
    uniformly among the legal actions ``ok [B, K]`` (None: all), else the legal argmax."""
    k_explore, k_random = jax.random.split(key)
    greedy = jnp.argmax(masks.masked(q, ok), -1).astype(jnp.int32)
    random = masks.random_legal(k_random, ok, greedy.shape, q.shape[-1])
    return jnp.where(jax.random.uniform(k_explore, greedy.shape) < eps, random, greedy)


def _flat(x: jax.Array) -> jax.Array:
    """``[T, N, ...] -> [T * N, ...]``."""
    return x.reshape(-1, *x.shape[2:])


@dataclass(frozen=True, eq=False)
class Learner:
    """PQN bound to its config, env and sizes: its first state, acting and its phase."""

    cfg: PQNConfig
    net: networks.DiscreteQNet
    tx: optax.GradientTransformation
    obs_shape: tuple[int, ...]
    batch_size: int
    total_updates: int  # optimiser steps in the whole run: epsilon and the lr follow them
    spec: EnvSpec | None = None  # the env's: its legal-action masks (None: none)

    def legal(self, obs: jax.Array) -> jax.Array | None:
        """The legal actions ``[B, K]`` of observations ``[B, ...]``; None: no masks."""
        return None if self.spec is None else masks.legal(self.spec, obs)

    def init(self, key: jax.Array) -> base.AgentState:
        """The first state: the Q-network, its optimiser and the leaves; no critic side."""
        return self.first_state(self.net.init(key, jnp.zeros((1, *self.obs_shape))))

    def first_state(self, params: PyTree) -> base.AgentState:
        """The state of a fresh Q-network's ``params``: its optimiser and the leaves."""
        f32 = lambda name: jnp.asarray(getattr(self.cfg, name), jnp.float32)
        names = ("gamma", "q_lambda", "eps_start", "eps_end", "eps_decay", "reward_scaling")
        actor = PQNActor(params, self.tx.init(params), f32("lr"), *map(f32, names))
        return base.AgentState(actor, ())

    def epsilon(self, a: PQNActor) -> jax.Array:
        """This iteration's epsilon (from the optimiser's step count)."""
        step = common.opt_step_count(a.opt_state)
        return epsilon(a.eps_start, a.eps_end, a.eps_decay, step, self.total_updates)

    def act(self, a: PQNActor, obs: jax.Array, key: jax.Array, deterministic: bool):
        """An action per observation ``[N, ...]``: the greedy one (``deterministic``), else
        epsilon-greedy; a legal one."""
        return self.choose(a, self.net.apply(a.params, obs), obs, key, deterministic)

    def choose(
        self, a: PQNActor, q: jax.Array, obs: jax.Array, key: jax.Array, deterministic: bool
    ):
        """The action of Q-values ``q [N, K]`` of observations ``obs [N, ...]``: the legal
        greedy one (``deterministic``), else epsilon-greedy among the legal ones."""
        ok = self.legal(obs)
        if deterministic:
            return jnp.argmax(masks.masked(q, ok), -1).astype(jnp.int32)
        return epsilon_greedy(q, key, self.epsilon(a), ok)

    def behaviour(self, a: PQNActor, obs: jax.Array, key: jax.Array):
        """Act as the rollout does; nothing else is needed of the behaviour policy."""
        return self.act(a, obs, key, False), {}

    def targets(self, a: PQNActor, traj: Transition) -> jax.Array:
        """The rollout's Q(lambda) targets ``[T, N]`` under the network as it is now."""
        next_obs = _flat(traj.next_obs)
        q = masks.masked(self.net.apply(a.params, next_obs), self.legal(next_obs))
        next_q = jnp.max(q, -1).reshape(traj.reward.shape)
        return self.q_lambda(a, traj, next_q)

    def q_lambda(self, a: PQNActor, traj: Transition, next_q: jax.Array) -> jax.Array:
        """The Q(lambda) targets ``[T, N]`` of a rollout whose ``max_a Q(next_obs, a)`` is
        ``next_q [T, N]``, with the state's gamma, lambda and reward scale."""
        reward = traj.reward * a.reward_scaling
        targets = q_lambda_targets(
            reward, next_q, traj.terminated, traj.truncated, a.gamma, a.q_lambda
        )
        return jax.lax.stop_gradient(targets)

    def update(self, a: PQNActor, batch: QBatch):
        """One gradient step of ``0.5 (Q(s, a) - target)^2`` on a minibatch."""

        def loss_fn(params):
            return td_loss(self.net.apply(params, batch.obs), batch.action, batch.target)

        return self.q_step(a, loss_fn)

    def q_step(self, a: PQNActor, loss_fn):
        """One gradient step of the Q-network on ``loss_fn(params) -> (loss, Q(s, a))`` at
        the (annealed) learning rate, with its metrics."""
        opt_state = a.opt_state
        if self.cfg.anneal_lr:
            frac = 1.0 - common.opt_step_count(opt_state) / self.total_updates
            opt_state = common.set_learning_rate(opt_state, a.lr * jnp.maximum(frac, 0.0))
        params, opt_state, loss, chosen, gnorm = common.gradient_step(
            self.tx, a.params, opt_state, loss_fn
        )
        lr = optax.tree_utils.tree_get(opt_state, "learning_rate")
        return a._replace(params=params, opt_state=opt_state), {
            "q_loss": loss,
            "q_mean": chosen.mean(),
            "grad_norm": gnorm,
            "lr": lr,
            "finite": common.all_finite(loss, gnorm).astype(jnp.float32),
        }

    def actor_phase(self, a: PQNActor, view: Any, data: Any, key: jax.Array):
        """Targets from the network as it acted, then the minibatch epochs on them."""
        traj = data.traj if isinstance(data, base.BehaviourRollout) else data
        eps = self.epsilon(a)  # the epsilon this rollout was collected with
        batch = QBatch(_flat(traj.obs), _flat(traj.action), _flat(self.targets(a, traj)))
        a, metrics = common.minibatch_epochs(
            self.update, a, batch, key, self.cfg.epochs, self.batch_size
        )
        return a, {**metrics, "epsilon": eps}


def td_loss(q: jax.Array, action: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(0.5 mean (Q(s, a) - target)^2, Q(s, a) [B])`` of Q-values ``q [B, K]``, the
    actions taken ``[B]`` and their targets ``[B]``."""
    chosen = jnp.take_along_axis(q, action[:, None].astype(jnp.int32), -1)[:, 0]
    return 0.5 * jnp.mean((chosen - target) ** 2), chosen


class SeqQBatch(NamedTuple):
    """Whole envs' rollouts of a recurrent PQN's regression, time-major ``[T, S, ...]``:
    observations, actions, targets, episode starts and the previous actions' one-hots
    (None without ``--pqn.last-action``); ``start`` the cell's carry ``[S, ...]`` at each
    rollout's first step (:func:`~jaxspreeze.algos.ppo_recurrent.pick` takes envs)."""

    obs: jax.Array
    action: jax.Array
    target: jax.Array
    resets: jax.Array
    prev: jax.Array | None
    start: Carry


@dataclass(frozen=True, eq=False)
class RecurrentLearner(Learner):
    """PQN with a recurrent Q-network (``--pqn.memory``): acting carries the cell's state
    (and the previous action), and the epochs regress whole envs' rollouts replayed from
    their starting carry (:mod:`~jaxspreeze.algos.pqn_recurrent`)."""

    last_action: bool = False  # the previous action is fed to the cell (--pqn.last-action)

    def init(self, key: jax.Array) -> base.AgentState:
        """The first state: the recurrent Q-network, its optimiser and the leaves."""
        carry = self.initial_carry(1)
        obs, resets = jnp.zeros((1, 1, *self.obs_shape)), jnp.zeros((1, 1), bool)
        extra = carry.last_action[None] if self.last_action else None
        return self.first_state(self.net.init(key, carry.cell, obs, resets, extra))

    def initial_carry(self, n: int) -> pqn_recurrent.QCarry:
        """The carry at an episode's first step for ``n`` envs (zeros)."""
        return pqn_recurrent.initial(self.net, self.last_action, n)

    def act_carry(self, a: PQNActor, carry, obs: jax.Array, key: jax.Array, deterministic: bool):
        """:attr:`Algorithm.act`: an action per observation and the next carry."""
        q, cell = pqn_recurrent.step(self.net, a.params, carry, obs)
        action = self.choose(a, q, obs, key, deterministic)
        return action, pqn_recurrent.after(cell, action, carry, self.net.num_actions)

    def behaviour_carry(self, a: PQNActor, carry, obs: jax.Array, key: jax.Array):
        """:attr:`Algorithm.behaviour`: act, with the carry each row acted with (its first
        row is a host rollout's stored start)."""
        action, next_carry = self.act_carry(a, carry, obs, key, False)
        return action, ppo_recurrent.carry_leaves(carry), next_carry

    def unpack(self, data: Any) -> tuple[Transition, pqn_recurrent.QCarry]:
        """``(rollout [T, N], starting carry)`` of a phase's data: a device rollout
        (:class:`~jaxspreeze.algos.base.Sequences`) or a host one (its carries in the
        extras)."""
        if isinstance(data, base.BehaviourRollout):
            like = self.initial_carry(1)
            return data.traj, ppo_recurrent.carry_from_extras(data.extras, like)
        if isinstance(data, base.Sequences):
            return data.traj, data.start
        raise TypeError(
            f"a recurrent PQN trains on Sequences or a BehaviourRollout, got {type(data)}"
        )

    def batch(self, a: PQNActor, traj: Transition, start: pqn_recurrent.QCarry) -> SeqQBatch:
        """The rollout's regression: Q(lambda) targets from the network unrolled from
        ``start`` (as it acted), each env's whole rollout a sequence."""
        resets = episode_starts(traj)
        _, next_q, prev = pqn_recurrent.unroll_q(
            self.net, a.params, start, traj.obs, traj.action, traj.next_obs, resets
        )
        ok = self.legal(_flat(traj.next_obs))
        next_q = jnp.max(masks.masked(_flat(next_q), ok), -1).reshape(traj.reward.shape)
        targets = self.q_lambda(a, traj, next_q)
        return SeqQBatch(traj.obs, traj.action, targets, resets, prev, start.cell)

    def update_sequences(self, a: PQNActor, batch: SeqQBatch):
        """One gradient step of the TD loss on a minibatch of whole envs' rollouts."""

        def loss_fn(params):
            _, q, _ = self.net.apply(params, batch.start, batch.obs, batch.resets, batch.prev)
            return td_loss(q, batch.action.reshape(-1), batch.target.reshape(-1))

        return self.q_step(a, loss_fn)

    def actor_phase(self, a: PQNActor, view: Any, data: Any, key: jax.Array):
        """Targets from the network as it acted, then the epochs over whole envs."""
        traj, start = self.unpack(data)
        eps = self.epsilon(a)  # the epsilon this rollout was collected with
        batch = self.batch(a, traj, start)
        envs_per_batch = self.batch_size // traj.reward.shape[0]
        a, metrics = ppo_recurrent.sequence_epochs(
            self.update_sequences, a, batch, key, self.cfg.epochs, envs_per_batch
        )
        return a, {**metrics, "epsilon": eps}


def _nothing(state: PyTree, view: PyTree, data: Any, key: jax.Array):
    """The empty critic side's phase: nothing to learn."""
    return state, {}


def q_network(cfg: PQNConfig, spec: EnvSpec) -> networks.DiscreteQNet:
    """The Q-network of ``cfg`` for ``spec``'s observations and actions (its torso
    resolved: ``auto`` from the observation's shape)."""
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    return networks.DiscreteQNet(cfg.hidden, spec.action_dim, spec.actor_obs, cfg.layer_norm, torso)


def make(cfg: PQNConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind PQN to its config, env spec and the run's rollout and minibatch sizes."""
    rollout_size = run.num_envs * run.rollout_steps
    updates_per_phase = cfg.epochs * (rollout_size // run.batch_size)
    total_updates = max(math.ceil(run.total_steps / rollout_size), 1) * updates_per_phase
    optimizer = common.radam if cfg.optimizer == "radam" else common.adam
    if cfg.memory != "none":
        return _recurrent(cfg, spec, run, optimizer, max(total_updates, 1), updates_per_phase)
    learner = Learner(
        cfg,
        net=q_network(cfg, spec),
        tx=optimizer(cfg.lr, cfg.max_grad_norm),
        obs_shape=spec.obs_shape,
        batch_size=run.batch_size,
        total_updates=max(total_updates, 1),
        spec=spec,
    )
    return _algorithm(
        learner,
        updates_per_phase,
        act=base.feed_forward(learner.act),
        behaviour=base.feed_forward_behaviour(learner.behaviour),
    )


def _algorithm(learner: Learner, updates: int, **acting: Any) -> base.Algorithm:
    """PQN's :class:`~jaxspreeze.algos.base.Algorithm` of ``learner`` (``updates`` gradient
    steps per iteration) with its ``acting`` fields (act, behaviour, initial_carry)."""
    return base.Algorithm(
        name="pqn",
        on_policy=True,
        init=learner.init,
        actor_view=lambda a: (),
        critic_view=lambda c: (),
        critic_phase=_nothing,
        actor_phase=learner.actor_phase,
        actor_steps_per_iteration=updates,
        critic_steps_per_iteration=0,
        layer_norm=learner.cfg.layer_norm,
        **acting,
    )


def _recurrent(
    cfg: PQNConfig, spec: EnvSpec, run: Any, optimizer: Any, total_updates: int, updates: int
) -> base.Algorithm:
    """:func:`make`'s recurrent PQN (``--pqn.memory``): its learner and carry."""
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    net = networks.RecurrentQNet(
        cfg.hidden,
        spec.action_dim,
        cfg.memory,
        cfg.memory_size,
        spec.actor_obs,
        cfg.layer_norm,
        torso,
    )
    learner = RecurrentLearner(
        cfg,
        net=net,
        tx=optimizer(cfg.lr, cfg.max_grad_norm),
        obs_shape=spec.obs_shape,
        batch_size=run.batch_size,
        total_updates=total_updates,
        spec=spec,
        last_action=cfg.last_action,
    )
    return _algorithm(
        learner,
        updates,
        act=learner.act_carry,
        behaviour=learner.behaviour_carry,
        initial_carry=learner.initial_carry,
    )


# the fields a population may vary per member: each is a leaf of the (actor) state, the
# learning rate also in the optimiser's state
MEMBER_FIELDS = {
    "lr": members.all_of(members.leaf("actor", "lr"), members.learning_rate("actor")),
    **members.leaves("actor", "gamma", "q_lambda", *epsilon_config.FIELDS, "reward_scaling"),
}
