"""The shared auto-reset's fixed leaves (``jaxspreeze.envs.base.auto_reset``).

A leaf every reset sets to the same value is not drawn again, and one the step also
returns unchanged is not selected at the reset: the leaves are read from the jaxprs of the
env's reset and step, and the transitions are bitwise those of the general path
(``skip_fixed=False``) on the same keys, with resets at terminations and truncations and
the final observation kept. The suites' adapters (Navix, XLand-MiniGrid) against the
general path compile for tens of seconds on a CPU: ``slow``.
"""

from __future__ import annotations

import importlib
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.core.types import EnvSpec
from jaxspreeze.envs import base
from jaxspreeze.envs.base import EnvParts, VecEnv, _fixed_leaves, auto_reset

GOAL, SIZE, LIMIT = 4, 6, 5


@jax.jit
def _walls(state):
    """A jitted helper that returns a leaf as it took it (followed inside)."""
    return state["walls"]


def reset(key):
    """A corridor: a random start, a fixed goal and walls, a step count."""
    pos = jax.random.randint(key, (), 0, GOAL)
    state = {"goal": jnp.int32(GOAL), "pos": pos, "t": jnp.int32(0), "walls": jnp.arange(SIZE)}
    return _obs(state), state


def _obs(state):
    return jnp.stack([state["pos"], state["t"]]).astype(jnp.float32)


def step(state, action):
    """Move by ``action - 1``; the goal terminates; ``t`` counts the steps."""
    pos = jnp.clip(state["pos"] + action - 1, 0, SIZE - 1)
    new = {**state, "pos": pos, "t": state["t"] + 1, "walls": _walls(state)}
    done = pos == state["goal"]
    return _obs(new), new, done.astype(jnp.float32), done


def test_fixed_leaves_are_read_from_the_jaxprs():
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    state = jax.eval_shape(reset, jax.random.key(0))[1]
    action = jax.ShapeDtypeStruct((), jnp.int32)
    fixed = _fixed_leaves(reset, step, key, state, action)
    # leaves in order: goal, pos, t, walls
    assert fixed.const == (True, False, True, True)  # pos is drawn with the key
    assert fixed.held == (True, False, False, True)  # t changes at every step
    assert not fixed.const_obs


def test_a_callback_is_never_taken_for_a_constant():
    def host_reset(key):
        del key
        drawn = jax.pure_callback(
            lambda: np.float32(np.random.default_rng().random()),
            jax.ShapeDtypeStruct((), jnp.float32),
        )
        return drawn[None], {"x": drawn}

    def host_step(state, action):
        return state["x"][None], state, jnp.float32(0), jnp.bool_(False)

    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    state = {"x": jax.ShapeDtypeStruct((), jnp.float32)}
    fixed = _fixed_leaves(host_reset, host_step, key, state, jax.ShapeDtypeStruct((), jnp.int32))
    assert fixed.const == (False,) and fixed.held == (False,) and not fixed.const_obs


def _env(skip_fixed: bool, n: int, refresh_every: int = 2, lean: bool = False) -> VecEnv:
    made = auto_reset(reset, step, LIMIT, refresh_every, skip_fixed=skip_fixed, lean=lean)
    spec = EnvSpec("toy/corridor", (2,), True, 3, max_episode_steps=LIMIT)
    return VecEnv.from_parts(EnvParts(spec, made.reset_one, made.step_batch), n)


def _rollout(env: VecEnv, steps: int, seeds: int):
    """``steps`` steps of ``seeds`` x ``env.num_envs`` envs (vmapped over seeds, as the
    fused chunk runs them), random actions: the state and every output, stacked."""

    def one(key):
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(state, k):
            k_act, k_env = jax.random.split(k)
            action = env.random_actions(k_act)
            out = env.step(k_env, state, action)
            return out[1], (out[0], *out[2:], out[1].inner.start_obs)

        return (obs, *jax.lax.scan(body, state, jax.random.split(k_run, steps)))

    return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(7), seeds))


@pytest.fixture(scope="module")
def rollouts():
    """The toy env's rollout with the fixed leaves skipped, and the general path's."""
    return _rollout(_env(True, 8), 40, 2), _rollout(_env(False, 8), 40, 2)


def test_skipping_fixed_leaves_is_bitwise_the_general_path(rollouts):
    fast, general = rollouts
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(general), strict=True):
        np.testing.assert_array_equal(a, b)
    # and the rollout exercises what is skipped: resets of both kinds happened
    terminated, truncated = fast[2][2], fast[2][3]
    assert terminated.any() and truncated.any()


def test_resets_at_terminations_and_truncations_keep_the_final_obs(rollouts):
    _, state, (obs, _, terminated, truncated, final_obs, _) = jax.device_get(rollouts[0])
    done = terminated | truncated
    # the final observation is the one the last action led to: the goal, or t == LIMIT
    np.testing.assert_array_equal(final_obs[..., 0][terminated], GOAL)
    np.testing.assert_array_equal(final_obs[..., 1][truncated], LIMIT)
    # where an episode ended, the next observation is a fresh start: t back at 0
    np.testing.assert_array_equal(obs[..., 1][done], 0)
    assert (obs[..., 0][done] < GOAL).all()
    # elsewhere the step's own observation (t counts on)
    assert (obs[..., 1][~done] > 0).all()
    # the held leaves are the reset's constants throughout
    walls = np.broadcast_to(np.arange(SIZE), (2, 8, SIZE))
    np.testing.assert_array_equal(state.inner.state["walls"], walls)
    assert (state.inner.state["goal"] == GOAL).all()
    # the episode bookkeeping counted every ended episode
    np.testing.assert_array_equal(state.episodes, done.sum(1))


def _reference(keys: jax.Array, steps: int, n: int, refresh_every: int, key_kind):
    """The auto-reset's transitions written out plainly (each ended episode's state
    replaced by its start at once; each step's keys split for every env, hashed by JAX's
    own threefry; the block's starts then drawn from them): the outputs of ``steps``
    steps of ``n`` toy envs from the reset key ``keys``."""
    k_reset, k_run = jax.random.split(keys)
    pairs = jax.vmap(jax.random.split)(jax.random.split(k_reset, n))
    state = jax.vmap(reset)(pairs[:, 0])[1]
    start_obs, start = jax.vmap(reset)(pairs[:, 1])
    size = -(-n // refresh_every)
    blocks = -(-n // size)

    def body(carry, tk):
        t, k = tk
        state, start, start_obs, count = carry
        k_act, k_env = jax.random.split(k)
        action = jax.random.randint(k_act, (n,), 0, 3)
        env_keys = key_kind(jax.random.split(k_env, n))
        obs, nxt, reward, terminated = jax.vmap(step)(state, action)
        count = count + 1
        truncated = (count >= LIMIT) & ~terminated
        done = terminated | truncated
        pick = lambda a, b: jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b)
        state = jax.tree.map(pick, start, nxt)
        out = (pick(start_obs, obs), reward, terminated, truncated, obs)
        first = jnp.minimum((t % blocks) * size, n - size)
        new_obs, new = jax.vmap(reset)(jax.lax.dynamic_slice_in_dim(env_keys, first, size))
        put = lambda a, b: jax.lax.dynamic_update_slice_in_dim(a, b, first, axis=0)
        start, start_obs = jax.tree.map(put, start, new), put(start_obs, new_obs)
        return (state, start, start_obs, jnp.where(done, 0, count)), out

    carry = (state, start, start_obs, jnp.zeros(n, jnp.int32))
    xs = (jnp.arange(steps), jax.random.split(k_run, steps))
    return jax.jit(lambda c, x: jax.lax.scan(body, c, x)[1])(carry, xs)


@pytest.mark.parametrize("lean", [False, True], ids=["plain", "lean"])
@pytest.mark.parametrize(
    "key_kind", [lambda k: k, jax.random.key_data], ids=["typed keys", "raw keys"]
)
def test_the_auto_reset_steps_as_written_out_plainly(key_kind, lean):
    """The plain order, and the lean one (the select deferred to the next step, the draws
    hashed unrolled from the one key with typed keys, taken from JAX's own split with
    raw ones): bitwise the transitions written out, resets of both kinds included."""
    n, steps = 6, 30
    env = _env(True, n, refresh_every=2, lean=lean)

    def run(key):
        k_reset, k_run = jax.random.split(key)
        _, state = env.reset(key_kind(k_reset))

        def body(state, k):
            k_act, k_env = jax.random.split(k)
            action = jax.random.randint(k_act, (n,), 0, 3)
            obs, state, reward, terminated, truncated, final_obs = env.step(
                key_kind(k_env), state, action
            )
            return state, (obs, reward, terminated, truncated, final_obs)

        return jax.lax.scan(body, state, jax.random.split(k_run, steps))[1]

    key = jax.random.key(3)
    ours = jax.jit(run)(key)
    plain = _reference(key, steps, n, 2, key_kind)
    for a, b in zip(ours, plain, strict=True):
        np.testing.assert_array_equal(a, b)
    assert plain[2].any() and plain[3].any()  # terminations and truncations


@pytest.mark.parametrize(
    "draw",
    [
        lambda k: jax.random.key_data(jax.random.split(k, (3, 5))),
        lambda k: jax.random.key_data(jax.random.fold_in(k, 7)),
        lambda k: jax.random.uniform(k, (4, 3)),
        lambda k: jax.random.normal(k, (5,)),
        lambda k: jax.random.randint(k, (7,), -3, 9),
        lambda k: jax.random.permutation(k, 10),
        lambda k: jax.random.choice(k, 6, (3,), replace=False),
        lambda k: jax.random.bits(k, (3,), jnp.uint8),
        lambda k: jax.random.bernoulli(k, 0.3, (6,)),
    ],
)
def test_the_unrolled_hash_draws_jaxs_own_bits(draw):
    key = jax.random.key(11)
    mine = jax.random.wrap_key_data(jax.random.key_data(key), impl=base._unrolled_impl())
    np.testing.assert_array_equal(jax.jit(draw)(mine), jax.jit(draw)(key))


def test_the_blocks_keys_are_the_rows_of_jaxs_split():
    key = jax.random.key(5)
    rows = jax.jit(lambda k, first: base._rows(k, 64, first, 4))(key, jnp.int32(60))
    whole = jax.random.split(key, 64)
    np.testing.assert_array_equal(jax.random.key_data(rows), jax.random.key_data(whole[60:]))
    # the unrolled hash leaves no loop in the program (JAX's own is one on a CPU)
    text = jax.jit(lambda k: base._rows(k, 64, jnp.int32(0), 4)).lower(key).as_text()
    assert "while" not in text
    assert "while" in jax.jit(lambda k: jax.random.split(k, 4)).lower(key).as_text()


def _suite_parts(family: str, task: str, skip_fixed: bool) -> EnvParts:
    """A suite's adapter built with the general path or the fixed leaves skipped."""
    module = importlib.import_module(f"jaxspreeze.envs.{family}")
    real = module.auto_reset
    try:
        module.auto_reset = lambda *a, **k: real(*a, **k, skip_fixed=skip_fixed)
        return module.make(task)
    finally:
        module.auto_reset = real


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, task, package",
    [
        ("navix", "Navix-Empty-5x5-v0", "navix"),
        ("xminigrid", "MiniGrid-Empty-5x5", "xminigrid"),
        ("brax", "inverted_pendulum", "brax"),  # constant leaves skipped in the draws
        ("playground", "CartpoleBalance", "mujoco_playground"),
    ],
)
def test_a_suite_steps_bitwise_as_the_general_path(family, task, package):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    # random walks reach the grids' goals rarely: past their 100-step limit
    steps = 110 if family in ("navix", "xminigrid") else 64
    fast, general = (
        _rollout(VecEnv.from_parts(_suite_parts(family, task, skip), 4), steps, 1)
        for skip in (True, False)
    )
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(general), strict=True):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    terminated, truncated = fast[2][2], fast[2][3]
    if family != "playground":  # CartpoleBalance ends at its 1000-step limit only
        assert (terminated | truncated).any()


def test_only_lean_states_hold_the_new_leaves_and_an_older_checkpoint_may_lack_them():
    """The plain order's state has the leaves it had before lean resets existed (a
    checkpoint of a brax, Playground or XLand-MiniGrid run still resumes); a lean family's
    two new leaves are the ones a checkpoint written before them may lack (the fresh
    state's values fill them: ``store.checkpoint.ADDED_ENV_LEAVES``)."""
    from jaxspreeze.store import checkpoint

    def paths(env: VecEnv) -> list[str]:
        _, state = env.reset(jax.random.key(0))
        flat, _ = jax.tree_util.tree_flatten_with_path({"env": state})
        return [jax.tree_util.keystr(p) for p, _ in flat]

    plain, lean = paths(_env(True, 4)), paths(_env(True, 4, lean=True))
    assert not any(p.endswith(checkpoint.ADDED_ENV_LEAVES) for p in plain)
    assert not any(checkpoint._is_added(p) for p in plain)
    added = [p for p in lean if checkpoint._is_added(p)]
    assert sorted(added) == ["['env'].inner.drawn", "['env'].inner.ended"]
    assert [p for p in lean if p not in added] == plain
