"""Rollout via lax.scan equals a Python loop on the same keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.data.rollout import EnvCarry, env_init, rollout
from jaxspreeze.envs import make_env


def test_scan_rollout_equals_python_loop():
    env = make_env("gymnax/Pendulum-v1", 4)
    policy = lambda obs, key: (
        jnp.clip(obs[:, :1] * 1.5, -2, 2) + 0.1 * jax.random.normal(key, (4, 1))
    )
    with_carry = lambda carry, obs, key: (policy(obs, key), carry)
    carry = env_init(env, jax.random.key(1))
    key = jax.random.key(2)
    T = 25
    _, traj, eps = jax.jit(lambda c, k: rollout(env, with_carry, c, k, T))(carry, key)

    step = jax.jit(env.step)
    obs, state, _ = carry
    rows = []
    for k in jax.random.split(key, T):
        k_act, k_env = jax.random.split(k)
        action = policy(obs, k_act)
        nobs, state, reward, _term, _trunc, final_obs = step(k_env, state, action)
        rows.append((obs, action, reward, final_obs))
        obs = nobs
    for field, i in (("obs", 0), ("action", 1), ("reward", 2), ("next_obs", 3)):
        ref = np.stack([r[i] for r in rows])
        np.testing.assert_allclose(getattr(traj, field), ref, rtol=1e-6, atol=1e-6)
    assert traj.obs.shape == (T, 4, 3) and eps.done.shape == (T, 4)
    assert isinstance(carry, EnvCarry)
