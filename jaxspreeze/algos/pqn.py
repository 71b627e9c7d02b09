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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks
from jaxspreeze.algos import base, common, masks, members
from jaxspreeze.algos.pqn_config import (  # noqa: F401
    DEFAULTS,
    OPTIMIZERS,
    SPEC,
    PQNConfig,
    supports,
    validate,
)
from jaxspreeze.core.types import EnvSpec, PyTree, Transition


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
        params = self.net.init(key, jnp.zeros((1, *self.obs_shape)))
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
        q, ok = self.net.apply(a.params, obs), self.legal(obs)
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
        reward = traj.reward * a.reward_scaling
        targets = q_lambda_targets(
            reward, next_q, traj.terminated, traj.truncated, a.gamma, a.q_lambda
        )
        return jax.lax.stop_gradient(targets)

    def update(self, a: PQNActor, batch: QBatch):
        """One gradient step of ``0.5 (Q(s, a) - target)^2`` on a minibatch."""

        def loss_fn(params):
            q = self.net.apply(params, batch.obs)
            chosen = jnp.take_along_axis(q, batch.action[:, None].astype(jnp.int32), -1)[:, 0]
            return 0.5 * jnp.mean((chosen - batch.target) ** 2), chosen

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
    learner = Learner(
        cfg,
        net=q_network(cfg, spec),
        tx=optimizer(cfg.lr, cfg.max_grad_norm),
        obs_shape=spec.obs_shape,
        batch_size=run.batch_size,
        total_updates=max(total_updates, 1),
        spec=spec,
    )
    return base.Algorithm(
        name="pqn",
        on_policy=True,
        init=learner.init,
        act=base.feed_forward(learner.act),
        actor_view=lambda a: (),
        critic_view=lambda c: (),
        critic_phase=_nothing,
        actor_phase=learner.actor_phase,
        actor_steps_per_iteration=updates_per_phase,
        critic_steps_per_iteration=0,
        behaviour=base.feed_forward_behaviour(learner.behaviour),
    )


# the fields a population may vary per member: each is a leaf of the (actor) state, the
# learning rate also in the optimiser's state
MEMBER_FIELDS = {
    "lr": members.all_of(members.leaf("actor", "lr"), members.learning_rate("actor")),
    **members.leaves(
        "actor", "gamma", "q_lambda", "eps_start", "eps_end", "eps_decay", "reward_scaling"
    ),
}
