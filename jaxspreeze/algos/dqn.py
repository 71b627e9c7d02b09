"""DQN (Mnih et al., 2015) with double Q-learning (van Hasselt et al., 2016) and n-step returns.

A Q-network learns on the critic side from the replay buffer: each gradient step samples
a batch (runs of ``n_step`` consecutive transitions of one env when ``n_step > 1``,
folded by :func:`~jaxspreeze.algos.common.nstep`), regresses ``Q(s, a)`` on the target
``R + discount * Q_target(s', a*)`` (:func:`td_target`; double DQN: ``a*`` the online
network's argmax, else the target network's max; a termination bootstraps from 0, a
truncation from its final observation) with half the squared error or Huber's loss,
clips the gradient's norm (Adam), and moves the target network towards the online one
every ``target_update_every`` steps (:func:`update_target`: ``tau`` 1 a hard copy, less
Polyak averaging).

The actor side acts with a copy of the Q-network: its phase takes the critic's parameters
as they were at the start of the iteration (the staleness rule), so acting and learning
can run on two devices (``--placement split``). It acts epsilon-greedily
(:func:`epsilon_greedy`), epsilon falling linearly from ``eps_start`` to ``eps_end`` over
the first ``eps_decay`` of the run's gradient steps (read from the critic's step count
that came with the copy, so it resumes with the checkpoint); the warm-up acts uniformly.
Where the env gives legal actions (:mod:`~jaxspreeze.algos.masks`), the greedy and the
random actions are legal ones and the target's max and argmax run over legal next actions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import networks
from jaxspreeze.algos import base, common, fasttd3, masks, members, pqn
from jaxspreeze.algos.dqn_config import (  # noqa: F401
    DEFAULTS,
    LOSSES,
    SPEC,
    DQNConfig,
    supports,
    validate,
)
from jaxspreeze.core.types import EnvSpec, PyTree, Transition


class DQNActor(NamedTuple):
    """The actor side: the Q-network's parameters it acts with (a copy of the critic's),
    the critic's gradient steps when they were copied (epsilon follows them) and the
    epsilon schedule's leaves (float32 scalars a sweep may set per member)."""

    params: PyTree
    updates: jax.Array  # int32: the critic's gradient steps behind ``params``
    eps_start: jax.Array
    eps_end: jax.Array
    eps_decay: jax.Array


class DQNCritic(NamedTuple):
    """The critic side: the online Q-network, its target and optimiser state, the gradient
    steps taken; gamma and tau are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array
    steps: jax.Array  # int32: gradient steps so far


class QView(NamedTuple):
    """What the actor side takes from the critic: its parameters and its step count."""

    params: PyTree
    steps: jax.Array


def epsilon_greedy(
    q: jax.Array, key: jax.Array, eps: jax.Array, ok: jax.Array | None = None
) -> jax.Array:
    """An action ``[B]`` (int32) per row of ``q [B, K]``: with probability ``eps`` one
    drawn uniformly among the legal actions ``ok [B, K]`` (None: all), else the argmax of
    the legal ones."""
    k_explore, k_random = jax.random.split(key)
    greedy = jnp.argmax(masks.masked(q, ok), -1).astype(jnp.int32)
    random = masks.random_legal(k_random, ok, greedy.shape, q.shape[-1])
    return jnp.where(jax.random.uniform(k_explore, greedy.shape) < eps, random, greedy)


def next_value(
    q_online: jax.Array, q_target: jax.Array, double: bool, ok: jax.Array | None = None
) -> jax.Array:
    """The value ``[B]`` of the next state from ``Q(s', .) [B, K]`` of the online and the
    target networks: double DQN ``Q_target(s', argmax_a Q_online(s', a))``, else
    ``max_a Q_target(s', a)``, over the legal actions ``ok`` (None: all)."""
    if not double:
        return jnp.max(masks.masked(q_target, ok), -1)
    best = jnp.argmax(masks.masked(q_online, ok), -1)
    return jnp.take_along_axis(q_target, best[:, None], -1)[:, 0]


def td_target(reward: jax.Array, discount: jax.Array, value: jax.Array) -> jax.Array:
    """``reward + discount * value`` ``[B]``, held fixed (``discount``: ``gamma^m (1 -
    terminated)`` of an m-step return)."""
    return jax.lax.stop_gradient(reward + discount * value)


def td_loss(chosen: jax.Array, target: jax.Array, loss: str) -> jax.Array:
    """The batch mean of ``0.5 (Q - target)^2`` (mse) or Huber's loss (delta 1)."""
    if loss == "huber":
        return jnp.mean(optax.huber_loss(chosen, target, delta=1.0))
    return 0.5 * jnp.mean((chosen - target) ** 2)


def q_targets(
    apply: Callable[[PyTree, jax.Array], jax.Array],
    params: PyTree,
    target_params: PyTree,
    data: Transition,
    gamma: jax.Array,
    n_step: int,
    double: bool,
    spec: EnvSpec,
) -> tuple[Transition, jax.Array]:
    """The critic's batch ``[B]`` and its TD targets ``[B]`` from a replay read ``data``
    (``[B]``, or runs ``[B, n_step]`` folded into n-step transitions): ``R + gamma^m (1 -
    terminated) V(s')`` with :func:`next_value` of ``apply(params, s')`` (online) and
    ``apply(target_params, s')`` (target) over the legal actions of ``s'``."""
    batch, discount = fasttd3.critic_batch(data, gamma, n_step)
    ok = masks.legal(spec, batch.next_obs)
    q_target = apply(target_params, batch.next_obs)
    q_online = apply(params, batch.next_obs) if double else q_target
    return batch, td_target(batch.reward, discount, next_value(q_online, q_target, double, ok))


def update_target(
    target: PyTree, online: PyTree, tau: jax.Array, steps: jax.Array, every: int
) -> tuple[PyTree, jax.Array]:
    """The target network after gradient step ``steps`` (counted from 1): moved towards
    ``online`` by ``tau`` on every ``every``-th step (``tau`` 1: a copy, bitwise), else
    unchanged. Returns ``(target, due)``."""
    due = steps % every == 0
    move = lambda t, o: jnp.where(tau >= 1.0, o, t + tau * (o - t))
    return jax.tree.map(lambda t, o: jnp.where(due, move(t, o), t), target, online), due


def q_network(cfg: DQNConfig, spec: EnvSpec) -> networks.DiscreteQNet:
    """The Q-network of ``cfg`` for ``spec``'s observations and actions (its torso
    resolved: ``auto`` from the observation's shape)."""
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    return networks.DiscreteQNet(cfg.hidden, spec.action_dim, spec.actor_obs, cfg.layer_norm, torso)


def total_updates(run: Any) -> int:
    """The gradient steps of a run of ``run``'s sizes (the warm-up takes none): epsilon's
    decay is a fraction of them."""
    per_iteration = run.num_envs * run.rollout_steps
    warmup = math.ceil((run.learning_starts or 0) / run.num_envs) * run.num_envs
    iterations = math.ceil(max(run.total_steps - warmup, 0) / per_iteration)
    return max(iterations * run.grad_steps, 1)


def make(cfg: DQNConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind DQN to its config, env spec and the run's per-iteration update sizes."""
    net = q_network(cfg, spec)
    tx = common.adam(cfg.lr, cfg.max_grad_norm)
    total = total_updates(run)
    f32 = lambda name: jnp.asarray(getattr(cfg, name), jnp.float32)

    def init(key: jax.Array) -> base.AgentState:
        params = net.init(key, jnp.zeros((1, *spec.obs_shape)))
        zero = jnp.zeros((), jnp.int32)
        actor = DQNActor(params, zero, f32("eps_start"), f32("eps_end"), f32("eps_decay"))
        critic = DQNCritic(params, params, tx.init(params), f32("gamma"), f32("tau"), zero)
        return base.AgentState(actor, critic)

    def epsilon(a: DQNActor) -> jax.Array:
        return pqn.epsilon(a.eps_start, a.eps_end, a.eps_decay, a.updates, total)

    def act(a: DQNActor, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        q = net.apply(a.params, obs)
        ok = masks.legal(spec, obs)
        if deterministic:
            return jnp.argmax(masks.masked(q, ok), -1).astype(jnp.int32)
        return epsilon_greedy(q, key, epsilon(a), ok)

    def update_critic(c: DQNCritic, view: Any, data: Transition, key: jax.Array):
        del view, key  # the critic needs nothing of the actor side, and draws nothing
        # the (n-step) batch and its TD target from the target network at the next state
        batch, target = q_targets(
            net.apply, c.params, c.target_params, data, c.gamma, cfg.n_step, cfg.double, spec
        )

        def loss_fn(params: PyTree) -> tuple[jax.Array, jax.Array]:
            q = net.apply(params, batch.obs)
            chosen = jnp.take_along_axis(q, batch.action.astype(jnp.int32)[:, None], -1)[:, 0]
            return td_loss(chosen, target, cfg.loss), chosen

        params, opt_state, loss, chosen, gnorm = common.gradient_step(
            tx, c.params, c.opt_state, loss_fn
        )
        steps = c.steps + 1
        target_params, due = update_target(
            c.target_params, params, c.tau, steps, cfg.target_update_every
        )
        c = c._replace(params=params, target_params=target_params, opt_state=opt_state, steps=steps)
        return c, {
            "q_loss": loss,
            "q_mean": chosen.mean(),
            "q_grad_norm": gnorm,
            "target_updates": due.astype(jnp.float32),
            "finite": common.all_finite(loss, gnorm).astype(jnp.float32),
        }

    def actor_phase(a: DQNActor, view: QView, data: Any, key: jax.Array):
        """Take the critic's Q-network as it was at the start of the iteration."""
        del data, key
        eps = epsilon(a)  # the epsilon this iteration's rollout was collected with
        a = a._replace(params=view.params, updates=view.steps)
        return a, {"epsilon": eps, "finite": jnp.ones((), jnp.float32)}

    return base.Algorithm(
        name="dqn",
        on_policy=False,
        init=init,
        act=base.feed_forward(act),
        actor_view=lambda a: (),
        critic_view=lambda c: QView(c.params, c.steps),
        critic_phase=base.replay_phase(
            update_critic, run.grad_steps, run.batch_size, sample=fasttd3.sampler(cfg.n_step, run)
        ),
        actor_phase=actor_phase,
        actor_steps_per_iteration=0,
        critic_steps_per_iteration=run.grad_steps,
        layer_norm=cfg.layer_norm,
    )


# the fields a population may vary per member: the learning rate in the critic's optimiser
# state, gamma and tau on the critic side, the epsilon schedule on the actor side
MEMBER_FIELDS = {
    "lr": members.learning_rate("critic"),
    **members.leaves("critic", "gamma", "tau"),
    **members.leaves("actor", "eps_start", "eps_end", "eps_decay"),
}
