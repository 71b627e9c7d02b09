"""Recurrent PQN's network and sequence maths (``--pqn.memory gru|lstm``).

The Q-network reads one step as ``x = torso(obs)`` (beside it the previous action,
one-hot, with ``--pqn.last-action``), ``carry, y = cell(carry, x, reset)``, ``Q = hidden
MLP (LayerNorm) -> one output per action (y)``:
:class:`~jaxspreeze.networks.recurrent.RecurrentQNet`, PQN's
:class:`~jaxspreeze.networks.DiscreteQNet` with a :class:`~jaxspreeze.networks.RecurrentCell`
between its torso and its head, as :class:`~jaxspreeze.networks.RecurrentNet` is PPO's.

The policy's carry is a :class:`QCarry`: the cell's state and the previous action's
one-hot ``[N, K]`` (``()`` without ``--pqn.last-action``), both zeros at an episode's first
step (:func:`initial`; whoever steps envs resets a row there). Training replays the
rollout from its stored starting carry (the device rollout's ``Sequences.start``; a host
rollout's first row of the carries the workers acted with): the cell restarts at the
steps after a termination or a truncation (:func:`~jaxspreeze.algos.base.episode_starts`)
and so does the previous action (:func:`previous_actions`). The Q(lambda) targets read
``max_a Q(next_obs, a)`` from the cell that continues the episode (:func:`unroll_q`: the
carry after the step, then one more cell step on ``next_obs``: a truncation bootstraps
from its final observation).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze.core.types import Carry, PyTree
from jaxspreeze.networks import RecurrentQNet


class QCarry(NamedTuple):
    """A recurrent PQN's carry: the cell's state (``[N, F]``; an LSTM's a pair) and the
    previous action's one-hot ``[N, K]`` (``()`` without ``--pqn.last-action``)."""

    cell: Carry
    last_action: jax.Array | tuple


def initial(net: RecurrentQNet, last_action: bool, n: int) -> QCarry:
    """The carry at an episode's first step for ``n`` envs: the cell's zeros, and no
    previous action (a one-hot of zeros) with ``last_action``."""
    previous = jnp.zeros((n, net.num_actions), jnp.float32) if last_action else ()
    return QCarry(net.initialize_carry(n), previous)


def one_hot(action: jax.Array, num_actions: int) -> jax.Array:
    """Actions ``[...]`` (int) as one-hot rows ``[..., num_actions]`` (float32)."""
    return jax.nn.one_hot(action, num_actions, dtype=jnp.float32)


def step(
    net: RecurrentQNet, params: PyTree, carry: QCarry, obs: jax.Array
) -> tuple[jax.Array, Carry]:
    """One step on ``obs [N, ...]`` from ``carry`` (already reset where an episode starts):
    ``(Q [N, K], the cell's carry after it)``."""
    resets = jnp.zeros((1, obs.shape[0]), bool)
    extra = None if isinstance(carry.last_action, tuple) else carry.last_action[None]
    cell, q, _ = net.apply(params, carry.cell, obs[None], resets, extra)
    return q, cell


def after(cell: Carry, action: jax.Array, carry: QCarry, num_actions: int) -> QCarry:
    """The carry after a step that took ``action [N]``: the cell's, and the action's
    one-hot where the carry keeps the previous action."""
    if isinstance(carry.last_action, tuple):
        return QCarry(cell, ())
    return QCarry(cell, one_hot(action, num_actions))


def previous_actions(
    start: jax.Array, action: jax.Array, resets: jax.Array, num_actions: int
) -> jax.Array:
    """The previous action's one-hot each step of a rollout reads ``[T, N, K]``: the
    starting carry's ``start [N, K]`` at step 0, then the action before, zeros where an
    episode starts (``resets [T, N]``)."""
    before = jnp.concatenate([start[None], one_hot(action[:-1], num_actions)], axis=0)
    return jnp.where(resets[..., None], 0.0, before)


def unroll_q(
    net: RecurrentQNet,
    params: PyTree,
    start: QCarry,
    obs: jax.Array,
    action: jax.Array,
    next_obs: jax.Array,
    resets: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """``(Q(obs) [T, N, K], Q(next_obs) [T, N, K], previous actions [T, N, K] or None)``
    of the network unrolled from ``start`` over a rollout (resetting where ``resets``).
    ``Q(next_obs)[t]`` is one more cell step from the carry after step ``t`` on
    ``next_obs[t]`` (with ``action[t]`` as its previous action): the next observation
    inside an episode, the final one where it ended (a truncation bootstraps from it)."""
    T, N = obs.shape[:2]
    K = net.num_actions
    keeps = not isinstance(start.last_action, tuple)
    prev = previous_actions(start.last_action, action, resets, K) if keeps else None
    _, q, carries = net.apply(params, start.cell, obs, resets, prev)
    flat = jax.tree.map(lambda c: c.reshape(T * N, *c.shape[2:]), carries)
    nxt = next_obs.reshape(1, T * N, *next_obs.shape[2:])
    extra = one_hot(action.reshape(1, T * N), K) if keeps else None
    _, next_q, _ = net.apply(params, flat, nxt, jnp.zeros((1, T * N), bool), extra)
    return q.reshape(T, N, K), next_q.reshape(T, N, K), prev
