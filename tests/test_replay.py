"""Replay buffer invariants: fill, wrap-around, size, sampling only written slots."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay


def _example():
    return Transition(
        jnp.zeros(3),
        jnp.zeros(1),
        jnp.zeros(()),
        jnp.zeros((), bool),
        jnp.zeros((), bool),
        jnp.zeros(3),
    )


def _batch(start, n):
    ids = jnp.arange(start, start + n, dtype=jnp.float32)
    return Transition(
        jnp.tile(ids[:, None], (1, 3)),
        ids[:, None],
        ids,
        ids % 2 == 0,
        ids % 3 == 0,
        jnp.tile(ids[:, None] + 0.5, (1, 3)),
    )


@settings(max_examples=25, deadline=None)
@given(capacity=st.sampled_from([5, 13]), adds=st.lists(st.integers(1, 4), min_size=1, max_size=30))
def test_fill_and_wrap_match_a_list_model(capacity, adds):
    buf = replay.init(_example(), capacity)
    model: list[float] = []
    start = 0
    add = jax.jit(replay.add)
    for n in adds:
        buf = add(buf, _batch(start, n))
        model.extend(range(start, start + n))
        start += n
    size = min(len(model), capacity)
    assert int(buf.size) == size
    assert int(buf.index) == len(model) % capacity
    stored = np.asarray(buf.data.reward)
    # every written slot holds the newest value that was written to it
    for pos, value in enumerate(model):
        if pos >= len(model) - capacity:
            assert stored[pos % capacity] == value
    # dtypes kept
    assert buf.data.terminated.dtype == jnp.bool_ and buf.data.obs.dtype == jnp.float32


def test_samples_only_written_slots_under_jit():
    buf = replay.init(_example(), 100)
    buf = replay.add(buf, _batch(1, 7))  # rewards 1..7 in slots 0..6
    sample = jax.jit(replay.sample, static_argnums=2)
    batch = sample(buf, jax.random.key(0), 512)
    rewards = np.asarray(batch.reward)
    assert set(rewards.tolist()) == set(range(1, 8))  # all written, none unwritten (0)
    np.testing.assert_array_equal(batch.obs[:, 0], batch.reward)  # rows stay intact
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.reward + 0.5)


def test_add_rollout_time_major_and_nbytes():
    buf = replay.init(_example(), 10)
    tn = jax.tree.map(lambda x: x.reshape(2, 3, *x.shape[1:]), _batch(0, 6))  # [T=2, N=3]
    buf = replay.add_rollout(buf, tn)
    np.testing.assert_array_equal(buf.data.reward[:6], np.arange(6))
    allocated = sum(x.nbytes for x in jax.tree.leaves(buf))
    assert abs(replay.nbytes(_example(), 10) - allocated) <= 8


def test_example_transition_matches_the_env_spec():
    """Zeros of one transition: float32 obs/reward, int32 discrete or float32 continuous
    actions, bool flags; its buffer's nbytes is what init allocates."""
    cont = replay.example_transition(EnvSpec("c", (3,), False, 2, (-1.0,) * 2, (1.0,) * 2))
    disc = replay.example_transition(EnvSpec("d", (4,), True, 2))
    assert cont.obs.shape == cont.next_obs.shape == (3,) and cont.action.shape == (2,)
    assert cont.obs.dtype == cont.reward.dtype == cont.action.dtype == jnp.float32
    assert disc.action.shape == () and disc.action.dtype == jnp.int32
    assert disc.terminated.dtype == disc.truncated.dtype == jnp.bool_ and disc.reward.shape == ()
    assert all(not np.asarray(x).any() for x in jax.tree.leaves(cont))
    allocated = sum(x.nbytes for x in jax.tree.leaves(replay.init(disc, 7)))
    assert abs(replay.nbytes(disc, 7) - allocated) <= 8
