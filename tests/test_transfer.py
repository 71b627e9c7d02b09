"""Packing a pytree into one uint32 buffer for a cross-device move is exact."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.types import Transition
from jaxspreeze.data import transfer


def example():
    k = jax.random.key(3)
    return {
        "traj": Transition(
            obs=jax.random.normal(k, (2, 4, 3)),
            action=jnp.array([[1, -2, 3, 4], [5, 6, 7, 8]], jnp.int32),
            reward=jnp.array([[np.nan, np.inf, -0.0, 1e-38]] * 2, jnp.float32),
            terminated=jnp.array([[True, False, True, False]] * 2),
            truncated=jnp.zeros((2, 4), bool),
            next_obs=jnp.ones((2, 4, 3)),
        ),
        "key": jax.random.split(k, 2)[1],
        "scalar": jnp.float32(0.5),
    }


def test_pack_unpack_is_bit_exact():
    tree = example()
    p = transfer.packer(tree)
    assert isinstance(p, transfer.Packer)
    flat = jax.jit(p.pack)(tree)
    assert flat.dtype == jnp.uint32 and flat.shape == (p.size,)
    back = jax.jit(p.unpack)(flat)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(
            np.asarray(a).reshape(-1).view(np.uint8), np.asarray(b).reshape(-1).view(np.uint8)
        )


def test_vmapped_over_seeds():
    tree = jax.tree.map(lambda x: jnp.stack([x, x]), example())
    p = transfer.packer(example())
    flat = jax.vmap(p.pack)(tree)
    assert flat.shape == (2, p.size)
    back = jax.vmap(p.unpack)(flat)
    np.testing.assert_array_equal(back["traj"].obs, tree["traj"].obs)


def test_unpackable_leaves_pass_through():
    tree = {"half": jnp.ones(3, jnp.float16)}
    p = transfer.packer(tree)
    assert isinstance(p, transfer.Identity)
    assert p.unpack(p.pack(tree)) is tree
