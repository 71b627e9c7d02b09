"""Move a pytree between devices as one buffer: pack its leaves into a flat ``uint32``.

A cross-device ``jax.device_put`` costs the host about the same per leaf whatever its
size, so the device split packs what one side sends the other (a rollout, a parameter
view, a key) into a single array inside the producing jitted function and unpacks it
inside the consuming one. Packing is a bitcast, so the values arrive bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.types import PyTree

_WORD = np.dtype(np.uint32)
_KEY_DTYPE = jax.eval_shape(lambda: jax.random.key(0)).dtype


def _is_key(dtype: Any) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def packable(example: PyTree) -> bool:
    """True when every leaf is 32-bit, bool or a default-impl PRNG key (so it can be packed)."""
    for x in jax.tree.leaves(example):
        if _is_key(x.dtype):
            if x.dtype != _KEY_DTYPE:
                return False
        elif x.dtype != np.bool_ and np.dtype(x.dtype).itemsize != 4:
            return False
    return True


class Packer:
    """Packs trees shaped like ``example`` (no batch axis) into ``uint32 [size]`` and back.

    Use inside jitted, per-seed code; ``jax.vmap`` adds the seed axis to both sides.
    """

    def __init__(self, example: PyTree):
        shapes = jax.eval_shape(lambda: example)
        leaves, self.treedef = jax.tree.flatten(shapes)
        self.leaves = [(x.shape, x.dtype) for x in leaves]
        self.words = [
            math.prod(s) * (2 if _is_key(d) else 1) for s, d in self.leaves
        ]  # threefry key data is 2 words
        self.size = int(sum(self.words))
        self._key_impl = jax.random.key_impl(jax.random.key(0))

    def pack(self, tree: PyTree) -> jax.Array:
        """``tree -> uint32 [size]`` (bitcast; bools become 0/1 words)."""
        parts = []
        for x, (_, dtype) in zip(jax.tree.leaves(tree), self.leaves, strict=True):
            if _is_key(dtype):
                w = jax.random.key_data(x)
            elif dtype == np.bool_:
                w = x.astype(jnp.uint32)
            else:
                w = jax.lax.bitcast_convert_type(x, jnp.uint32)
            parts.append(w.reshape(-1))
        if not parts:
            return jnp.zeros((0,), jnp.uint32)
        return jnp.concatenate(parts)

    def unpack(self, flat: jax.Array) -> PyTree:
        """``uint32 [size] -> tree`` (the inverse of :meth:`pack`)."""
        out, offset = [], 0
        for (shape, dtype), n in zip(self.leaves, self.words, strict=True):
            w = flat[offset : offset + n]
            offset += n
            if _is_key(dtype):
                x = jax.random.wrap_key_data(w.reshape(*shape, 2), impl=self._key_impl)
            elif dtype == np.bool_:
                x = w.reshape(shape) != 0
            else:
                x = jax.lax.bitcast_convert_type(w, dtype).reshape(shape)
            out.append(x)
        return jax.tree.unflatten(self.treedef, out)


class Identity:
    """A Packer that does nothing: for trees with leaves :class:`Packer` cannot bitcast."""

    def pack(self, tree: PyTree) -> PyTree:
        """``tree`` unchanged."""
        return tree

    def unpack(self, tree: PyTree) -> PyTree:
        """``tree`` unchanged."""
        return tree


def packer(example: PyTree) -> Packer | Identity:
    """A :class:`Packer` for ``example`` when it can be packed, else :class:`Identity`."""
    return Packer(example) if packable(example) else Identity()
