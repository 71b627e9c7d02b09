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

A network runs its cell with flax's parameters and maths, not flax's module
(:func:`_remember`): the input projections of all ``T`` steps are one matmul before the
loop, the loop steps the hidden side only (the gates' kernels side by side: one matmul a
step), and the loop's gradient is hand-written (:func:`_sequence`). On CPU a training
unroll's gradient costs about half of flax's cell under ``nn.scan``
(experiments/results/recurrent_ppo_cpu.md); the outputs equal flax's cell up to float
rounding, the parameter tree is flax's cell's (``memory/cell/cell/...``).
"""

from __future__ import annotations

import functools
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

# time steps per loop iteration of a training unroll: one. With the hand-written loop a
# longer body bought nothing on CPU (one gradient of 4 sequences of 64 steps, GRU of 128:
# 1.93 ms CPU at 1, 1.99 at 8; experiments/results/recurrent_ppo_cpu.md) and compiles longer
UNROLL = 1


def _gates(kind: str, p: PyTree) -> tuple[jax.Array, jax.Array | None, jax.Array, jax.Array]:
    """flax's cell parameters ``p`` (``GRUCell``: ``ir iz in`` input Dense with biases,
    ``hr hz`` hidden without, ``hn`` with; ``OptimizedLSTMCell``: ``ii if ig io`` input
    kernels, ``hi hf hg ho`` hidden Dense with biases) as four arrays: ``(input kernel
    [D, G], input bias [G] or None, hidden kernel [F, G], hidden bias)`` with the gates
    side by side (``G = 3F`` or ``4F``); the GRU's hidden bias is ``hn``'s ``[F]`` alone
    (``hr`` and ``hz`` have none; it is added inside ``r * (...)``), the LSTM's all ``[4F]``."""
    if kind == "gru":
        names = ("r", "z", "n")
        wi = jnp.concatenate([p[f"i{g}"]["kernel"] for g in names], axis=1)
        bi = jnp.concatenate([p[f"i{g}"]["bias"] for g in names])
        wh = jnp.concatenate([p[f"h{g}"]["kernel"] for g in names], axis=1)
        return wi, bi, wh, p["hn"]["bias"]
    names = ("i", "f", "g", "o")
    wi = jnp.concatenate([p[f"i{g}"]["kernel"] for g in names], axis=1)
    wh = jnp.concatenate([p[f"h{g}"]["kernel"] for g in names], axis=1)
    return wi, None, wh, jnp.concatenate([p[f"h{g}"]["bias"] for g in names])


def _gru_step(wh, bh, h, gi, reset):
    """One GRU step from ``h [B, F]`` given its input gates ``gi = x Wi + bi [B, 3F]``
    (rows whose ``reset`` is set start from zeros): ``(h', the step's residuals)``,
    flax's ``GRUCell`` maths."""
    F = h.shape[-1]
    hp = jnp.where(reset[:, None], jnp.zeros_like(h), h)
    gh = hp @ wh
    r = jax.nn.sigmoid(gi[:, :F] + gh[:, :F])
    z = jax.nn.sigmoid(gi[:, F : 2 * F] + gh[:, F : 2 * F])
    ghn = gh[:, 2 * F :] + bh
    n = jnp.tanh(gi[:, 2 * F :] + r * ghn)
    h = (1.0 - z) * n + z * hp
    return h, (hp, r, z, n, ghn)


def _lstm_step(wh, bh, carry, gi, reset):
    """One LSTM step from ``carry = (c, h)`` given its input gates ``gi = x Wi [B, 4F]``
    (rows whose ``reset`` is set start from zeros): ``((c', h'), the step's residuals)``,
    flax's ``OptimizedLSTMCell`` maths."""
    c, h = carry
    F = h.shape[-1]
    cp = jnp.where(reset[:, None], jnp.zeros_like(c), c)
    hp = jnp.where(reset[:, None], jnp.zeros_like(h), h)
    a = gi + (hp @ wh + bh)
    i, f = jax.nn.sigmoid(a[:, :F]), jax.nn.sigmoid(a[:, F : 2 * F])
    g, o = jnp.tanh(a[:, 2 * F : 3 * F]), jax.nn.sigmoid(a[:, 3 * F :])
    c = f * cp + i * g
    tc = jnp.tanh(c)
    return (c, o * tc), (cp, hp, i, f, g, o, tc)


_STEPS = {"gru": _gru_step, "lstm": _lstm_step}


def _forward(kind: str, wh, bh, carry, gi, resets):
    """The cell over ``gi [T, B, G]`` from ``carry``: (its carries after each step
    ``[T, B, ...]``, the residuals the backward pass reads ``[T, B, ...]``)."""

    def step(c, inputs):
        c, res = _STEPS[kind](wh, bh, c, *inputs)
        return c, (c, res)

    _, (carries, res) = jax.lax.scan(step, carry, (gi, resets), unroll=UNROLL)
    return carries, res


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _sequence(kind: str, wh, bh, carry, gi, resets):
    """The cell's carries after each step ``[T, B, ...]`` over the input gates ``gi [T, B,
    G]`` from ``carry``. Its gradient is hand-written: the loop back over time computes only
    what flows from step to step (one ``[B, G] x [G, F]`` matmul a step); the hidden
    kernel's and bias's gradients are one matmul over all ``T * B`` rows after it (the
    automatic one adds a ``[F, G]`` outer product into an accumulator at every step)."""
    return _forward(kind, wh, bh, carry, gi, resets)[0]


def _sequence_fwd(kind, wh, bh, carry, gi, resets):
    carries, res = _forward(kind, wh, bh, carry, gi, resets)
    return carries, (wh, res, resets)


def _gru_back(wht, dh, res, reset):
    """One GRU step back: ``dh`` on ``h'`` -> ``(d h before the reset, d input gates
    [B, 3F], d hidden gates [B, 3F])``."""
    hp, r, z, n, ghn = res
    da_n = dh * (1.0 - z) * (1.0 - n * n)
    da_r = da_n * ghn * r * (1.0 - r)
    da_z = dh * (hp - n) * z * (1.0 - z)
    dgh = jnp.concatenate([da_r, da_z, da_n * r], axis=-1)
    dhp = dh * z + dgh @ wht
    dprev = jnp.where(reset[:, None], jnp.zeros_like(dhp), dhp)
    return dprev, jnp.concatenate([da_r, da_z, da_n], axis=-1), dgh


def _lstm_back(wht, dcarry, res, reset):
    """One LSTM step back: ``(dc, dh)`` on ``(c', h')`` -> ``((dc, dh) before the reset,
    d gates [B, 4F] (the input and the hidden side share them), the same)``."""
    dc, dh = dcarry
    cp, _, i, f, g, o, tc = res
    dc = dc + dh * o * (1.0 - tc * tc)
    da = jnp.concatenate(
        [
            dc * g * i * (1.0 - i),
            dc * cp * f * (1.0 - f),
            dc * i * (1.0 - g * g),
            dh * tc * o * (1.0 - o),
        ],
        axis=-1,
    )
    zero = lambda x: jnp.where(reset[:, None], jnp.zeros_like(x), x)
    return (zero(dc * f), zero(da @ wht)), da, da


def _sequence_bwd(kind, saved, dcarries):
    wh, res, resets = saved
    back = _gru_back if kind == "gru" else _lstm_back
    wht = wh.T

    def step(dnext, inputs):
        dout, r, reset = inputs
        d = jax.tree.map(jnp.add, dout, dnext)
        dprev, dgi, dgh = back(wht, d, r, reset)
        return dprev, (dgi, dgh)

    dlast = jax.tree.map(lambda x: jnp.zeros_like(x[0]), dcarries)
    dcarry, (dgi, dgh) = jax.lax.scan(
        step, dlast, (dcarries, res, resets), reverse=True, unroll=UNROLL
    )
    hp = res[0] if kind == "gru" else res[1]  # the hidden state each step read
    T, B, F = hp.shape
    dgh_rows = dgh.reshape(T * B, -1)
    dwh = hp.reshape(T * B, F).T @ dgh_rows
    dbh = dgh_rows[:, 2 * F :].sum(0) if kind == "gru" else dgh_rows.sum(0)
    return dwh, dbh, dcarry, dgi, None


_sequence.defvjp(_sequence_fwd, _sequence_bwd)


class _Memory(nn.Module):
    """The cell of a recurrent network (its submodule ``memory``) over a sequence; its
    parameters are :class:`RecurrentCell`'s (``memory/cell/cell/...``: flax's cell's names
    and initialisers, created by one step of it at ``init``)."""

    kind: str
    features: int

    @nn.compact
    def __call__(self, carry: Carry, x: jax.Array, resets: jax.Array):
        T, B = resets.shape[:2]
        if self.is_initializing():
            RecurrentCell(self.kind, self.features, name="cell")(carry, x[:B], resets[0])
        wi, bi, wh, bh = _gates(self.kind, self.variables["params"]["cell"]["cell"])
        gi = x @ wi if bi is None else x @ wi + bi  # every step's input gates: one matmul
        gi = gi.reshape(T, B, -1)
        if T == 1:  # acting: one step, no loop
            carry = _STEPS[self.kind](wh, bh, carry, gi[0], resets[0])[0]
            return jax.tree.map(lambda c: c[None], carry)
        return _sequence(self.kind, wh, bh, carry, gi, resets)


def _remember(
    kind: str, features: int, carry: Carry, x: jax.Array, resets: jax.Array
) -> tuple[Carry, jax.Array, Carry]:
    """The cell (a submodule ``memory`` of the calling network, inside its compact
    ``__call__``) over ``x [T * B, F]``: ``(carry after the last step, y [T, B, F'], the
    carries after each step [T, B, ...])``. The input projections of all steps are one
    matmul before the loop; the loop steps only the hidden state (:func:`_sequence`, its
    gradient hand-written); acting (``T = 1``) is one step without a loop. Equal to
    stepping flax's cell (:class:`RecurrentCell`) up to float rounding: the gates' matmuls
    are fused (one ``[D, 3F]`` or ``[D, 4F]`` kernel per side)."""
    carries = _Memory(kind, features, name="memory")(carry, x, resets)
    y = carries if kind == "gru" else carries[1]
    return jax.tree.map(lambda c: c[-1], carries), y, carries


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
