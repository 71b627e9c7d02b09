"""Recurrent cells: the slot between a torso and a head (not wired into any algorithm yet).

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
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxspreeze.core.types import Carry, PyTree, reset_carry

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
