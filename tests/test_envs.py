"""The env contract for gymnax and brax: shapes, auto-reset, terminated vs truncated; the
family registry and its errors (Playground: tests/test_playground.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.envs import FAMILIES, available_envs, check_env_name, env_spec, make_env


def _run(env, steps, action_fn, seed=0):
    key = jax.random.key(seed)

    def body(carry, k):
        obs, state = carry
        ka, ks = jax.random.split(k)
        out = env.step(ks, state, action_fn(ka))
        return (out[0], out[1]), (obs, *out)

    # the reset inside the program: one compile, not op-by-op dispatch of a brax reset
    _, outs = jax.jit(lambda: jax.lax.scan(body, env.reset(key), jax.random.split(key, steps)))()
    return outs


def test_gymnax_pendulum_contract():
    env = make_env("gymnax/Pendulum-v1", 3)
    spec = env.spec
    assert spec.obs_shape == (3,) and not spec.discrete and spec.action_dim == 1
    assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)
    assert spec.max_episode_steps == 200
    _prev_obs, obs, state, reward, term, trunc, final_obs = _run(env, 201, env.random_actions)
    assert obs.shape == (201, 3, 3) and reward.shape == (201, 3) and reward.dtype == jnp.float32
    # Pendulum never terminates; it is truncated exactly at step 200 in every env
    assert not term.any()
    assert trunc[199].all() and not trunc[:199].any() and not trunc[200].any()
    # final_obs is the observation before the reset; the returned obs is the reset one
    assert not np.allclose(final_obs[199], obs[199])
    # away from episode ends, final_obs equals the next observation
    np.testing.assert_allclose(final_obs[:199], obs[:199], atol=1e-5)
    # episode bookkeeping: return of the finished episode equals the summed rewards
    np.testing.assert_allclose(state.last_return[199], reward[:200].sum(0), rtol=1e-5)
    assert (state.last_length[199] == 200).all() and (state.episodes[199] == 1).all()
    assert (state.episode_length[200] == 1).all()


def test_gymnax_cartpole_terminates():
    env = make_env("gymnax/CartPole-v1", 4)
    assert env.spec.discrete and env.spec.action_dim == 2 and env.spec.action_shape == ()
    _, obs, _state, _reward, term, trunc, final_obs = _run(
        env, 100, lambda k: jnp.zeros(4, jnp.int32)
    )
    assert term.any(), "always pushing left must topple the pole"
    assert not (term & trunc).any()
    t, i = np.argwhere(np.asarray(term))[0]
    assert not np.allclose(final_obs[t, i], obs[t, i])  # obs was reset
    assert abs(final_obs[t, i, 2]) > 0.2 or abs(final_obs[t, i, 0]) > 2.4  # fell or left


def test_brax_contract_keeps_final_obs():
    env = make_env("brax/inverted_pendulum", 2)
    spec = env.spec
    assert spec.obs_shape == (4,) and spec.action_dim == 1 and not spec.discrete
    # full force one way topples the pendulum: an episode terminates
    _, obs, _state, _reward, term, trunc, final_obs = _run(env, 60, lambda k: jnp.ones((2, 1)))
    assert term.any() and not trunc.any()
    t, i = np.argwhere(np.asarray(term))[0]
    assert not np.allclose(final_obs[t, i], obs[t, i])
    assert abs(final_obs[t, i, 1]) > 0.2  # the pole angle that ended the episode


def test_unknown_env_lists_names():
    with pytest.raises(UnknownEnvError, match="gymnax/Pendulum-v1"):
        env_spec("gymnax/Nope-v0")
    assert "brax/ant" in available_envs()


def test_names_without_a_family_suggest_one():
    with pytest.raises(UnknownEnvError, match="did you mean gymnax/Pendulum-v1"):
        check_env_name("Pendulum-v1")
    with pytest.raises(UnknownEnvError, match="gymnax, brax, playground"):
        check_env_name("mujoco/Hopper-v5")


def test_every_family_is_one_registered_module():
    for prefix, family in FAMILIES.items():
        assert family.PREFIX == prefix
        assert all(callable(getattr(family, f)) for f in ("names", "check", "make"))
    assert "gymnax/CartPole-v1" in available_envs() and "brax/reacher" in available_envs()


def test_gymnax_starts_without_its_render_only_imports():
    """gymnax's import pulls seaborn (scipy.stats) and pyplot for its renders only: the
    adapter defers them, so a gymnax run's start does without them, Pong's palette and
    figure still work when used, and a later import is the real module."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        from jaxspreeze.envs import make_env
        make_env("gymnax/CartPole-v1", 2)
        print("after make:", *(m in sys.modules for m in ("seaborn", "scipy.stats",
              "matplotlib.pyplot", "matplotlib")))
        from gymnax.environments.misc import pong
        print("palette:", len(pong.sns.color_palette("cubehelix", 3)))
        print("figure:", type(pong.plt.figure()).__name__)
        print("colors:", pong.colors.ListedColormap(["red"]).N)
        import seaborn, matplotlib.pyplot
        print("real:", type(seaborn).__name__, type(matplotlib.pyplot).__name__)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "after make: False False False False" in lines
    assert "palette: 3" in lines and "figure: Figure" in lines and "colors: 1" in lines
    assert "real: module module" in lines


def test_brax_fluid_forces_run_on_this_jax():
    """brax.fluid (swimmer's viscosity) calls ``jnp.clip(..., a_min=)``, which jax 0.10
    removed: after the adapter makes a brax env, that module's clip takes the keyword and
    clips as jnp's does."""
    make_env("brax/inverted_pendulum", 1)
    from brax import fluid

    x = jnp.array([-2.0, 0.5, 3.0])
    np.testing.assert_array_equal(fluid.jp.clip(x, a_min=0.0), jnp.clip(x, 0.0))
    np.testing.assert_array_equal(fluid.jp.clip(x, a_min=-1.0, a_max=1.0), jnp.clip(x, -1, 1))
    assert fluid.jp.sum is jnp.sum


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in available_envs() if n.startswith("brax/")])
def test_every_brax_task_steps(name):
    """Every listed brax task makes, resets and steps (swimmer through brax.fluid)."""
    env = make_env(name, 2)
    outs = _run(env, 3, env.random_actions)
    assert np.isfinite(np.asarray(outs[3])).all()  # rewards
