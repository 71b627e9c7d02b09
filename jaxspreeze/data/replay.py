"""On-device circular replay buffer: a pytree state and pure ``init/add/sample``.

The buffer stores any pytree of per-transition leaves (a :class:`Transition`, or an
:class:`ObsOnly` on the actor side of the device split). Sampling draws indices from the
key alone, so two buffers with the same write history sample the same rows.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.types import EnvSpec, PyTree, Transition


class ReplayState(NamedTuple):
    """Storage ``[capacity, ...]`` per leaf, the next write index and the fill count."""

    data: PyTree
    index: jax.Array  # int32: next slot to write
    size: jax.Array  # int32: number of valid slots (<= capacity)

    @property
    def capacity(self) -> int:
        """Number of slots."""
        return jax.tree.leaves(self.data)[0].shape[0]


def example_transition(spec: EnvSpec, abstract: bool = False) -> Transition:
    """Zeros shaped like one transition of an env with ``spec`` (no batch axis).

    Observations in the env's own dtype (``spec.obs_dtype``: float32, or a bool or uint8
    grid kept as it is, one byte a value), float32 rewards, int32 (discrete) or float32
    actions, bool flags: the item :func:`init` and :func:`nbytes` take for a replay buffer
    of that env. ``abstract``: ``jax.ShapeDtypeStruct``\\ s instead of arrays (no op runs).
    """
    zeros = jax.ShapeDtypeStruct if abstract else jnp.zeros
    obs = zeros(spec.obs_shape, np.dtype(spec.obs_dtype))
    action = zeros(spec.action_shape, jnp.int32 if spec.discrete else jnp.float32)
    return Transition(obs, action, zeros((), jnp.float32), zeros((), bool), zeros((), bool), obs)


def init(example: PyTree, capacity: int) -> ReplayState:
    """An empty buffer for items shaped like ``example`` (one transition, no batch axis)."""
    data = jax.tree.map(
        lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), example
    )
    return ReplayState(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def nbytes(example: PyTree, capacity: int) -> int:
    """Bytes :func:`init` will allocate for ``example`` items; computed without allocating."""
    leaves = jax.tree.leaves(example)  # arrays or ShapeDtypeStructs: shapes and dtypes
    per_item = sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in leaves)
    return capacity * per_item + 8


def add(state: ReplayState, items: PyTree) -> ReplayState:
    """Write a batch of items (leading axis ``[B]``, ``B <= capacity``), wrapping around."""
    cap = state.capacity
    batch = jax.tree.leaves(items)[0].shape[0]
    if batch > cap:
        raise ValueError(f"cannot add {batch} items to a buffer of capacity {cap}")
    idx = (state.index + jnp.arange(batch)) % cap
    data = jax.tree.map(lambda buf, x: buf.at[idx].set(x.astype(buf.dtype)), state.data, items)
    return ReplayState(
        data,
        ((state.index + batch) % cap).astype(jnp.int32),
        jnp.minimum(state.size + batch, cap).astype(jnp.int32),
    )


def add_rollout(state: ReplayState, items: PyTree) -> ReplayState:
    """Add a ``[T, N, ...]`` rollout in time order (flattened to ``[T * N, ...]``)."""
    return add(state, jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), items))


def sample_indices(state: ReplayState, key: jax.Array, batch_size: int) -> jax.Array:
    """Uniform indices into the written slots ``[0, size)``."""
    return jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))


def sample(state: ReplayState, key: jax.Array, batch_size: int) -> PyTree:
    """A uniform batch ``[batch_size, ...]`` from the written slots."""
    idx = sample_indices(state, key, batch_size)
    return jax.tree.map(lambda buf: buf[idx], state.data)


def sample_sequences(
    state: ReplayState, key: jax.Array, batch_size: int, length: int, stride: int
) -> PyTree:
    """``batch_size`` runs of ``length`` consecutive transitions of one env: ``[B, length, ...]``.

    The buffer holds ``[T, N]`` rollouts added in time order (:func:`add_rollout`), so the
    next transition of the env of slot ``s`` is at slot ``s + N`` (``stride = N``). The
    first transition of a run is drawn uniformly among those whose ``length - 1``
    successors are written (its age, counted back from the newest slot, is at least
    ``(length - 1) * stride``); the buffer must hold more than that many items.
    """
    lo = (length - 1) * stride
    age = jax.random.randint(key, (batch_size,), lo, jnp.maximum(state.size, lo + 1))
    start = (state.index - 1 - age) % state.capacity
    idx = (start[:, None] + stride * jnp.arange(length)) % state.capacity  # [B, length]
    return jax.tree.map(lambda buf: buf[idx], state.data)
