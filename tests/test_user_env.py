"""Your own gymnasium env, passed from Python: ``jaxspreeze.train(cfg, env=...)``.

The env enters :mod:`jaxspreeze.host.hostenvs` under ``user/<ClassName>`` and is a host env
from then on; the run directory records it, ``jaxspreeze.load`` predicts with it in a
later process, and what needs the env itself (stepping, resuming from the CLI) asks for it
to be passed again.
"""

from __future__ import annotations

import json

import gymnasium as gym
import jax
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.envs import env_spec, is_host_env
from jaxspreeze.host import hostenvs
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import rundir

NAME = "user/PendulumEnv"


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
    """Each test starts as a fresh process would: no user env registered."""
    monkeypatch.setattr(hostenvs, "_USER_ENVS", {})


def pendulum() -> gym.Env:
    return gym.make("Pendulum-v1")


class DictObsEnv(gym.Env):
    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))})
    action_space = gym.spaces.Discrete(2)


class MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.MultiDiscrete([2, 3])


# --- registering ---------------------------------------------------------------------------


def test_an_instance_is_deep_copied_for_every_env_and_never_stepped():
    inst = pendulum()
    entry = hostenvs.register_user_env(inst)
    assert entry.name == NAME and entry.kind == "instance" and is_host_env(NAME)
    assert entry.spec.obs_shape == (3,) and entry.spec.action_low == (-2.0,)
    assert entry.spec.max_episode_steps == 200  # from gym.make's TimeLimit
    assert env_spec(NAME) == entry.spec
    with hostenvs.make_host_env(NAME, 3) as env:
        obs = env.reset(seed=0)
        assert obs.shape == (3, 3)
        out = env.step(np.zeros((3, 1), np.float32))
        assert out.valid.all() and out.obs.shape == (3, 3)
        inner = [e.unwrapped for e in env.vec.envs]
        assert len({id(e) for e in inner}) == 3 and inst.unwrapped not in inner
    assert getattr(inst.unwrapped, "state", None) is None  # the user's instance was not reset


def test_a_factory_is_called_once_per_env():
    calls = []

    def factory():
        calls.append(1)
        return gym.make("CartPole-v1")

    entry = hostenvs.register_user_env(factory)
    assert entry.name == "user/CartPoleEnv" and entry.spec.discrete and entry.spec.action_dim == 2
    assert len(calls) == 1  # the probe for its spaces
    with hostenvs.make_host_env(entry.name, 4) as env:
        env.reset(seed=1)
        out = env.step(np.zeros(4, np.int32))
        assert out.reward.tolist() == [1.0] * 4
    assert len(calls) == 5


def test_a_vector_env_lends_its_env_fns():
    vec = gym.vector.SyncVectorEnv([pendulum, pendulum])
    entry = hostenvs.register_user_env(vec)
    assert entry.name == NAME and entry.kind == "vector" and entry.vectorization == "sync"
    with hostenvs.make_host_env(NAME, 3) as env:
        assert env.reset(seed=0).shape == (3, 3)
    vec.close()


def test_a_later_registration_replaces_the_spec_under_the_same_name():
    hostenvs.register_user_env(pendulum)
    assert env_spec(NAME).max_episode_steps == 200
    hostenvs.register_user_env(lambda: gym.make("Pendulum-v1", max_episode_steps=50))
    assert env_spec(NAME).max_episode_steps == 50  # not a cached spec


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (42, "got int"),
        ("gymnasium/Pendulum-v1", "got str"),
        (lambda: 3, "returned a int, not a gymnasium.Env"),
        (DictObsEnv(), "observation space Dict"),
        (lambda: MultiDiscreteEnv(), "action space MultiDiscrete"),
    ],
)
def test_a_bad_env_is_a_config_error_naming_env(env, words):
    with pytest.raises(ConfigError) as e:
        hostenvs.register_user_env(env)
    assert e.value.field == "env" and words in str(e.value) and "\n" not in str(e.value)


def test_an_instance_that_cannot_be_copied_asks_for_a_factory():
    class Locked(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,))
        action_space = gym.spaces.Discrete(2)

        def __deepcopy__(self, memo):
            raise TypeError("holds a socket")

    with pytest.raises(ConfigError, match=r"cannot be deep-copied.*holds a socket.*factory"):
        hostenvs.register_user_env(Locked())


def test_train_refuses_a_bad_env_before_anything_runs(tmp_path):
    cfg = RunConfig(logdir=str(tmp_path), run_name="bad")
    with pytest.raises(ConfigError) as e:
        jaxspreeze.train(cfg, env=MultiDiscreteEnv(), quiet=True)
    assert e.value.field == "env" and "MultiDiscrete" in str(e.value)
    assert not (tmp_path / "bad").exists()


def test_a_user_env_this_process_lacks_is_refused_with_one_line():
    with pytest.raises(UnknownEnvError, match=r"passed from Python.*env=\.\.\., resume=RUN_DIR"):
        env_spec("user/Nowhere")
    with pytest.raises(UnknownEnvError, match="passed from Python"):
        hostenvs.make_host_env("user/Nowhere", 1)


# --- a run directory of a user env ---------------------------------------------------------


def recorded_run(tmp_path, env=pendulum) -> RunConfig:
    """A run directory as a finished run on a user env leaves it (no training): config,
    the env's record, an untrained policy; then the registry is emptied (a new process)."""
    name = hostenvs.register_user_env(env).name
    cfg = RunConfig().replace(
        algo="sac", env=name, logdir=str(tmp_path), run_name="run", sac={"hidden": (16, 16)}
    )
    run_dir = rundir.create(cfg).path
    hostenvs.save_user_env(run_dir, name)
    actor = jax.vmap(RunPlan.saved(cfg).make_algorithm().init)(
        jax.random.split(jax.random.key(0), 1)
    )
    save_policy(run_dir, actor.actor)
    hostenvs._USER_ENVS.clear()
    return cfg


def test_a_recorded_run_loads_and_predicts_without_the_env(tmp_path):
    recorded_run(tmp_path)
    record = json.loads((tmp_path / "run" / hostenvs.USER_ENV_FILE).read_text())
    assert record["name"] == NAME and record["passed_as"] == "factory"
    assert record["class"] == "gymnasium.envs.classic_control.pendulum.PendulumEnv"
    agent = jaxspreeze.load(tmp_path / "run")
    action = agent.predict(np.zeros(3, np.float32))
    assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0
    assert agent.predict(np.zeros((5, 3))).shape == (5, 1)
    with pytest.raises(UnknownEnvError, match="passed from Python"):
        agent.evaluate(NAME, episodes=1)


def test_load_with_the_env_passed_again_evaluates_it(tmp_path):
    recorded_run(tmp_path)
    agent = jaxspreeze.load(tmp_path / "run", env=pendulum)
    res = agent.evaluate(NAME, episodes=2, max_steps=20)
    assert res.episodes == 2 and res.length_mean >= 20 and res.return_mean < 0


def test_cli_resume_of_a_user_env_run_is_refused_with_one_line(tmp_path, run_main):
    recorded_run(tmp_path)
    out = run_main("train", "--resume", str(tmp_path / "run"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "user/PendulumEnv" in lines[0]
        and "pass it again from Python" in lines[0]
    )


# --- training (slow: compiling a run takes about a minute on 2 busy cores) ------------------


def tiny(tmp_path, name: str, **changes) -> RunConfig:
    base = dict(
        algo="sac",
        total_steps=400,
        num_envs=2,
        grad_steps=1,
        batch_size=32,
        buffer_size=1000,
        learning_starts=100,
        eval_every=0,
        eval_episodes=2,
        seed=0,
        logdir=str(tmp_path),
        run_name=name,
        sinks=("jsonl",),
        sac={"hidden": (16, 16)},
    )
    return RunConfig().replace(**{**base, **changes})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["instance", "factory"])
def test_train_a_user_pendulum_then_load_and_predict(tmp_path, how):
    env = pendulum() if how == "instance" else pendulum
    workers = 1 if how == "instance" else 2
    res = jaxspreeze.train(tiny(tmp_path, how, host_workers=workers), env=env, quiet=True)
    assert res.summary["env_steps"] >= 400
    saved = json.loads((res.run_dir / "config.json").read_text())
    assert saved["env"] == NAME
    record = json.loads((res.run_dir / hostenvs.USER_ENV_FILE).read_text())
    assert record["passed_as"] == how and record["spec"]["obs_shape"] == [3]
    hostenvs._USER_ENVS.clear()  # as a later process
    agent = jaxspreeze.load(res.run_dir)
    assert agent.predict(np.zeros((4, 3))).shape == (4, 1)


@pytest.mark.slow
def test_resume_a_user_env_run_from_python_with_the_env_passed_again(tmp_path):
    first = jaxspreeze.train(tiny(tmp_path, "r"), env=pendulum, quiet=True)
    hostenvs._USER_ENVS.clear()  # as a later process
    cfg = tiny(tmp_path, "r", total_steps=600)
    with pytest.raises(ConfigError, match="pass it again from Python") as e:
        jaxspreeze.train(cfg.replace(env=NAME), resume=first.run_dir, quiet=True)
    assert e.value.field == "env"
    res = jaxspreeze.train(cfg, env=pendulum, resume=first.run_dir, quiet=True)
    assert res.run_dir == first.run_dir and res.summary["env_steps"] >= 600
