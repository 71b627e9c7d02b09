"""GAE(lambda) against hand-computed numbers and a plain Python loop."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.algos.common import gae


def gae_loop(rewards, values, next_values, terminated, truncated, gamma, lam):
    """The textbook recursion, one env and one step at a time."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        next_adv = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, n] else gamma * next_values[t, n]
            delta = rewards[t, n] + bootstrap - values[t, n]
            if terminated[t, n] or truncated[t, n]:
                next_adv = 0.0  # the recursion never crosses an episode end
            next_adv = delta + gamma * lam * next_adv
            adv[t, n] = next_adv
    return adv, adv + values


def test_hand_computed_truncation_and_termination():
    """T=4: truncated at t=1 (bootstraps from V(final_obs)=10), terminated at t=2 (from 0).

    gamma = lam = 0.5, V = 1 everywhere except V(final_obs at t=1) = 10:
    deltas = [1 + .5 - 1, 2 + .5*10 - 1, 3 + 0 - 1, 4 + .5 - 1] = [0.5, 6, 2, 3.5];
    adv[3] = 3.5 (end of rollout), adv[2] = 2 and adv[1] = 6 (episode ends),
    adv[0] = 0.5 + 0.25 * 6 = 2.
    """
    col = lambda xs, dt=jnp.float32: jnp.asarray(xs, dt)[:, None]
    adv, ret = gae(
        col([1.0, 2.0, 3.0, 4.0]),
        col([1.0, 1.0, 1.0, 1.0]),
        col([1.0, 10.0, 1.0, 1.0]),
        col([0, 0, 1, 0], bool),
        col([0, 1, 0, 0], bool),
        0.5,
        0.5,
    )
    np.testing.assert_allclose(adv[:, 0], [2.0, 6.0, 2.0, 3.5], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [3.0, 7.0, 3.0, 4.5], rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_python_loop(seed):
    """Random rollouts ``[T=33, N=5]`` with episode ends of both kinds anywhere."""
    rng = np.random.default_rng(seed)
    T, N = 33, 5
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T, N))
    next_values = rng.normal(size=(T, N))
    end = rng.random((T, N))
    terminated = end < 0.1
    truncated = (end >= 0.1) & (end < 0.2)
    gamma, lam = 0.97, 0.9
    want_adv, want_ret = gae_loop(rewards, values, next_values, terminated, truncated, gamma, lam)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    adv, ret = gae(
        f32(rewards),
        f32(values),
        f32(next_values),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        gamma,
        lam,
    )
    np.testing.assert_allclose(adv, want_adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-4, atol=1e-5)


def test_lambda_one_no_ends_is_discounted_return_minus_value():
    """lambda = 1 and no episode end: returns are the discounted reward-to-go plus
    gamma^(T-t) V(last next_obs)."""
    T, gamma = 6, 0.9
    rewards = jnp.arange(1.0, T + 1)[:, None]
    values = jnp.zeros((T, 1))
    next_values = jnp.zeros((T, 1)).at[-1].set(5.0)
    zeros = jnp.zeros((T, 1), bool)
    _, ret = gae(rewards, values, next_values, zeros, zeros, gamma, 1.0)
    want = [
        sum(gamma ** (k - t) * (k + 1) for k in range(t, T)) + gamma ** (T - t) * 5.0
        for t in range(T)
    ]
    np.testing.assert_allclose(ret[:, 0], want, rtol=1e-5)
