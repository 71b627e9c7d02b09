"""Evaluation steps until every env's episode has ended: the same returns and lengths as a
scan over every step of the time limit, bit for bit, for one seed and for every seed at
once, and fewer steps where episodes end long before the limit (Craftax: ~150-step
episodes, a 10,000-step limit)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.agent.evaluate import make_episodes
from jaxspreeze.envs import make_env
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan


def scan_episodes(algo, env, steps):
    """The evaluation as a plain scan over ``steps`` steps (the reference)."""

    def episodes(actor, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = env.reset(k_reset)
        n = env.num_envs
        init = (obs, env_state, algo.initial_carry(n), jnp.zeros(n, bool), jnp.zeros(n))
        init += (jnp.zeros(n, jnp.int32),)

        def step(carry, key):
            obs, env_state, policy, finished, ret, length = carry
            k_act, k_env = jax.random.split(key)
            action, policy = algo.act(actor, policy, obs, k_act, True)
            obs, env_state, reward, term, trunc, _ = env.step_no_reset(k_env, env_state, action)
            live = ~finished
            ret = ret + jnp.where(live, reward, 0.0)
            length = length + live.astype(jnp.int32)
            return (obs, env_state, policy, finished | term | trunc, ret, length), None

        (*_, ret, length), _ = jax.lax.scan(step, init, jax.random.split(k_run, steps))
        return ret, length

    return episodes


def actors(algo_name, env, seeds=None, **fields):
    cfg = RunConfig(algo=algo_name, env=env).replace(**fields)
    algo = plan(cfg, on_devices=False).make_algorithm()
    if seeds is None:
        return algo, jax.jit(algo.init)(jax.random.key(3)).actor
    return algo, jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(3), seeds)).actor


def same(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize(
    "env_id, algo_name, fields, max_steps",
    [
        ("gymnax/CartPole-v1", "ppo", {"ppo": {"hidden": (8,)}}, None),
        # (slow: CartPole's case and the early stop below cover the loop by default)
        pytest.param(
            "gymnax/Pendulum-v1", "sac", {"sac": {"hidden": (8,)}}, None, marks=pytest.mark.slow
        ),
        pytest.param(
            "gymnax/CartPole-v1", "ppo", {"ppo": {"hidden": (8,)}}, 37, marks=pytest.mark.slow
        ),
    ],
)
def test_the_returns_and_lengths_are_the_scans(env_id, algo_name, fields, max_steps):
    env = make_env(env_id, 16)
    steps = max_steps or env.spec.max_episode_steps
    algo, actor = actors(algo_name, env_id, **fields)
    key = jax.random.key(7)
    got = jax.jit(make_episodes(algo, env, max_steps))(actor, key)
    same(got, jax.jit(scan_episodes(algo, env, steps))(actor, key))
    assert int(np.max(np.asarray(got[1]))) <= steps
    # every seed at once: as jax.vmap of the one-seed scan
    algo, actor = actors(algo_name, env_id, seeds=3, **fields)
    keys = jax.random.split(key, 3)
    got = jax.jit(make_episodes(algo, env, max_steps, seeds=True))(actor, keys)
    same(got, jax.jit(jax.vmap(scan_episodes(algo, env, steps)))(actor, keys))


class Counting:
    """``env`` with a far time limit; counts the steps its evaluation runs."""

    def __init__(self, env, limit):
        self.env, self.num_envs, self.steps = env, env.num_envs, 0
        self.spec = dataclasses.replace(env.spec, max_episode_steps=limit)

    def reset(self, key):
        return self.env.reset(key)

    def step_no_reset(self, key, state, action):
        jax.debug.callback(self._count)
        return self.env.step_no_reset(key, state, action)

    def _count(self):
        self.steps += 1


def test_evaluation_stops_when_every_episode_has_ended():
    """CartPole with a 100,000-step limit: an untrained policy's episodes end within tens
    of steps, and the evaluation stops at the step the last one did."""
    algo, actor = actors("ppo", "gymnax/CartPole-v1", ppo={"hidden": (8,)})
    env = Counting(make_env("gymnax/CartPole-v1", 16), 100_000)
    ret, length = jax.jit(make_episodes(algo, env))(actor, jax.random.key(1))
    longest = int(np.max(np.asarray(length)))
    assert longest < 500 and env.steps == longest
    # CartPole's step and PPO's deterministic action use no key: a scan of 500 steps
    # (split from another count) gives the same episodes
    want = jax.jit(scan_episodes(algo, env.env, 500))(actor, jax.random.key(1))
    same((ret, length), want)
