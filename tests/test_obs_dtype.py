"""Observations kept in their own dtype: MinAtar's grids as bool, uint8 frames as uint8,
through the env, the rollouts, the replay buffer, the transfers, the host workers, the
checkpoints and the memory estimate; the networks widen them at their input."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze.algos import common
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay, transfer
from jaxspreeze.envs import env_spec, gymnax, make_env
from jaxspreeze.host import hostenvs
from jaxspreeze.host.workers import ParamSlot, WorkerPool
from jaxspreeze.networks import torsos
from jaxspreeze.schedules.iteration import Iteration
from jaxspreeze.setup import memory
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

BREAKOUT = "gymnax/Breakout-MinAtar"
MINATAR = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar")


def _uint8_spec(shape=(6, 6, 4)) -> EnvSpec:
    return EnvSpec("frames", shape, True, 3, obs_dtype="uint8")


# ------------------------------------------------------------------ the env and its spec
def test_minatar_grids_are_bool_and_float_envs_stay_float32():
    for name in MINATAR:
        assert env_spec(f"gymnax/{name}").obs_dtype == "bool"
    for name in ("gymnax/CartPole-v1", "gymnax/Pendulum-v1", "gymnax/MemoryChain-bsuite"):
        assert env_spec(name).obs_dtype == "float32"
    env = make_env(BREAKOUT, 2)
    obs, state = env.reset(jax.random.key(0))
    assert obs.dtype == jnp.bool_ and obs.shape == (2, 10, 10, 4)
    obs, state, *_, final_obs = env.step(jax.random.key(1), state, jnp.zeros(2, jnp.int32))
    assert obs.dtype == final_obs.dtype == jnp.bool_
    # exact: the grid gymnax emits (float32) is the bool one, read as 0/1
    raw_env, params = env.render_state
    raw = jax.vmap(lambda s: raw_env.get_obs(s, params))(state.inner)
    assert raw.dtype == jnp.float32 and obs.any()
    np.testing.assert_array_equal(np.asarray(raw), np.asarray(obs, np.float32))
    cartpole = make_env("gymnax/CartPole-v1", 2)
    assert cartpole.reset(jax.random.key(0))[0].dtype == jnp.float32


@pytest.mark.slow
@pytest.mark.parametrize("name", [*MINATAR, "Seaquest-MinAtar"])
def test_the_bool_cast_loses_nothing(name):
    """gymnax emits MinAtar's grids as float32: every value of a random rollout is 0 or 1,
    so keeping them as bool is exact (Asterix builds its grid as int32 first, Seaquest as
    float32; the others as bool)."""
    env, params = gymnax._gymnax().make(name)

    def run(key):
        obs, state = env.reset(key, params)

        def step(state, key):
            k_act, k_step = jax.random.split(key)
            action = env.action_space(params).sample(k_act)
            obs, state, *_ = env.step(k_step, state, action, params)
            return state, obs

        return jnp.concatenate([obs[None], jax.lax.scan(step, state, jax.random.split(key, 20))[1]])

    seen = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 2))
    assert seen.dtype == jnp.float32 and bool(jnp.all((seen == 0) | (seen == 1)))
    assert gymnax.obs_dtype(name) == "bool"


# ------------------------------------------------------------------ replay and transfers
def test_the_replay_buffer_keeps_bool_and_uint8_exactly():
    example = replay.example_transition(env_spec(BREAKOUT))
    assert example.obs.dtype == jnp.bool_ and example.next_obs.dtype == jnp.bool_
    spec = _uint8_spec()
    buf = replay.init(replay.example_transition(spec), 8)
    assert buf.data.obs.dtype == jnp.uint8 and buf.data.next_obs.dtype == jnp.uint8
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (12, *spec.obs_shape), dtype=np.uint8)
    items = Transition(
        jnp.asarray(frames),
        jnp.arange(12, dtype=jnp.int32) % 3,
        jnp.zeros(12),
        jnp.zeros(12, bool),
        jnp.zeros(12, bool),
        jnp.asarray(255 - frames),
    )
    add = jax.jit(replay.add)
    buf = add(add(buf, jax.tree.map(lambda x: x[:5], items)), jax.tree.map(lambda x: x[5:], items))
    # 12 items in 8 slots: slot s holds item 8 + s for s < 4, item s otherwise
    held = [8 + s if s < 4 else s for s in range(8)]
    np.testing.assert_array_equal(np.asarray(buf.data.obs), frames[held])
    np.testing.assert_array_equal(np.asarray(buf.data.next_obs), 255 - frames[held])
    batch = replay.sample(buf, jax.random.key(0), 16)
    idx = np.asarray(replay.sample_indices(buf, jax.random.key(0), 16))
    np.testing.assert_array_equal(np.asarray(batch.obs), frames[held][idx])
    # the buffer's bytes: one a value for uint8, four for float32
    floats = dataclasses.replace(spec, obs_dtype="float32")
    per_value = replay.nbytes(replay.example_transition(floats), 8) - replay.nbytes(
        replay.example_transition(spec), 8
    )
    assert per_value == 8 * 2 * 144 * 3  # 8 slots x (obs, next_obs) x 144 values x 3 B


def test_one_byte_observations_pack_four_to_a_word_bit_for_bit():
    rng = np.random.default_rng(1)
    tree = (
        Transition(
            jnp.asarray(rng.integers(0, 256, (3, 2, 5, 5, 3), dtype=np.uint8)),  # 75 a row
            jnp.asarray(rng.integers(0, 4, (3, 2)), jnp.int32),
            jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
            jnp.asarray(rng.random((3, 2)) < 0.5),
            jnp.zeros((3, 2), bool),
            jnp.asarray(rng.random((3, 2, 5, 5, 3)) < 0.5),
        ),
        jnp.asarray(rng.integers(-128, 128, (7,)), jnp.int8),
    )
    p = transfer.packer(tree)
    assert isinstance(p, transfer.Packer)
    # 450 obs bytes, 6 int32, 6 float32, 6 + 6 flag bytes, 450 bool bytes, 7 int8 bytes
    assert p.size == 113 + 6 + 6 + 2 + 2 + 113 + 2
    seeds = jax.tree.map(lambda x: jnp.stack([x, x[::-1]]), tree)
    back = jax.jit(jax.vmap(p.unpack))(jax.jit(jax.vmap(p.pack))(seeds))
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(seeds), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------ the networks' input
def test_the_mlp_and_the_normaliser_widen_at_their_input():
    """As the torsos do (tests/test_networks.py): uint8 read as value / 255, bool as 0/1."""
    frames = jnp.asarray(np.random.default_rng(3).integers(0, 256, (3, 6), dtype=np.uint8))
    scaled = frames.astype(jnp.float32) / 255.0
    mlp = torsos.MLP((4,), 2)
    params = mlp.init(jax.random.key(0), frames)
    apply = jax.jit(mlp.apply)
    np.testing.assert_array_equal(apply(params, frames), apply(params, scaled))
    grid = frames > 128
    np.testing.assert_array_equal(apply(params, grid), apply(params, grid.astype(jnp.float32)))
    stats = jax.jit(common.stats_update)(common.stats_init((6,)), frames)
    # three rows merged into the prior (mean 0, count 1e-4)
    np.testing.assert_allclose(stats.mean, np.asarray(scaled).mean(0) * 3 / (3 + 1e-4), rtol=1e-6)
    normalize = jax.jit(common.normalize)
    assert normalize(stats, frames).dtype == jnp.float32
    np.testing.assert_allclose(normalize(stats, frames), normalize(stats, scaled), rtol=1e-5)


# ------------------------------------------------------------------ rollouts and state
def _iteration(algo: str, **section):
    cfg = RunConfig(algo=algo, env=BREAKOUT, num_envs=4, rollout_steps=8, batch_size=16)
    planned = plan(cfg.replace(**{algo: section}) if section else cfg, on_devices=False)
    agent = planned.make_algorithm()
    return agent, Iteration.from_plan(planned, agent, make_env(BREAKOUT, 4), False)


def test_a_pqn_rollout_of_breakout_holds_bool():
    _, it = _iteration("pqn")
    state = jax.eval_shape(it.init, jax.random.key(0))
    assert state.env.obs.dtype == jnp.bool_
    zero = jnp.zeros((), jnp.int32)
    out = jax.eval_shape(it.collect, state.agent.actor, state.env, state.key, zero, zero, zero)
    traj = out[4].traj
    assert traj.obs.dtype == jnp.bool_ and traj.next_obs.dtype == jnp.bool_
    assert traj.obs.shape == (8, 4, 10, 10, 4)


def test_ppo_collects_bool_and_learns_from_it():
    """One PPO iteration on Breakout: the rollout holds bool, the update reads it (finite,
    the parameters move)."""
    algo, it = _iteration("ppo", torso="mlp", hidden=(16,), epochs=1)

    def one(state):
        zero = jnp.zeros((), jnp.int32)
        *_, c, _ = it.collect(state.agent.actor, state.env, state.key, zero, zero, zero)
        data = it.rollout_data(c)
        critic, _, m_critic = it.critic_side(
            state.agent.critic, None, data, c.actor_view, c.critic_key
        )
        view = algo.critic_view(state.agent.critic)
        actor, _, m_actor = it.actor_side(state.agent.actor, data, view, c.actor_key, zero, zero)
        return actor, critic, c.traj, {**m_critic, **m_actor}

    state = jax.jit(it.init)(jax.random.key(0))
    actor, critic, traj, metrics = jax.jit(one)(state)
    assert traj.obs.dtype == traj.next_obs.dtype == jnp.bool_
    assert traj.obs.any() and not traj.obs.all()
    assert metrics["actor_finite"] == 1.0 and metrics["critic_finite"] == 1.0
    for new, old in ((actor, state.agent.actor), (critic, state.agent.critic)):
        moved = [
            not np.array_equal(a, b)
            for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(old.params), strict=True)
        ]
        assert any(moved)


def test_a_checkpoint_keeps_bool_and_uint8_leaves(tmp_path):
    """DQN on Breakout: its replay buffer and env observations are bool; a uint8 buffer
    too; both come back from a checkpoint bitwise, in their dtype."""
    cfg = RunConfig(
        algo="dqn", env=BREAKOUT, num_envs=2, buffer_size=64, batch_size=16, learning_starts=16
    ).replace(dqn={"torso": "mlp", "hidden": (16,)})
    planned = plan(cfg, on_devices=False)
    it = Iteration.from_plan(planned, planned.make_algorithm(), make_env(BREAKOUT, 2), False)
    state = jax.jit(it.init)(jax.random.key(0))
    assert state.buffer.data.obs.dtype == jnp.bool_ and state.env.obs.dtype == jnp.bool_
    grids = jnp.asarray(np.random.default_rng(4).random((3, 10, 10, 4)) < 0.5)
    zeros = jnp.zeros(3, bool)
    items = Transition(grids, jnp.arange(3, dtype=jnp.int32), jnp.ones(3), zeros, zeros, ~grids)
    state = state._replace(buffer=replay.add(state.buffer, items))
    frames = replay.init(replay.example_transition(_uint8_spec()), 4)
    frames = frames._replace(
        data=frames.data._replace(obs=jnp.arange(4 * 144, dtype=jnp.uint8).reshape(4, 6, 6, 4))
    )
    state = state._replace(obs_buffer=frames)
    state = jax.tree.map(lambda x: x[None], state)  # the seed axis
    path = checkpoint.save(tmp_path, state, env_steps=0, chunk=0, config=cfg)
    back, _ = checkpoint.restore(path, state)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(state), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        assert a.dtype == b.dtype
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert back.buffer.data.obs.dtype == jnp.bool_ and back.obs_buffer.data.obs.dtype == jnp.uint8


@pytest.mark.slow
def test_a_tiny_ppo_run_on_breakout_trains(tmp_path):
    """End to end (about 20 s of CPU: the chunk, the evaluation and the init compile)."""
    cfg = RunConfig(
        algo="ppo",
        env=BREAKOUT,
        total_steps=256,
        num_envs=4,
        rollout_steps=32,
        batch_size=32,
        chunk_iterations=2,
        eval_episodes=1,
        logdir=str(tmp_path),
        sinks=(),
    )
    result = jaxspreeze.train(cfg, quiet=True)
    assert result.summary["env_steps"] == 256
    assert result.state.env.obs.dtype == jnp.bool_
    fresh = jax.jit(jax.vmap(plan(cfg, on_devices=False).make_algorithm().init))(
        jax.random.split(jax.random.key(cfg.seed), 1)
    )
    params = jax.tree.leaves(result.state.agent.actor.params)
    assert all(bool(jnp.all(jnp.isfinite(p))) for p in params)
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(params, jax.tree.leaves(fresh.actor.params), strict=True)
    )


# ------------------------------------------------------------------ host envs
class _Frames(gym.Env):
    """uint8 frames whose every value is ``37 * t mod 256`` at step t (3-step episodes)."""

    observation_space = gym.spaces.Box(0, 255, (3, 3, 2), np.uint8)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._frame(), {}

    def step(self, action):
        self.t += 1
        return self._frame(), 0.0, False, False, {}

    def _frame(self):
        return np.full((3, 3, 2), 37 * self.t % 256, np.uint8)


def test_host_envs_and_worker_blocks_keep_uint8():
    env = hostenvs.make_host_env(lambda: gym.wrappers.TimeLimit(_Frames(), 3), 2, seed=0)
    assert env.spec.obs_dtype == "uint8"
    assert env.reset(seed=0).dtype == np.uint8
    out = env.step(np.zeros((2, 1), np.float32))
    assert out.obs.dtype == out.final_obs.dtype == np.uint8
    env.close()
    assert hostenvs.obs_dtype(np.float64) == "float32" and hostenvs.obs_dtype(bool) == "bool"
    seen = []

    def policy(params, obs, key):
        seen.append(obs.dtype)  # at trace time
        return jnp.broadcast_to(params["a"], (obs.shape[0], 1))

    slot = ParamSlot()
    slot.publish({"a": jnp.float32(0.0)}, 0)
    frames = lambda: gym.wrappers.TimeLimit(_Frames(), 3)
    with WorkerPool(
        frames, policy, slot, num_workers=1, envs_per_worker=2, rollout_steps=4
    ) as pool:
        block = pool.get(timeout=60)
    tr = block.transition
    assert tr.obs.dtype == tr.next_obs.dtype == np.uint8 and set(seen) == {np.dtype(np.uint8)}
    # a 3-step episode: t = 0, 1, 2 acted on, then a reset; the values are exact
    want = [37 * t % 256 for t in (0, 1, 2, 0)]
    np.testing.assert_array_equal(tr.obs[:, :, 0, 0, 0], np.array([want, want]).T)


# ------------------------------------------------------------------ the memory estimate
def _frames_env(dtype):
    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (84, 84, 4), dtype)
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros((84, 84, 4), dtype), {}

        def step(self, action):
            return np.zeros((84, 84, 4), dtype), 0.0, False, False, {}

    Frames.__name__ = f"Frames{np.dtype(dtype).name.capitalize()}"
    return hostenvs.register_user_env(Frames).name


def test_the_memory_estimate_counts_the_observations_itemsize(monkeypatch):
    """1M transitions of 84x84x4 frames: as float32 they do not fit where uint8 ones do."""
    planned = {
        dtype: plan(
            RunConfig(algo="sac", env=_frames_env(dtype), buffer_size=10**6), on_devices=False
        )
        for dtype in (np.uint8, np.float32)
    }
    small, big = (memory.estimate_memory(planned[d]) for d in (np.uint8, np.float32))
    frame = 84 * 84 * 4
    assert big["replay_buffer"] - small["replay_buffer"] == 10**6 * 2 * frame * 3
    assert small["replay_buffer"] > 10**6 * 2 * frame  # obs and next_obs, one byte a value
    free = (small["total"] + big["total"]) // 2
    monkeypatch.setattr(memory, "available_memory", lambda device: (free, "the host"))
    assert memory.check_memory(planned[np.uint8])["total"] == small["total"]
    with pytest.raises(ConfigError) as err:
        memory.check_memory(planned[np.float32])
    assert err.value.field == "buffer_size"
    assert "--buffer-size" in str(err.value) and "observations as float32, 4 B" in str(err.value)


# ------------------------------------------------------------------ one rule, every family
@pytest.mark.parametrize("dtype, kept", [(jnp.int32, "float32"), (jnp.int8, "int8")])
def test_a_jax_env_keeps_its_observations_by_the_host_envs_rule(dtype, kept):
    """One rule for every family (core.types.kept_obs_dtype): one-byte dtypes kept, others
    float32, whether the env is a JAX env or a host env."""
    from jaxspreeze.core.types import kept_obs_dtype
    from jaxspreeze.envs import jaxenv, register_env

    assert hostenvs.obs_dtype(np.dtype(dtype)) == kept_obs_dtype(dtype) == kept

    def grid_reset(key):
        return jnp.ones((3, 3), dtype), jnp.int32(0)

    def grid_step(state, action):
        return jnp.full((3, 3), 2, dtype), state + 1, jnp.float32(1.0), state >= 2

    name = register_env(jaxenv.JaxEnv(grid_reset, grid_step, actions=2, name="grid"))
    try:
        env = make_env(name, 2)
        assert env.spec.obs_dtype == kept
        obs, state = env.reset(jax.random.key(0))
        out = env.step(jax.random.key(1), state, jnp.zeros(2, jnp.int32))
        assert obs.dtype == out[0].dtype == np.dtype(kept)
        np.testing.assert_array_equal(np.asarray(out[0]), 2)
    finally:
        jaxenv._ENVS.pop(name, None)
