"""Move a pytree between devices as one buffer: pack its leaves into a flat ``uint32``.

A cross-device ``jax.device_put`` costs the host about the same per leaf whatever its
size, so the device split packs what one side sends the other (a rollout, a parameter
view, a key) into a single array inside the producing jitted function and unpacks it
inside the consuming one. Packing is a bitcast, so the values arrive bit for bit.
One-byte leaves (bool, uint8, int8: observations kept in their own dtype) are packed four
to a word, so a uint8 or bool observation costs a quarter of its float32 copy here too.
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


def _is_byte(dtype: Any) -> bool:
    """A one-byte leaf (bool, uint8, int8): packed four values to a word."""
    return not _is_key(dtype) and np.dtype(dtype).itemsize == 1


def _words(shape: tuple[int, ...], dtype: Any) -> int:
    """uint32 words a leaf takes packed: threefry key data is 2 words a key, a one-byte
    leaf its bytes rounded up to whole words, any other (32-bit) leaf a word a value."""
    n = math.prod(shape)
    if _is_key(dtype):
        return 2 * n
    return -(-n // 4) if _is_byte(dtype) else n


def packable(example: PyTree) -> bool:
    """True when every leaf is 32-bit, one byte (bool, uint8, int8) or a default-impl PRNG
    key (so it can be packed)."""
    for x in jax.tree.leaves(example):
        if _is_key(x.dtype):
            if x.dtype != _KEY_DTYPE:
                return False
        elif np.dtype(x.dtype).itemsize not in (1, 4):
            return False
    return True


def _pack_bytes(x: jax.Array) -> jax.Array:
    """A one-byte leaf as ``uint32 [ceil(n / 4)]`` (bool as 0/1 bytes; zero padded)."""
    b = x.astype(jnp.uint8) if x.dtype == np.bool_ else jax.lax.bitcast_convert_type(x, jnp.uint8)
    b = b.reshape(-1)
    pad = -b.shape[0] % 4
    if pad:
        b = jnp.concatenate([b, jnp.zeros((pad,), jnp.uint8)])
    return jax.lax.bitcast_convert_type(b.reshape(-1, 4), jnp.uint32)


def _unpack_bytes(w: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """The inverse of :func:`_pack_bytes`."""
    b = jax.lax.bitcast_convert_type(w, jnp.uint8).reshape(-1)[: math.prod(shape)]
    if dtype == np.bool_:
        return (b != 0).reshape(shape)
    return jax.lax.bitcast_convert_type(b, dtype).reshape(shape)


class Packer:
    """Packs trees shaped like ``example`` (no batch axis) into ``uint32 [size]`` and back.

    Use inside jitted, per-seed code; ``jax.vmap`` adds the seed axis to both sides.
    """

    def __init__(self, example: PyTree):
        shapes = jax.eval_shape(lambda: example)
        leaves, self.treedef = jax.tree.flatten(shapes)
        self.leaves = [(x.shape, x.dtype) for x in leaves]
        self.words = [_words(s, d) for s, d in self.leaves]
        self.size = int(sum(self.words))
        self._key_impl = jax.random.key_impl(jax.random.key(0))

    def pack(self, tree: PyTree) -> jax.Array:
        """``tree -> uint32 [size]`` (bitcast; one-byte leaves four values to a word)."""
        parts = []
        for x, (_, dtype) in zip(jax.tree.leaves(tree), self.leaves, strict=True):
            if _is_key(dtype):
                w = jax.random.key_data(x)
            elif _is_byte(dtype):
                w = _pack_bytes(x)
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
            elif _is_byte(dtype):
                x = _unpack_bytes(w, shape, dtype)
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
