"""Resets that explore: an episode that ends starts from a freshly sampled initial state.

A toy env with a random goal pins the mechanism (:func:`jaxspreeze.envs.auto_reset`);
brax/reacher shows it on a real task: the targets keep changing across episodes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.envs import VecEnv, auto_reset
from jaxspreeze.envs import brax as brax_family
from jaxspreeze.types import EnvSpec


def _toy_env(num_envs: int, max_steps: int, refresh_every: int, fall_at: float = 1e9) -> VecEnv:
    """obs = (goal, position): reset draws the goal; the position walks by the action."""

    def reset(key):
        goal = jax.random.uniform(key, ())
        state = jnp.stack([goal, jnp.zeros(())])
        return state, state

    def step(state, action):
        state = state.at[1].add(action[0])
        return state, state, -jnp.abs(state[1] - state[0]), state[1] > fall_at

    spec = EnvSpec("toy/goal", (2,), False, 1, (-1.0,), (1.0,), max_steps)
    return VecEnv(spec, num_envs, *auto_reset(reset, step, max_steps, refresh_every))


def _rollout(env: VecEnv, steps: int, action: float, seed: int = 0):
    """A jitted rollout at a constant action: ``(obs before each step, *step outputs)``."""

    def run(key):
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(carry, k):
            obs, state = carry
            out = env.step(k, state, jnp.full((env.num_envs, 1), action))
            return out[:2], (obs, *out)

        return jax.lax.scan(body, (obs, state), jax.random.split(k_run, steps))[1]

    return jax.device_get(jax.jit(run)(jax.random.key(seed)))


def _first_obs(obs: np.ndarray, done: np.ndarray) -> list[np.ndarray]:
    """Per env, the first observation of each of its episodes, ``[episodes, *obs_shape]``."""
    starts = np.concatenate([np.ones((1, done.shape[1]), bool), done[:-1]], 0)
    return [obs[starts[:, i], i] for i in range(done.shape[1])]


@pytest.mark.parametrize(("num_envs", "refresh_every"), [(8, 1), (8, 16), (40, 16)])
def test_every_episode_starts_from_a_new_goal(num_envs, refresh_every):
    """Episodes longer than ``refresh_every`` steps never share an initial state."""
    env = _toy_env(num_envs, max_steps=20, refresh_every=refresh_every)
    obs, _, _, _, term, trunc, final_obs = _rollout(env, 100, 0.1)
    assert not term.any() and trunc[19::20].all() and trunc.sum() == 5 * num_envs
    goals = [first[:, 0] for first in _first_obs(obs, trunc)]
    assert all(len(g) == 5 for g in goals)
    every = np.concatenate(goals)
    assert len(np.unique(every)) == every.size  # no two episodes, of any env, share a goal
    # the final observation is the last state, not the reset one; the position restarts at 0
    np.testing.assert_allclose(final_obs[19, :, 1], 2.0, rtol=1e-5)
    np.testing.assert_allclose(obs[20, :, 1], 0.0)


def test_termination_and_truncation_are_separate():
    env = _toy_env(num_envs=2, max_steps=30, refresh_every=16, fall_at=0.55)
    obs, _, state, _, term, trunc, final_obs = _rollout(env, 30, 0.1)
    # the position passes 0.55 at step 6 (0.6): terminated there, every 6 steps, never truncated
    assert term[5::6].all() and term.sum() == 10 and not trunc.any()
    np.testing.assert_allclose(final_obs[5, :, 1], 0.6, rtol=1e-5)
    np.testing.assert_allclose(obs[6, :, 1], 0.0)
    assert (state.last_length[5] == 6).all() and (state.episodes[-1] == 5).all()


def test_brax_reacher_targets_change_across_episodes(monkeypatch):
    """Each env of brax/reacher draws a new target for every episode (obs[4:6] is the target).

    The brax family's episodes, cut to 25 steps so that the test runs in seconds.
    """
    monkeypatch.setattr(brax_family, "EPISODE_LENGTH", 25)
    parts = brax_family.make("reacher")
    n, episodes = 4, 3
    env = VecEnv(parts.spec, n, parts.reset_one, parts.step_batch)
    obs, *_, trunc, _final = _rollout(env, episodes * 25, 0.0)
    assert trunc.sum() == n * episodes and trunc[24::25].all()
    targets = np.stack([first[:, 4:6] for first in _first_obs(obs, trunc)])  # [n, episodes, 2]
    assert targets.shape == (n, episodes, 2)
    # every episode of every env has its own target: all pairwise distances are clear of 0
    flat = targets.reshape(-1, 2)
    dist = np.linalg.norm(flat[:, None] - flat[None], axis=-1)
    assert dist[~np.eye(len(flat), dtype=bool)].min() > 1e-3, targets
    # the targets are reacher's own draws: inside its disc of radius 0.2
    assert (np.linalg.norm(flat, axis=-1) <= 0.2 + 1e-6).all()
