"""Recurrent PPO's sequence maths (``--ppo.memory gru|lstm``): carries, sequences, values.

The policy's carry is ``(actor cell's carry, value cell's carry)``, each ``[N, F]`` (an
LSTM's a pair): the actor's cell and the value function's cell each read the torso's
features of every observation an env sees, so acting steps both (the value cell with the
critic's parameters as of the last actor phase, :class:`RecurrentActor`'s
``value_params``: the staleness rule's view of the critic). Whoever steps envs resets an
env's carry to :func:`initial` at every episode's first observation.

Training replays the rollout from its stored starting carry (the device rollout's
``Sequences.start``; a host rollout's first row of the carries the workers acted with):
the episode starts inside the rollout are the steps after a termination or a truncation
(:func:`~jaxspreeze.algos.base.episode_starts`), where each cell restarts. A rollout
``[T, N]`` is cut into sequences of ``L`` steps (``--ppo.recurrent-chunk``; the whole
rollout by default), ``[L, (T / L) * N]`` time-major (:func:`sequences`); a sequence
after the first of its env starts from the carry the unroll at the phase's start
parameters had there (:func:`chunk_starts`). The minibatches shuffle whole sequences and
keep their steps in order; gradients flow through a sequence, not into its start.

A truncated step's value target bootstraps from its final observation read by the value
cell that continues the episode (:func:`unroll_values`: the carry after the step, then
one more cell step on ``next_obs``); the next step restarts the cell all the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import base, common
from jaxspreeze.algos.base import Sequences
from jaxspreeze.core.types import Carry, PyTree, Transition


class RecurrentActor(NamedTuple):
    """A recurrent PPO's actor side: PPO's actor leaves, and the value network's parameters
    its rollouts step the value cell with (the critic's, as of the last actor phase)."""

    params: PyTree
    opt_state: PyTree
    lr: jax.Array
    obs_stats: common.RunningStats
    clip_eps: jax.Array
    ent_coef: jax.Array
    value_params: PyTree


class SeqPolicyBatch(NamedTuple):
    """Sequences of the policy update: time-major leaves ``[L, S, ...]``, ``start`` the
    actor cell's carry ``[S, ...]`` at each sequence's first step; ``ok`` the legal
    actions ``[L, S, K]`` (None: an env without masks)."""

    obs: jax.Array
    action: jax.Array
    old_logp: jax.Array
    advantage: jax.Array
    resets: jax.Array
    noise: jax.Array | None
    start: Carry
    ok: jax.Array | None = None


class SeqValueBatch(NamedTuple):
    """Sequences of the value update (time-major ``[L, S, ...]``; ``start`` ``[S, ...]``)."""

    obs: jax.Array
    returns: jax.Array
    resets: jax.Array
    start: Carry


def initial(actor_net: networks.RecurrentNet, value_net: networks.RecurrentNet, n: int) -> Carry:
    """The policy's carry at an episode's first step for ``n`` envs: both cells' zeros."""
    return actor_net.initialize_carry(n), value_net.initialize_carry(n)


def step(net: networks.RecurrentNet, params: PyTree, carry: Carry, obs: jax.Array):
    """One step of ``net`` on ``obs [N, ...]`` from ``carry`` (already reset where an
    episode starts): ``(carry, outputs over N rows)``."""
    resets = jnp.zeros((1, obs.shape[0]), bool)
    carry, out, _ = net.apply(params, carry, obs[None], resets)
    return carry, out


def carry_leaves(carry: Carry) -> dict[str, jax.Array]:
    """A carry as per-row extras ``{"carry<i>": leaf [N, ...]}`` (a host worker keeps them
    per row; :func:`carry_from_extras` reads the rollout's first row back)."""
    return {f"carry{i}": leaf for i, leaf in enumerate(jax.tree.leaves(carry))}


def carry_from_extras(extras: dict[str, jax.Array], like: Carry) -> Carry:
    """The carry at a host rollout's first step from its extras ``[T, N, ...]`` (row 0:
    the carries the workers acted on its first observations with), shaped as ``like``."""
    leaves = [extras[f"carry{i}"][0] for i in range(len(jax.tree.leaves(like)))]
    return jax.tree.unflatten(jax.tree.structure(like), leaves)


def unpack(data: Any, like: Carry) -> tuple[Transition, Carry, jax.Array | None]:
    """``(rollout [T, N], starting carry, behaviour log-probs [T, N] or None)`` of a
    phase's data: a device rollout (:class:`Sequences`) or a host one
    (:class:`~jaxspreeze.algos.base.BehaviourRollout`, its carries in the extras)."""
    if isinstance(data, base.BehaviourRollout):
        return data.traj, carry_from_extras(data.extras, like), data.extras["logp"]
    if isinstance(data, Sequences):
        return data.traj, data.start, None
    raise TypeError(f"a recurrent PPO trains on Sequences or a BehaviourRollout, got {type(data)}")


def sequences(x: jax.Array, length: int) -> jax.Array:
    """``[T, N, ...] -> [L, (T / L) * N, ...]``: each env's rollout cut into sequences of
    ``L = length`` steps, in time order; sequence ``k * N + n`` is env ``n``'s ``k``-th."""
    T, N = x.shape[:2]
    x = x.reshape(T // length, length, N, *x.shape[2:])
    x = jnp.swapaxes(x, 0, 1)
    return x.reshape(length, (T // length) * N, *x.shape[3:])


def chunk_starts(start: Carry, carries: Carry, length: int) -> Carry:
    """The carry at each sequence's first step ``[(T / L) * N, ...]`` (the order of
    :func:`sequences`): the rollout's ``start`` for the first, else the carry ``carries
    [T, N, ...]`` (after each step) of the step before; the sequence's own resets restart
    it where an episode starts there."""

    def one(s: jax.Array, c: jax.Array) -> jax.Array:
        starts = jnp.concatenate([s[None], c[length - 1 : -1 : length]], axis=0)
        return starts.reshape(-1, *starts.shape[2:])

    return jax.tree.map(one, start, carries)


def unroll_values(
    value_net: networks.RecurrentNet,
    params: PyTree,
    start: Carry,
    obs: jax.Array,
    next_obs: jax.Array,
    resets: jax.Array,
) -> tuple[jax.Array, jax.Array, Carry]:
    """``(V(obs) [T, N], V(next_obs) [T, N], carries [T, N, ...])`` of the value cell
    unrolled from ``start`` (resetting where ``resets``). ``V(next_obs)[t]`` is one more
    cell step from the carry after step ``t`` on ``next_obs[t]``: the next observation
    inside an episode, the final one where it ended (a truncation bootstraps from it)."""
    T, N = obs.shape[:2]
    _, v, carries = value_net.apply(params, start, obs, resets)
    flat = jax.tree.map(lambda c: c.reshape(T * N, *c.shape[2:]), carries)
    nxt = next_obs.reshape(1, T * N, *next_obs.shape[2:])
    _, next_v, _ = value_net.apply(params, flat, nxt, jnp.zeros((1, T * N), bool))
    return v.reshape(T, N), next_v.reshape(T, N), carries


def pick(batch: NamedTuple, idx: jax.Array) -> Any:
    """The sequences ``idx`` of a batch: its time-major leaves on axis 1, ``start`` on 0."""
    timed = jax.tree.map(lambda x: x[:, idx], batch._replace(start=()))
    return timed._replace(start=jax.tree.map(lambda c: c[idx], batch.start))


def sequence_epochs(
    update: Callable[[PyTree, Any], tuple[PyTree, base.Metrics]],
    state: PyTree,
    data: SeqPolicyBatch | SeqValueBatch,
    key: jax.Array,
    epochs: int,
    sequences_per_batch: int,
) -> tuple[PyTree, base.Metrics]:
    """``epochs`` passes of ``update`` over ``data``'s sequences, shuffled whole (each
    keeps its steps in order), ``sequences_per_batch`` per minibatch."""
    size = jax.tree.leaves(data.start)[0].shape[0]
    num_mb = size // sequences_per_batch

    def epoch(state, key):
        perm = jax.random.permutation(key, size).reshape(num_mb, sequences_per_batch)
        return jax.lax.scan(lambda s, idx: update(s, pick(data, idx)), state, perm)

    state, metrics = jax.lax.scan(epoch, state, jax.random.split(key, epochs))
    metrics = {k: jnp.mean(v) for k, v in metrics.items()}
    metrics["finite"] = metrics["finite"] > 0.999  # all steps finite
    return state, metrics
