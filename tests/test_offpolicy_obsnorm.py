"""Observation normalisation for the off-policy algorithms (``--sac.normalize-obs``, ...).

The running statistics live on the actor side (``off_policy.ObsNormActor``), are merged
with every observation collected (warm-up included) and handed to the critic side in the
actor view; the replay buffer keeps raw observations. Checked here: the statistics are
those of all collected observations (numpy), the critic and the actor phases read their
batches normalised by the statistics they are given, a checkpoint brings them back
bitwise, the saved policy acts with the statistics saved with it, the split equals the
fused iteration bitwise, and data parallelism merges every shard's observations.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_checkpoint import host_copy  # a copy of a state (a chunk donates the one it is given)

from jaxspreeze import algos, schedules
from jaxspreeze.algos import common, off_policy
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core.types import Transition
from jaxspreeze.data import replay
from jaxspreeze.envs import env_spec
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

OFF_POLICY = ("sac", "td3", "ddpg", "fasttd3", "fastsac")
PRIOR = 1e-4  # common.stats_init's count

# warm-up of 32 random steps, then 3 chunks of 4 iterations x 4 envs
TINY = dict(
    algo="sac",
    num_envs=4,
    rollout_steps=1,
    grad_steps=2,
    batch_size=16,
    buffer_size=512,
    learning_starts=32,
    chunk_iterations=4,
    total_steps=32 + 3 * 16,
    num_seeds=2,
    sinks=(),
    eval_episodes=2,
    sac=SACConfig(hidden=(8,), normalize_obs=True),
)


def tiny(**changes) -> RunConfig:
    return resolve(RunConfig(**{**TINY, **changes}))


def run_chunks(schedule, chunks: int):
    state = schedule.init()
    schedule.compile(state)
    state = schedule.warmup(state)
    for _ in range(chunks):
        state, _ = schedule.chunk(state)
    return state


def host(tree) -> list[np.ndarray]:
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree.leaves(tree)]  # fmt: skip


def bitwise(a, b) -> bool:
    la, lb = host(a), host(b)
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(la, lb, strict=True)
    )


def close(a, b, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Same structure and shapes, values equal to float rounding."""
    la, lb = host(a), host(b)
    return len(la) == len(lb) and all(
        x.shape == y.shape and np.allclose(x, y, rtol=rtol, atol=atol)
        for x, y in zip(la, lb, strict=True)
    )


def numpy_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The prior (mean 0, variance 1, count 1e-4) merged with the batch ``x [B, D]``."""
    x = x.astype(np.float64)
    n = x.shape[0]
    total = PRIOR + n
    mean = x.mean(0) * n / total
    m2 = PRIOR * 1.0 + x.var(0) * n + x.mean(0) ** 2 * PRIOR * n / total
    return mean, m2 / total, total


# ------------------------------------------------------------------ the flag and the state
@pytest.mark.parametrize("name", OFF_POLICY)
def test_the_flag_adds_statistics_to_the_actor_side(name):
    """On: the actor side carries the statistics and the algorithm observes; off: the
    algorithm's own actor side, no hook. FastTD3 and FastSAC default on (their recipe)."""
    spec = algos.get(name)
    run = resolve(RunConfig(algo=name, grad_steps=2))
    pendulum = env_spec("gymnax/Pendulum-v1")
    assert spec.config_cls().normalize_obs == (name in ("fasttd3", "fastsac"))
    on = spec.make(dataclasses.replace(spec.config_cls(), normalize_obs=True), pendulum, run)
    off = spec.make(dataclasses.replace(spec.config_cls(), normalize_obs=False), pendulum, run)
    actor = jax.eval_shape(on.init, jax.random.key(0)).actor
    assert isinstance(actor, off_policy.ObsNormActor) and on.observe is not None
    assert actor.obs_stats.mean.shape == pendulum.obs_shape
    raw = jax.eval_shape(off.init, jax.random.key(0)).actor
    assert off.observe is None and not isinstance(raw, off_policy.ObsNormActor)
    assert jax.tree.structure(actor.inner) == jax.tree.structure(raw)
    assert "normalize_obs" in {f.name for f in dataclasses.fields(spec.config_cls)}


def test_phases_read_batches_normalised_by_the_statistics_given():
    """The critic phase normalises its batch's obs and next_obs with the view's statistics,
    the actor phase its observations with its own: the raw algorithm on a buffer
    normalised by hand (same sampled rows; to float rounding: XLA fuses the normalisation
    into the phase), statistics left unchanged by the phases."""
    run = tiny()
    pendulum = env_spec("gymnax/Pendulum-v1")
    on = algos.get("sac").make(SACConfig(hidden=(8,), normalize_obs=True), pendulum, run)
    off = algos.get("sac").make(SACConfig(hidden=(8,)), pendulum, run)
    agent = on.init(jax.random.key(0))
    k = jax.random.split(jax.random.key(1), 4)
    n = 64
    obs = 3.0 + 2.0 * jax.random.normal(k[0], (n, 3))
    data = Transition(obs, jnp.zeros((n, 1)), jnp.ones(n), jnp.zeros(n, bool),
                      jnp.zeros(n, bool), obs[::-1] * 0.5)  # fmt: skip
    stats = on.observe(agent.actor, obs[None]).obs_stats
    actor = agent.actor._replace(obs_stats=stats)
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], data), n), data)
    normed = data._replace(obs=common.normalize(stats, obs),
                           next_obs=common.normalize(stats, data.next_obs))  # fmt: skip
    normed_buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], normed), n), normed)

    critic_a, m_a = jax.jit(on.critic_phase)(agent.critic, on.actor_view(actor), buffer, k[1])
    critic_b, m_b = jax.jit(off.critic_phase)(
        agent.critic, off.actor_view(actor.inner), normed_buffer, k[1]
    )
    assert close(critic_a, critic_b) and close(m_a, m_b, rtol=1e-4)
    view = on.critic_view(agent.critic)
    actor_a, _ = jax.jit(on.actor_phase)(actor, view, buffer, k[2])
    actor_b, _ = jax.jit(off.actor_phase)(actor.inner, view, normed_buffer, k[2])
    assert close(actor_a.inner, actor_b) and bitwise(actor_a.obs_stats, stats)
    # acting reads normalised observations too
    o = obs[:5]
    assert close(
        on.act(actor, (), o, k[3], True)[0],
        off.act(actor.inner, (), common.normalize(stats, o), k[3], True)[0],
    )


# ------------------------------------------------------------------ the statistics
@pytest.fixture(scope="module")
def fused_run():
    cfg = tiny()
    schedule = schedules.make(plan(cfg, devices.single()))
    return cfg, schedule, run_chunks(schedule, 3)  # (tests chunk copies of the state)


def test_statistics_are_those_of_every_collected_observation(fused_run):
    """After the warm-up and three chunks, each seed's statistics are the numpy mean and
    variance of every observation it collected (all still in the buffer)."""
    cfg, _, state = fused_run
    stats = state.agent.actor.obs_stats
    size = np.asarray(state.buffer.size)
    assert (size == cfg.total_steps).all()  # nothing overwritten: the buffer holds them all
    for seed in range(cfg.num_seeds):
        obs = np.asarray(state.buffer.data.obs[seed, : size[seed]])
        mean, var, count = numpy_stats(obs)
        np.testing.assert_allclose(np.asarray(stats.count[seed]), count, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(stats.mean[seed]), mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(stats.var[seed]), var, rtol=1e-4, atol=1e-5)
    # the two seeds collected different observations
    assert not np.array_equal(np.asarray(stats.mean[0]), np.asarray(stats.mean[1]))


def test_resume_is_bitwise_with_the_statistics(fused_run, tmp_path):
    """Chunk A, checkpoint, restore into a fresh schedule's state, chunk B == A then B
    (statistics included); restored with fresh statistics, chunk B differs."""
    cfg, schedule, state_a = fused_run
    path = checkpoint.save(tmp_path, state_a, env_steps=1, chunk=0, config=cfg)
    state_b, metrics_b = schedule.chunk(host_copy(state_a))
    fresh = schedules.make(plan(cfg, devices.single()))
    restored, _ = checkpoint.restore(path, fresh.init())
    assert bitwise(restored.agent.actor.obs_stats, state_a.agent.actor.obs_stats)
    again_b, again_metrics = fresh.chunk(restored)
    assert bitwise(again_b, state_b) and bitwise(again_metrics, metrics_b)
    restored, _ = checkpoint.restore(path, fresh.init())
    reset = fresh.init(seed=99).agent.actor.obs_stats
    no_stats = restored._replace(
        agent=restored.agent._replace(actor=restored.agent.actor._replace(obs_stats=reset))
    )
    dropped_b, _ = fresh.chunk(no_stats)
    assert not bitwise(dropped_b.agent.critic, state_b.agent.critic)


@pytest.mark.slow  # a whole run (the default run stays under 10 minutes)
def test_saved_policy_acts_with_the_statistics_saved_with_it(tmp_path):
    """policy.msgpack carries the run's final statistics (every env step collected); the
    loaded agent's action stays that of the saved statistics however the statistics of a
    running actor move on."""
    import jaxspreeze
    from jaxspreeze.run.trainer import train

    cfg = tiny(num_seeds=1, logdir=str(tmp_path), run_name="norm")
    result = train(cfg, quiet=True)
    agent = jaxspreeze.load(result.run_dir)
    final = jax.tree.map(lambda x: x[0], result.state.agent.actor)
    assert bitwise(agent.actor, final)  # the policy is the last actor side, stats included
    np.testing.assert_allclose(float(agent.actor.obs_stats.count), cfg.total_steps + PRIOR)
    obs = np.array([[0.5, -0.5, 1.0], [-1.0, 0.2, 3.0]], np.float32)
    before = agent.predict(obs)
    # more observations move a running actor's statistics and its action ...
    moved = agent.policy.algo.observe(agent.actor, 5.0 + 4.0 * jnp.asarray(obs)[None])
    moved_action = np.asarray(
        agent.policy.algo.act(moved, (), jnp.asarray(obs), jax.random.key(0), True)[0]
    )
    assert not np.allclose(moved_action, before)
    # ... not the saved policy's, which a new load reads the same
    np.testing.assert_array_equal(agent.predict(obs), before)
    np.testing.assert_array_equal(jaxspreeze.load(result.run_dir).predict(obs), before)
    # and it acts on normalised observations (the raw actor gives another action)
    raw = np.asarray(agent.policy.algo.act(agent.actor._replace(
        obs_stats=common.stats_init((3,))), (), jnp.asarray(obs), jax.random.key(0), True)[0])  # fmt: skip
    assert not np.allclose(raw, before)


# ------------------------------------------------------------------ split and data parallel
@pytest.mark.slow
def test_split_schedule_equals_fused(fused_run):
    """The split schedule's own warm-up and chunks (host-dispatched pieces, here on one
    device; the actor side observes the collected observations after its phase) end where
    the fused chunk does bitwise, statistics included (FastSAC's split-pieces test runs
    with its default normalisation too)."""
    cfg, _, fused_state = fused_run
    split = schedules.make(plan(cfg, devices.single()), dispatched=True)
    assert type(split).__name__ == "Split"
    state = run_chunks(split, 3)
    assert bitwise(state.agent.actor.obs_stats, fused_state.agent.actor.obs_stats)
    assert bitwise(state.agent, fused_state.agent)


@pytest.mark.slow  # two data-parallel programs on 2 fake devices in a subprocess
def test_data_parallel_merges_every_shards_observations():
    """Data-parallel over 2 fake CPU devices equals the same 2 shards on one device up to
    float rounding; the statistics are the same on every device and count every shard's
    observations (the warm-up's 32 and 3 chunks x 2 iterations x 8 envs)."""
    from test_data_parallel import run_worker

    found = run_worker("compare", "--algo", "sac", "--normalize-obs", devices=2)
    assert found["devices"] == 2 and found["schedule"] == "DataParallel"
    assert found["replicas_agree"] == [True, True] and found["local_copies_equal"]
    # the same start; the warm-up's statistics agree to the all-reduce's rounding
    assert found["bitwise_after"]["init"], found["bitwise_after"]
    assert found["warmup_agent_max_abs_diff"] < 1e-5, found["warmup_agent_max_abs_diff"]
    assert found["first_chunk"]["agent_max_abs_diff"] < 1e-4, found["first_chunk"]
    assert found["agent_max_abs_diff"] < 1e-2, found["agent_max_abs_diff"]
    stats = found["obs_stats"]
    np.testing.assert_allclose(stats["count"], [32 + 3 * 2 * 8 + PRIOR] * 2, rtol=1e-6)
    assert np.all(np.asarray(stats["var"]) > 0) and np.asarray(stats["mean"]).shape == (2, 3)


def test_host_learner_merges_every_stored_block(tmp_path):
    """Host envs (HostAsync): the learner merges each block's observations as it stores
    it, so the statistics are those of every transition in the buffer (warm-up included)."""
    from jaxspreeze.run.trainer import train

    cfg = RunConfig(
        algo="sac",
        env="gymnasium/Pendulum-v1",
        total_steps=400,
        num_envs=4,
        rollout_steps=2,
        grad_steps=2,
        batch_size=16,
        buffer_size=4000,
        learning_starts=100,
        chunk_iterations=10,
        eval_episodes=1,
        logdir=str(tmp_path),
        sinks=(),
        sac=SACConfig(hidden=(8,), normalize_obs=True),
    )
    state = train(cfg, quiet=True).state
    size = int(np.asarray(state.buffer.size)[0])
    assert size >= cfg.total_steps  # the workers may deliver a few blocks ahead
    stats = jax.tree.map(lambda x: np.asarray(x)[0], state.agent.actor.obs_stats)
    mean, var, count = numpy_stats(np.asarray(state.buffer.data.obs[0, :size]))
    np.testing.assert_allclose(stats.count, count, rtol=1e-6)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.var, var, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # two host learners on 2 fake devices in a subprocess
def test_split_host_learner_equals_one_device_with_the_statistics(tmp_path):
    """HostAsync split over two devices: the statistics merged on the actor device from
    the same blocks equal the one-device learner's (the whole agent to float rounding)."""
    from test_host_split import run_worker

    found = run_worker("equal-normalized", str(tmp_path), timeout=900)
    assert found["split"]["split"] and not found["single"]["split"]
    assert found["agent"]["max_abs_diff"] <= 1e-5, found["agent"]
    assert found["buffer"]["bitwise"] and found["obs_copy"]["bitwise"]


def test_a_saved_fasttd3_run_from_before_the_option_loads_as_it_trained(tmp_path):
    """A run's config.json without ``fasttd3.normalize_obs`` (saved before the option)
    reads as trained without normalisation; a preset without it takes the default (on)."""
    from jaxspreeze.setup import config

    data = config.to_dict(RunConfig(algo="fasttd3"))
    for name in ("fasttd3", "fastsac"):
        del data[name]["normalize_obs"]
    saved = tmp_path / "config.json"
    saved.write_text(json.dumps(data))
    cfg = config.load(saved)
    assert not cfg.fasttd3.normalize_obs and not cfg.fastsac.normalize_obs
    preset = tmp_path / "p.toml"
    preset.write_text('algo = "fasttd3"\n[fasttd3]\nv_max = 100.0\n')
    assert config.load(preset).fasttd3.normalize_obs
    data["fasttd3"]["normalize_obs"] = True  # a run saved since: as written
    saved.write_text(json.dumps(data))
    assert config.load(saved).fasttd3.normalize_obs


@pytest.mark.slow  # split-data (k=2) and data-parallel on 4 fake devices in a subprocess
def test_split_data_equals_data_parallel_with_the_statistics():
    """``--placement split-data``: the actor side's statistics merged over its k devices
    (the warm-up's piece and every iteration's actor side) equal data-parallel over k
    devices bitwise, as the rest of the state does."""
    from test_data_parallel import run_worker

    found = run_worker("split-data", "--algo", "sac", "--normalize-obs")
    assert found["schedule"] == "SplitDataParallel" and found["shards"] == 2
    assert all(found["bitwise"].values()), found["bitwise"]
    assert found["replicas_agree"] == {"actor": True, "critic": True}
