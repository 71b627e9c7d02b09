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


def _env(skip_fixed: bool, n: int, refresh_every: int = 2) -> VecEnv:
    made = auto_reset(reset, step, LIMIT, refresh_every, skip_fixed=skip_fixed)
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
    fast, general = (
        _rollout(VecEnv.from_parts(_suite_parts(family, task, skip), 4), 64, 1)
        for skip in (True, False)
    )
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(general), strict=True):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    terminated, truncated = fast[2][2], fast[2][3]
    if family != "playground":  # CartpoleBalance ends at its 1000-step limit only
        assert (terminated | truncated).any()
