"""The host env contract on gymnasium and envpool: time limits, final obs, reset rows, errors."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.host import hostenvs
from jaxspreeze.host.hostenvs import host_env_spec, make_host_env

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(
    not HAS_ENVPOOL, reason='needs pip install "jaxspreeze[envpool]"'
)


class _Spaces(gym.Env):
    """A one-step env with the spaces it is given (for the space checks)."""

    def __init__(self, obs_space, act_space):
        self.observation_space, self.action_space = obs_space, act_space
        self.last_action = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        self.last_action = action
        return self.observation_space.sample(), 0.0, False, False, {}


def _rollout(env, steps, action_fn):
    """Sync steps of a HostEnv: the obs acted on and every HostStep."""
    obs = env.reset(seed=3)
    acted, outs = [], []
    for t in range(steps):
        acted.append(obs)
        out = env.step(action_fn(t, obs))
        outs.append(out)
        obs = out.obs
    return acted, outs


def _reference(env_id, seed, steps, action_fn, **kwargs):
    """One plain gymnasium env, reset by hand: (obs, reward, terminated, truncated) per step."""
    env = gym.make(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    out = []
    for t in range(steps):
        nxt, r, term, trunc, _ = env.step(action_fn(t, obs[None])[0])
        out.append((obs, r, term, trunc, nxt))
        obs = env.reset()[0] if term or trunc else nxt
    env.close()
    return out


def _pendulum_action(t, obs):
    return np.clip(obs[:, :1] * 1.5, -2, 2).astype(np.float32)


def _cartpole_push(t, obs):
    return np.ones(len(obs), np.int64)  # always push right: the pole falls within ~10 steps


# --- gymnasium ----------------------------------------------------------------------------


def test_gymnasium_truncation_keeps_final_obs_and_matches_a_plain_env():
    with make_host_env("gymnasium/Pendulum-v1", 2, max_episode_steps=5) as env:
        spec = env.spec
        assert spec.name == "gymnasium/Pendulum-v1" and spec.obs_shape == (3,)
        assert not spec.discrete and spec.action_dim == 1
        assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)
        assert spec.max_episode_steps == 5
        acted, outs = _rollout(env, 12, _pendulum_action)
    # same-step autoreset: every row is a transition, 12 steps x 2 envs counted exactly
    assert sum(int(o.valid.sum()) for o in outs) == 24
    trunc = np.stack([o.truncated for o in outs])
    term = np.stack([o.terminated for o in outs])
    assert not term.any()
    assert trunc[[4, 9]].all() and trunc.sum() == 4  # the time limit, exactly at steps 5, 10
    for i in range(2):
        ref = _reference("Pendulum-v1", 3 + i, 12, _pendulum_action, max_episode_steps=5)
        for t, (obs, r, rterm, rtrunc, nxt) in enumerate(ref):
            np.testing.assert_allclose(acted[t][i], obs, rtol=1e-6)
            np.testing.assert_allclose(outs[t].reward[i], r, rtol=1e-6)
            np.testing.assert_allclose(outs[t].final_obs[i], nxt, rtol=1e-6)  # the true final
            assert (outs[t].terminated[i], outs[t].truncated[i]) == (rterm, rtrunc)
    # where the episode ended, obs is already the reset observation, not the final one
    assert not np.allclose(outs[4].obs, outs[4].final_obs)
    np.testing.assert_array_equal(outs[3].obs, outs[3].final_obs)


def test_gymnasium_termination_is_not_truncation():
    with make_host_env("gymnasium/CartPole-v1", 3) as env:
        spec = env.spec
        assert spec.discrete and spec.action_dim == 2 and spec.action_shape == ()
        assert spec.max_episode_steps == 500
        _, outs = _rollout(env, 30, _cartpole_push)
    term = np.stack([o.terminated for o in outs])
    assert term[:12].any(axis=0).all()  # every env's pole falls early
    assert not np.stack([o.truncated for o in outs]).any()  # far from the 500-step limit
    with make_host_env("gymnasium/CartPole-v1", 3, max_episode_steps=4) as env:
        _, outs = _rollout(env, 4, _cartpole_push)
    assert outs[3].truncated.all() and not outs[3].terminated.any()


def _next_step_vec(n, max_steps):
    return gym.vector.SyncVectorEnv(
        [lambda: gym.make("Pendulum-v1", max_episode_steps=max_steps)] * n,
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )


def test_next_step_reset_row_is_dropped_and_the_transitions_match_same_step():
    n, steps = 2, 13
    with make_host_env(_next_step_vec(n, 5), n) as env:
        assert not env.same_step
        acted, outs = _rollout(env, steps, _pendulum_action)
    valid = np.stack([o.valid for o in outs])
    done = np.stack([o.terminated | o.truncated for o in outs])
    # the step after each episode end is a reset row: no transition, reward 0
    assert (~valid[1:] == done[:-1]).all() and valid[0].all()
    assert (np.stack([o.reward for o in outs])[~valid] == 0).all()
    assert not done[~valid].any()
    # env steps counted exactly: every step of every env minus the reset rows
    assert valid.sum() == steps * n - done[:-1].sum()
    # the valid rows are exactly the transitions of a plain env, final obs kept
    for i in range(n):
        rows = [(acted[t][i], outs[t]) for t in range(steps) if valid[t, i]]
        ref = _reference("Pendulum-v1", 3 + i, len(rows), _pendulum_action, max_episode_steps=5)
        for (obs, out), (robs, r, rterm, rtrunc, rnxt) in zip(rows, ref, strict=True):
            np.testing.assert_allclose(obs, robs, rtol=1e-6)
            np.testing.assert_allclose(out.reward[i], r, rtol=1e-6)
            np.testing.assert_allclose(out.final_obs[i], rnxt, rtol=1e-6)
            assert (out.terminated[i], out.truncated[i]) == (rterm, rtrunc)


def test_user_factory_and_discrete_start():
    env = make_host_env(
        lambda: _Spaces(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3, start=-1)), 2
    )
    with env:
        assert env.spec.discrete and env.spec.action_dim == 3
        assert env.name == "gymnasium/_Spaces"
        env.reset(seed=0)
        out = env.step(np.array([0, 2]))
        assert out.valid.all() and out.obs.dtype == np.float32
        assert [e.unwrapped.last_action for e in env.vec.envs] == [-1, 1]  # shifted by start
    one = _Spaces(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (2,)))
    with make_host_env(one, 1) as env:
        assert env.spec.action_dim == 2
    with pytest.raises(ValueError, match="factory"):
        make_host_env(one, 2)


@pytest.mark.parametrize(
    ("obs_space", "act_space", "named"),
    [
        (gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,))}), gym.spaces.Discrete(2), "Dict"),
        (gym.spaces.Box(0, 1, (2,)), gym.spaces.MultiDiscrete([2, 3]), "MultiDiscrete"),
        (gym.spaces.Box(0, 1, (2,)), gym.spaces.Tuple([gym.spaces.Discrete(2)]), "Tuple"),
        (gym.spaces.Box(0, 1, (2,)), gym.spaces.Box(-np.inf, np.inf, (2,)), "finite bounds"),
    ],
)
def test_unsupported_spaces_are_named(obs_space, act_space, named):
    with pytest.raises(UnknownEnvError, match=named):
        make_host_env(lambda: _Spaces(obs_space, act_space), 1)


def test_unknown_ids_name_the_nearest():
    with pytest.raises(UnknownEnvError, match=r"'HalfCheetah-v9'.*nearest known: HalfCheetah-v5"):
        host_env_spec("gymnasium/HalfCheetah-v9")
    with pytest.raises(UnknownEnvError, match="gymnasium/<id> or envpool/<task>"):
        hostenvs.check_host_env_name("gymnax2/Pendulum-v1")
    with pytest.raises(UnknownEnvError, match="Tuple"):  # Blackjack's observation
        host_env_spec("gymnasium/Blackjack-v1")


def test_missing_envpool_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "envpool" else real(name, *a)
    )
    with pytest.raises(UnknownEnvError, match=r'pip install "jaxspreeze\[envpool\]"'):
        hostenvs.check_host_env_name("envpool/HalfCheetah-v5")


def test_user_registered_id():
    gym.register(
        "JaxspreezeHostTest-v0",
        entry_point=lambda: gym.make("Pendulum-v1").unwrapped,
        max_episode_steps=7,
    )
    try:
        spec = host_env_spec("gymnasium/JaxspreezeHostTest-v0")
        assert spec.max_episode_steps == 7 and spec.action_dim == 1
    finally:
        gym.registry.pop("JaxspreezeHostTest-v0")
        host_env_spec.cache_clear()


# --- envpool ------------------------------------------------------------------------------


@needs_envpool
def test_envpool_truncation_reset_row_and_exact_count():
    n, steps = 3, 13
    with make_host_env("envpool/Pendulum-v1", n, seed=3, max_episode_steps=5) as env:
        assert env.spec.max_episode_steps == 5 and env.spec.action_low == (-2.0,)
        acted, outs = _rollout(env, steps, _pendulum_action)
    valid = np.stack([o.valid for o in outs])
    trunc = np.stack([o.truncated for o in outs])
    done = trunc | np.stack([o.terminated for o in outs])
    assert not np.stack([o.terminated for o in outs]).any()
    # 5 real steps, then one reset row: truncated at rows 4 and 10, reset rows 5 and 11
    assert trunc[[4, 10]].all() and trunc.sum() == 2 * n
    assert (~valid[1:] == done[:-1]).all() and valid[0].all()
    assert valid.sum() == steps * n - done[:-1].sum()
    assert (np.stack([o.reward for o in outs])[~valid] == 0).all()
    for t in range(steps - 1):
        # the final observation is kept on the ending row; the next row starts elsewhere
        np.testing.assert_array_equal(outs[t].final_obs, outs[t].obs)
        if valid[t + 1].all():  # a real step continues from the observation it acted on
            np.testing.assert_array_equal(acted[t + 1], outs[t].obs)
    assert not np.allclose(outs[5].obs, outs[4].final_obs)  # the reset row's obs is new


@needs_envpool
def test_envpool_async_rows_chain_per_env():
    n, b = 4, 2
    with make_host_env("envpool/CartPole-v1", n, batch_size=b, seed=0) as env:
        assert env.spec.discrete and env.batch_size == b
        with pytest.raises(RuntimeError, match="async_reset/send/recv"):
            env.reset(0)
        env.async_reset(0)
        reset_next = np.ones(n, bool)  # every env's first answer is its reset row
        steps = np.zeros(n, int)
        for _ in range(60):
            out = env.recv()
            assert len(out.env_ids) == b
            np.testing.assert_array_equal(out.valid, ~reset_next[out.env_ids])
            reset_next[out.env_ids] = out.terminated | out.truncated
            steps[out.env_ids] += out.valid
            env.send(_cartpole_push(0, out.obs), out.env_ids)
        assert (steps > 0).all() and steps.sum() < 60 * b  # some answers were reset rows


@needs_envpool
def test_envpool_unknown_task():
    with pytest.raises(UnknownEnvError, match=r"'HalfCheetah-v9'.*nearest known: HalfCheetah-v5"):
        hostenvs.check_host_env_name("envpool/HalfCheetah-v9")


def test_a_mujoco_id_without_its_packages_names_the_host_extra(monkeypatch):
    """gymnasium's DependencyNotInstalled (MuJoCo missing): one line naming jaxspreeze[host]."""

    def missing(*args, **kwargs):
        raise gym.error.DependencyNotInstalled("MuJoCo is not installed")

    monkeypatch.setattr(gym, "make_vec", missing)
    with pytest.raises(UnknownEnvError, match=r"MuJoCo is not installed.*jaxspreeze\[host\]"):
        make_host_env("gymnasium/HalfCheetah-v5", 1)
