"""The agent of a trained run (``jaxspreeze.load``): predict, evaluate, save and load back."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import jax
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze.agent.agent import Agent, load
from jaxspreeze.agent.policy import POLICY_FILE, load_policy
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.config import RunConfig


def _train(tmp, **fields):
    base = dict(
        total_steps=600,
        num_envs=4,
        chunk_iterations=50,
        eval_episodes=2,
        logdir=str(tmp),
        sinks=("jsonl",),
    )
    return train(RunConfig().replace(**{**base, **fields}), quiet=True).run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny PPO run on gymnax CartPole (discrete) and SAC on gymnax Pendulum (continuous)."""
    tmp = tmp_path_factory.mktemp("agent")
    ppo = _train(
        tmp,
        algo="ppo",
        env="gymnax/CartPole-v1",
        run_name="ppo",
        total_steps=512,
        rollout_steps=16,
        batch_size=32,
        chunk_iterations=4,
        num_seeds=2,
        ppo={"hidden": (16, 16), "epochs": 2},
    )
    sac = _train(
        tmp,
        algo="sac",
        env="gymnax/Pendulum-v1",
        run_name="sac",
        grad_steps=2,
        batch_size=32,
        buffer_size=2_000,
        learning_starts=200,
        sac={"hidden": (32, 32)},
    )
    return {"ppo": ppo, "sac": sac}


def observations(spec, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, *spec.obs_shape)).astype(np.float32)


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_predict_is_the_policys_deterministic_action_batched_and_single(runs, algo):
    agent = jaxspreeze.load(runs[algo])
    assert isinstance(agent, Agent) and agent.cfg.algo == algo
    pol = load_policy(runs[algo])
    obs = observations(agent.spec, 5)
    want = np.asarray(pol.algo.act(pol.seed(0), (), obs, jax.random.key(0), True)[0])
    got = agent.predict(obs)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, want)
    # one observation acts as a batch of one: the policy's action on it, bitwise; against
    # the batch's row only to float rounding (XLA's kernels differ with the batch size)
    want_one = np.asarray(pol.algo.act(pol.seed(0), (), obs[2:3], jax.random.key(0), True)[0])[0]
    one = agent.predict(obs[2])
    assert one.shape == want.shape[1:]
    np.testing.assert_array_equal(one, want_one)
    np.testing.assert_allclose(one, want[2], rtol=1e-5, atol=1e-6)
    if algo == "ppo":  # discrete: int indices
        assert got.shape == (5,) and np.issubdtype(got.dtype, np.integer)
        assert set(got.tolist()) <= {0, 1}
    else:  # continuous: inside Pendulum's bounds [-2, 2]
        assert got.shape == (5, 1) and np.all(np.abs(got) <= 2.0)
    # a list observation works too; a wrong shape is refused naming both shapes
    np.testing.assert_array_equal(agent.predict(obs[2].tolist()), want_one)
    with pytest.raises(ValueError, match="observes"):
        agent.predict(np.zeros((5, agent.spec.obs_shape[0] + 1)))


def test_predict_of_another_seed_and_stochastic_actions(runs):
    pol = load_policy(runs["ppo"])
    obs = observations(load(runs["ppo"]).spec, 64)
    second = load(runs["ppo"], seed_index=1)
    want = np.asarray(pol.algo.act(pol.seed(1), (), obs, jax.random.key(0), True)[0])
    np.testing.assert_array_equal(second.predict(obs), want)
    sampled = [second.predict(obs, deterministic=False) for _ in range(3)]
    assert any((s != sampled[0]).any() for s in sampled[1:])  # the agent's key advances
    np.testing.assert_array_equal(
        second.predict(obs, deterministic=False, key=7),
        second.predict(obs, deterministic=False, key=7),
    )
    with pytest.raises(ValueError, match="seed index 2 out of range"):
        load(runs["ppo"], seed_index=2)


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_save_then_load_acts_the_same(runs, algo, tmp_path):
    agent = load(runs[algo], seed_index=1 if algo == "ppo" else 0)
    path = agent.save(tmp_path / "sub" / "agent.msgpack")
    assert path.exists()
    back = load(path)
    assert back.cfg == agent.cfg and back.seed_index == agent.seed_index
    obs = observations(agent.spec, 7, seed=1)
    np.testing.assert_array_equal(back.predict(obs), agent.predict(obs))
    # a run's own policy file loads too (config.json read beside it)
    direct = load(runs[algo] / POLICY_FILE)
    np.testing.assert_array_equal(direct.predict(obs), load(runs[algo]).predict(obs))


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_an_empty_batch_predicts_no_actions(runs, algo):
    agent = load(runs[algo])
    one = agent.predict(observations(agent.spec, 1))
    none = agent.predict(np.zeros((0, *agent.spec.obs_shape), np.float32))
    assert none.shape == (0, *one.shape[1:]) and none.dtype == one.dtype


def test_save_onto_a_directory_is_refused_and_leaves_nothing(runs, tmp_path):
    agent = load(runs["sac"])
    with pytest.raises(IsADirectoryError, match="give a file path"):
        agent.save(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_load_refuses_a_missing_or_damaged_file(runs, tmp_path):
    with pytest.raises(FileNotFoundError, match="policy file"):
        load(tmp_path / "nothing.msgpack")
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(load(runs["sac"]).save(tmp_path / "ok.msgpack").read_bytes()[:40])
    with pytest.raises(ValueError, match="is damaged"):
        load(bad)


def test_evaluate_on_env_ids(runs):
    ppo = load(runs["ppo"])
    res = ppo.evaluate("gymnax/CartPole-v1", episodes=3)
    assert res.episodes == 3 and 1 <= res.length_mean <= 500
    assert res.return_mean == pytest.approx(res.length_mean)  # CartPole: +1 per step
    assert ppo.evaluate("gymnax/CartPole-v1", episodes=3) == res  # deterministic
    # another family with the same spaces: gymnasium's CartPole
    host = ppo.evaluate("gymnasium/CartPole-v1", episodes=2)
    assert host.return_mean == pytest.approx(host.length_mean) and host.length_mean >= 1
    sac = load(runs["sac"])
    res = sac.evaluate("gymnax/Pendulum-v1", episodes=2)
    assert res.length_mean == 200 and -2000 < res.return_mean <= 0 and res.return_std >= 0
    with pytest.raises(ValueError, match="does not fit the agent trained on gymnax/CartPole-v1"):
        ppo.evaluate("gymnax/Pendulum-v1", episodes=1)
    with pytest.raises(ValueError, match="action bounds"):
        sac._check_spec(dataclasses.replace(sac.spec, action_low=(-1.0,), action_high=(1.0,)))


def test_evaluate_on_a_gymnasium_instance_equals_its_env_id(runs):
    sac = load(runs["sac"])
    env = gym.make("Pendulum-v1")
    res = sac.evaluate(env, episodes=2, seed=3)
    assert res.length_mean == 200 and res.episodes == 2
    by_id = sac.evaluate("gymnasium/Pendulum-v1", episodes=2, seed=3)
    assert res.return_mean == pytest.approx(by_id.return_mean, rel=1e-4)
    assert res.return_std == pytest.approx(by_id.return_std, rel=1e-3, abs=1e-3)
    env.close()
    with pytest.raises(ValueError, match="does not fit"):
        sac.evaluate(gym.make("CartPole-v1"), episodes=1)
    with pytest.raises(TypeError, match=r"env id or a gymnasium\.Env"):
        sac.evaluate(42, episodes=1)


def test_the_best_evaluations_policy_file_loads(runs):
    agent = load(runs["sac"])
    best = load(runs["sac"] / "policy-best.msgpack")
    obs = observations(agent.spec, 3)
    assert best.cfg == agent.cfg and best.predict(obs).shape == agent.predict(obs).shape
