"""Resets that explore: an episode that ends starts from a freshly sampled initial state.

A toy env with a random goal pins the mechanism (:func:`jaxspreeze.envs.auto_reset`);
brax/reacher shows it on a real task: the targets keep changing across episodes.
"""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.core.types import EnvSpec
from jaxspreeze.envs import VecEnv, auto_reset
from jaxspreeze.envs import brax as brax_family


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
    parts = auto_reset(reset, step, max_steps, refresh_every)
    return VecEnv(
        spec,
        num_envs,
        parts.reset_one,
        parts.step_batch,
        step_batch_no_reset=parts.step_batch_no_reset,
    )


def _rollout(env: VecEnv, steps: int, action: float, seed: int = 0, resets: bool = True):
    """A jitted rollout at a constant action: ``(obs before each step, *step outputs)``."""
    step = env.step if resets else env.step_no_reset

    def run(key):
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(carry, k):
            obs, state = carry
            out = step(k, state, jnp.full((env.num_envs, 1), action))
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


def test_step_without_resets_goes_on_from_the_last_state():
    """Evaluation's step: the first episode is the same as with resets; then no new
    episode starts (the position keeps walking past the termination point)."""
    env = _toy_env(num_envs=2, max_steps=30, refresh_every=16, fall_at=0.55)
    with_resets = _rollout(env, 12, 0.1)
    without = _rollout(env, 12, 0.1, resets=False)
    # up to and including the step that ends it (index 5; only the next obs differs there)
    for i in (0, 3, 4, 5, 6):  # obs before, reward, terminated, truncated, final obs
        np.testing.assert_array_equal(with_resets[i][:6], without[i][:6])
    np.testing.assert_array_equal(with_resets[1][:5], without[1][:5])
    obs, _, _, _, term, trunc, _ = without
    for i in range(2):
        np.testing.assert_allclose(obs[6:, i, 1], 0.6 + 0.1 * np.arange(6), rtol=1e-5)
    assert term[5:].all() and not term[:5].any() and not trunc.any()


def test_evaluation_program_draws_no_initial_states():
    """The evaluation's loop body holds the env's step only: no reset is traced into it
    (a training rollout's step holds one: it draws the next episodes' initial states)."""
    from jaxspreeze.agent.evaluate import make_evaluate
    from jaxspreeze.algos.base import feed_forward, no_carry

    env = _toy_env(num_envs=4, max_steps=10, refresh_every=2)
    act = lambda actor, obs, key, deterministic: jnp.zeros((obs.shape[0], 1))
    policy = SimpleNamespace(act=feed_forward(act), initial_carry=no_carry)
    jaxpr = jax.make_jaxpr(make_evaluate(policy, env))(None, jax.random.key(0))
    (loop,) = [e for e in jaxpr.eqns if e.primitive.name == "while"]
    body = str(loop.params["body_jaxpr"])
    assert "name=reset" in str(jaxpr) and "name=step" in body and "name=reset" not in body
    # the same check sees the draw in a training step
    train = jax.make_jaxpr(lambda k: _rollout_jaxpr_probe(env, k))(jax.random.key(0))
    assert "name=reset" in str(train)


def _rollout_jaxpr_probe(env: VecEnv, key):
    _, state = env.reset(key)
    return env.step(key, state, jnp.zeros((env.num_envs, 1)))


@pytest.mark.slow  # brax's reacher compiles for about 30 s
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
