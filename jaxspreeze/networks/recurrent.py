"""Recurrent cells and networks: the slot between a torso and a head (``--ppo.memory``).

A recurrent network reads one step as ``x = torso(obs)``, ``carry, x = cell(carry, x,
reset)``, ``head(x)``: :class:`RecurrentCell` sits where a network of
:mod:`~jaxspreeze.networks.actors` or :mod:`~jaxspreeze.networks.critics` hands its
torso's features to its head. Its carry (the hidden state) is what a recurrent policy
carries from one step to the next; :func:`initial_carry` is its first value (zeros),
and a row whose ``reset`` is set (its observation is the first of an episode) starts
again from it before the step (``types.reset_carry``, as ``Algorithm.start_rows``). :func:`unroll` runs the cell over a ``[T, B, F]``
sequence with the same parameters (training on a rollout).

The cells are flax's: ``gru`` (``nn.GRUCell``, carry ``h [B, F]``) and ``lstm``
(``nn.OptimizedLSTMCell``, carry ``(c, h)``, each ``[B, F]``); the output is ``h``.

:class:`RecurrentNet` is an actor's or a value function's network with a memory: each
step reads ``x = torso(obs)``, ``carry, y = cell(carry, x, reset)`` and gives ``y`` to the
head of its kind (the heads of :mod:`~jaxspreeze.networks.heads`: a categorical policy's
logits, a Gaussian's mean and state-independent log std, a tanh policy's mean and raw
scale, a state value). Acting is a sequence of one step (``T = 1``); training unrolls a
rollout's sequences with the same parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxspreeze.core.types import Carry, Columns, PyTree, reset_carry
from jaxspreeze.networks import heads
from jaxspreeze.networks.torsos import encode

# gru's carry: h [B, F]; lstm's: (c [B, F], h [B, F])
CELLS: dict[str, type[nn.Module]] = {"gru": nn.GRUCell, "lstm": nn.OptimizedLSTMCell}


def initial_carry(kind: str, features: int, batch: int) -> Carry:
    """The carry of ``batch`` rows before their first step: zeros (flax's own initial
    carry of the cell ``kind``)."""
    if kind not in CELLS:
        raise ValueError(f"unknown recurrent cell {kind!r}; choose one of {', '.join(CELLS)}")
    zeros = jnp.zeros((batch, features), jnp.float32)
    return zeros if kind == "gru" else (zeros, zeros)


class RecurrentCell(nn.Module):
    """One step of a ``kind`` cell of ``features`` units, resetting rows on episode start:
    ``(carry, x [B, D], reset [B]) -> (carry, y [B, features])``. Its parameters are the
    submodule ``cell``."""

    kind: str = "gru"
    features: int = 128

    def initialize_carry(self, batch: int) -> Carry:
        """The carry before the first step of ``batch`` rows (:func:`initial_carry`)."""
        return initial_carry(self.kind, self.features, batch)

    @nn.compact
    def __call__(self, carry: Carry, x: jax.Array, reset: jax.Array) -> tuple[Carry, jax.Array]:
        """Reset the rows that start an episode, then step the cell."""
        fresh = initial_carry(self.kind, self.features, x.shape[0])
        carry = reset_carry(carry, fresh, reset)
        return CELLS[self.kind](self.features, name="cell")(carry, x)


def unroll(
    cell: RecurrentCell, params: PyTree, carry: Carry, xs: jax.Array, resets: jax.Array
) -> tuple[Carry, jax.Array]:
    """``cell`` (with ``params``) over a sequence: ``xs [T, B, D]`` and ``resets [T, B]``
    from ``carry``; the last carry and the outputs ``[T, B, features]``. Equal to calling
    the cell step by step."""

    def step(c: Carry, inputs: tuple[jax.Array, jax.Array]) -> tuple[Carry, jax.Array]:
        x, reset = inputs
        return cell.apply(params, c, x, reset)

    return jax.lax.scan(step, carry, (xs, resets))


# the heads a recurrent network can end in (``RecurrentNet.head``)
HEADS = ("categorical", "gaussian", "squashed", "value")

# time steps per loop iteration of a training unroll: fewer, larger loop bodies (on CPU
# a scan step's own cost is several times a small cell's)
UNROLL = 8


class _Step(nn.Module):
    """One cell step that also returns the carry after it (scanned over time)."""

    kind: str
    features: int

    @nn.compact
    def __call__(self, carry: Carry, x: jax.Array, reset: jax.Array):
        carry, y = RecurrentCell(self.kind, self.features, name="cell")(carry, x, reset)
        return carry, (y, carry)


def _remember(
    kind: str, features: int, carry: Carry, x: jax.Array, resets: jax.Array
) -> tuple[Carry, jax.Array, Carry]:
    """The cell (a submodule ``memory`` of the calling network, inside its compact
    ``__call__``) over ``x [T * B, F]``: ``(carry after the last step, y [T, B, F'] or
    [B, F'] for T = 1, the carries after each step [T, B, ...])``. One step without a loop
    when acting (the same parameters as the scanned step)."""
    T, B = resets.shape[:2]
    if T == 1:
        carry, (y, carries) = _Step(kind, features, name="memory")(carry, x, resets[0])
        return carry, y, jax.tree.map(lambda c: c[None], carries)
    scan = nn.scan(
        _Step,
        variable_broadcast="params",
        split_rngs={"params": False},
        in_axes=0,
        out_axes=0,
        unroll=UNROLL,
    )
    carry, (y, carries) = scan(kind, features, name="memory")(carry, x.reshape(T, B, -1), resets)
    return carry, y, carries


class RecurrentNet(nn.Module):
    """torso -> ``kind`` cell of ``features`` units -> ``head`` (one of :data:`HEADS`).

    ``__call__(carry [B, ...], obs [T, B, ...], resets [T, B])`` returns ``(carry after the
    last step, outputs over the T * B rows in time-major order, carries [T, B, ...] after
    each step)``; the outputs are the head's (``gaussian``: ``(mean [T*B, A], log_std
    [A])``; ``squashed``: ``(mean, raw scale)``; ``value``: ``[T*B]``).
    """

    head: str
    hidden: Sequence[int]
    out: int = 1  # actions (logits, means); unused by the value head
    kind: str = "gru"
    features: int = 128
    obs_cols: Columns | None = None  # the observation columns it reads
    torso: str = "mlp"  # the torso before the cell (torsos.TORSOS)
    state_std: bool = True  # the squashed head's raw scale: a network head, else a parameter

    def initialize_carry(self, batch: int) -> Carry:
        """The carry before the first step of ``batch`` rows (zeros)."""
        return initial_carry(self.kind, self.features, batch)

    @nn.compact
    def __call__(self, carry: Carry, obs: jax.Array, resets: jax.Array) -> tuple[Carry, Any, Carry]:
        T, B = obs.shape[:2]
        x = encode(self.torso, obs.reshape(T * B, *obs.shape[2:]), self.obs_cols)
        carry, y, carries = _remember(self.kind, self.features, carry, x, resets)
        y = y.reshape(T * B, -1)
        if self.head == "categorical":
            out = heads.categorical(y, self.hidden, self.out)
        elif self.head == "gaussian":
            out = heads.gaussian(self, y, self.hidden, self.out)
        elif self.head == "squashed":
            out = heads.squashed_gaussian(self, y, self.hidden, self.out, self.state_std)
        elif self.head == "value":
            out = heads.value(y, self.hidden)
        else:
            raise ValueError(f"unknown head {self.head!r}; choose one of {', '.join(HEADS)}")
        return carry, out, carries


class RecurrentQNet(nn.Module):
    """torso -> ``kind`` cell of ``features`` units -> Q-values ``[T * B, num_actions]``.

    ``__call__(carry [B, ...], obs [T, B, ...], resets [T, B], extra [T, B, E] or None)``
    returns ``(the cell's carry after the last step, Q [T * B, num_actions] in time-major
    order, the cell's carries [T, B, ...] after each step)``; ``extra`` (the previous
    action's one-hot) is read beside the torso's features.
    """

    hidden: Sequence[int]
    num_actions: int
    kind: str = "gru"
    features: int = 128
    obs_cols: Columns | None = None  # the observation columns it reads
    layer_norm: bool = True  # a LayerNorm after each hidden layer (MLP's)
    torso: str = "mlp"  # the torso before the cell (torsos.TORSOS)

    def initialize_carry(self, batch: int) -> Carry:
        """The cell's carry before the first step of ``batch`` rows (zeros)."""
        return initial_carry(self.kind, self.features, batch)

    @nn.compact
    def __call__(
        self, carry: Carry, obs: jax.Array, resets: jax.Array, extra: jax.Array | None = None
    ) -> tuple[Carry, jax.Array, Carry]:
        T, B = obs.shape[:2]
        x = encode(self.torso, obs.reshape(T * B, *obs.shape[2:]), self.obs_cols)
        if extra is not None:
            x = jnp.concatenate([x, extra.reshape(T * B, -1).astype(x.dtype)], axis=-1)
        carry, y, carries = _remember(self.kind, self.features, carry, x, resets)
        q = heads.q_values(y.reshape(T * B, -1), self.hidden, self.num_actions, self.layer_norm)
        return carry, q, carries
