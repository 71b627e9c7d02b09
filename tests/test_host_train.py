"""Training on host envs (gymnasium/, envpool/) through the host schedule and the trainer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import gymnasium as gym
import jax
import numpy as np
import pytest

from jaxspreeze import schedules
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.host.workers import WorkerError
from jaxspreeze.run.checkpoint_eval import evaluate_checkpoint
from jaxspreeze.run.trainer import train
from jaxspreeze.schedules.host_async import AHEAD_ITERATIONS, QUEUE_BLOCKS, HostAsync
from jaxspreeze.schedules.host_rollout import HostRollout
from jaxspreeze.score import tasks as score_tasks
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan
from jaxspreeze.store.checkpoint import list_checkpoints, read_manifest, restore

PENDULUM = "gymnasium/Pendulum-v1"
CARTPOLE = "gymnasium/CartPole-v1"
PRESETS = score_tasks.PRESETS  # the package's presets (package data)


def small(tmp_path, **changes) -> RunConfig:
    """A short SAC run on gymnasium's Pendulum (small nets, few steps)."""
    base = dict(
        algo="sac",
        env=PENDULUM,
        total_steps=1200,
        num_envs=4,
        rollout_steps=2,
        grad_steps=2,
        batch_size=32,
        buffer_size=4000,
        learning_starts=200,
        chunk_iterations=25,
        eval_episodes=2,
        logdir=str(tmp_path),
        sinks=("jsonl",),
        sac={"hidden": (32, 32)},
    )
    return RunConfig().replace(**{**base, **changes})


def tiny_ppo(tmp_path, **changes) -> RunConfig:
    """A tiny PPO run on gymnasium's CartPole: 12 iterations of 4 envs x 16 steps."""
    base = dict(
        algo="ppo",
        env=CARTPOLE,
        total_steps=768,
        num_envs=4,
        rollout_steps=16,
        batch_size=32,
        chunk_iterations=4,
        eval_episodes=2,
        logdir=str(tmp_path),
        sinks=("jsonl",),
        ppo={"hidden": (16, 16), "epochs": 2, "anneal_lr": False},  # (a run cut short: same lr)
    )
    return RunConfig().replace(**{**base, **changes})


def worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("jaxspreeze-worker")]


def records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_config_accepts_host_envs_and_refuses_what_is_not_supported():
    cfg = plan(RunConfig(algo="sac", env=PENDULUM), on_devices=False).cfg
    assert cfg.env == PENDULUM
    for env in (PENDULUM, CARTPOLE):  # PPO with its defaults, continuous and discrete
        assert plan(RunConfig(algo="ppo", env=env), on_devices=False).cfg.num_envs == 16
    with pytest.raises(ConfigError, match="batch_size"):
        plan(RunConfig(algo="ppo", env=CARTPOLE, batch_size=1000), on_devices=False)
    with pytest.raises(ConfigError, match="num_seeds"):
        plan(RunConfig(algo="ppo", env=CARTPOLE, num_seeds=2), on_devices=False)
    with pytest.raises(ConfigError, match="num_seeds"):
        plan(RunConfig(algo="sac", env=PENDULUM, num_seeds=2), on_devices=False)
    with pytest.raises(ConfigError, match=r"num_envs.*host_workers"):
        plan(RunConfig(algo="sac", env=PENDULUM, num_envs=6, host_workers=4), on_devices=False)
    with pytest.raises(ConfigError, match="Pendulum-v1"):  # the nearest known id
        plan(RunConfig(algo="sac", env="gymnasium/Pendulum-v9"), on_devices=False)


def test_make_picks_the_host_schedule(tmp_path):
    from jaxspreeze.setup import devices

    cfg = plan(small(tmp_path), on_devices=False).cfg
    schedule = schedules.make(plan(cfg, devices.resolve("single")))
    try:
        assert isinstance(schedule, HostAsync) and schedule.host
        assert schedule.env.spec.name == PENDULUM
    finally:
        schedule.close()
    cfg = plan(tiny_ppo(tmp_path), on_devices=False).cfg
    schedule = schedules.make(plan(cfg, devices.resolve("single")))
    try:
        assert isinstance(schedule, HostRollout) and schedule.host
    finally:
        schedule.close()


@pytest.mark.parametrize(  # td3 and ddpg: the same schedule as sac (slow: -m slow)
    "algo",
    [
        "sac",
        pytest.param("td3", marks=pytest.mark.slow),
        pytest.param("ddpg", marks=pytest.mark.slow),
    ],
)
def test_trainer_runs_a_host_env_and_writes_its_summary(tmp_path, algo):
    cfg = small(tmp_path, algo=algo, run_name=algo, **{algo: {"hidden": (32, 32)}})
    result = train(cfg, quiet=True)
    s = json.loads((result.run_dir / "summary.json").read_text())
    assert s["env"] == PENDULUM and s["algo"] == algo
    assert s["env_steps"] == result.summary["env_steps"] >= cfg.total_steps
    assert s["final_eval_return"] is not None and s["final_eval_length"] == 200
    assert s["checkpoint"] and s["policy_lag"] >= 1
    chunks = [r for r in records(result.run_dir) if r["kind"] == "chunk"]
    last = chunks[-1]
    for name in ("policy_lag", "queue_depth", "replay_ratio", "worker0_steps_per_second"):
        assert name in last
    assert last["env_steps"] == s["env_steps"]
    assert any(r["kind"] == "eval" for r in records(result.run_dir))
    assert worker_threads() == []  # the pool is closed when the run ends


def test_a_host_runs_first_chunk_is_timed_at_its_start(tmp_path, monkeypatch):
    # a host chunk samples and learns inside its call: the summary's first chunk time is
    # the call's start (the training's), not its end (which counted the chunk as start-up)
    calls: list[tuple[float, float]] = []
    chunk = HostAsync.chunk

    def timed(self, state):
        entered = time.perf_counter()
        out = chunk(self, state)
        time.sleep(0.3)  # a chunk long enough that its end cannot pass for its start
        calls.append((entered, time.perf_counter()))
        return out

    monkeypatch.setattr(HostAsync, "chunk", timed)
    before = time.perf_counter()
    result = train(small(tmp_path, run_name="first"), quiet=True)
    (entered, left), *_ = calls
    first = before + result.summary["first_chunk_dispatched_s"]
    assert first <= entered + 0.05 < left  # at the start, from the call of train()


def test_replay_ratio_is_held_within_its_bound(tmp_path):
    cfg = small(tmp_path, total_steps=2200, host_workers=2, run_name="ratio")
    result = train(cfg, quiet=True)
    spi = cfg.num_envs * cfg.rollout_steps
    target = cfg.grad_steps * cfg.batch_size / spi
    block = spi // cfg.host_workers
    # delivered env steps run ahead of the learner's by at most this (module doc)
    slack = AHEAD_ITERATIONS * spi + (QUEUE_BLOCKS + cfg.host_workers) * block
    chunks = [r for r in records(result.run_dir) if r["kind"] == "chunk"]
    warmup = plan(cfg, on_devices=False).warmup_steps
    k = result.schedule.iterations_per_chunk
    for r in chunks:
        # worker_env_steps is the chunk's mean over its iterations, env_steps its last value
        mean_steps = r["env_steps"] - spi * (k - 1) / 2
        ahead = r["worker_env_steps"] - mean_steps
        assert r["replay_ratio_target"] == pytest.approx(target)
        assert 0 <= ahead <= slack
    last = chunks[-1]
    trained = last["env_steps"] - warmup
    assert last["replay_ratio"] <= target * 1.001
    assert last["replay_ratio"] >= target * trained / (trained + slack + spi)
    assert 1 <= last["policy_lag_versions"] <= AHEAD_ITERATIONS + QUEUE_BLOCKS + 2


class Boom(gym.Env):
    """Pendulum-shaped env whose step raises after 300 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 300:
            raise RuntimeError("the simulator exploded")
        return np.zeros(3, np.float32), 0.0, False, self.t % 50 == 0, {}


gym.register("JaxspreezeBoom-v0", entry_point=Boom, max_episode_steps=50)


def test_an_env_exception_stops_the_run_naming_env_and_worker(tmp_path):
    cfg = small(tmp_path, env="gymnasium/JaxspreezeBoom-v0", total_steps=4000, run_name="boom")
    with pytest.raises(WorkerError, match=r"worker 0 \(gymnasium/JaxspreezeBoom-v0\).*exploded"):
        train(cfg, quiet=True)
    assert worker_threads() == []


def test_resume_continues_a_host_run(tmp_path):
    cfg = small(tmp_path, run_name="resume")
    first = train(cfg, quiet=True)
    longer = cfg.replace(total_steps=1800)
    second = train(longer, quiet=True, resume=first.run_dir)
    assert second.summary["resumed_from"] is not None
    assert second.summary["env_steps"] >= 1800
    assert worker_threads() == []
    # `jaxspreeze eval` of a host run plays host episodes
    out = evaluate_checkpoint(second.run_dir, episodes=2)
    assert out["length_mean"] == [200.0] and out["env_steps"] == second.summary["env_steps"]


def test_trainer_runs_an_envpool_env(tmp_path):
    pytest.importorskip("envpool")
    result = train(small(tmp_path, env="envpool/Pendulum-v1", run_name="envpool"), quiet=True)
    assert result.summary["final_eval_length"] == 200
    assert result.summary["env_steps"] >= 1200
    assert worker_threads() == []


# ------------------------------------------------------------ PPO on host envs
def ppo_chunks(run_dir) -> list[dict]:
    return [r for r in records(run_dir) if r["kind"] == "chunk"]


def test_ppo_on_a_host_env_lags_one_version_is_deterministic_and_resumes(tmp_path):
    """Rollout j+1 is collected with the parameters of update j-1 (the lag rule); a fixed
    seed gives the same parameters bitwise; a resumed run continues the learner with new
    episodes, its pipeline restarting (first rollout by the restored parameters)."""
    cfg = tiny_ppo(tmp_path, run_name="a", checkpoint_every=512)
    a = train(cfg, quiet=True)
    b = train(cfg.replace(run_name="b", total_steps=512), quiet=True)
    # determinism: run a at 512 env steps (its checkpoint) is run b, bitwise
    (at_512,) = [p for p in list_checkpoints(a.run_dir) if read_manifest(p)["env_steps"] == 512]
    saved, _ = restore(at_512, b.state)
    for x, y in zip(jax.tree.leaves(saved.agent), jax.tree.leaves(b.state.agent), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    per_version = 2 * (4 * 16 // 32)  # epochs x minibatches
    s = a.summary
    assert s["env_steps"] == 768 and s["final_eval_return"] is not None
    assert s["policy_lag"] == 2 * per_version  # one version behind, plus its own update
    chunks = ppo_chunks(a.run_dir)
    assert len(chunks) == 3
    # versions per iteration: 1 for the first rollout (acted with v0), then exactly 2
    assert chunks[0]["policy_lag_versions"] == pytest.approx((1 + 2 + 2 + 2) / 4)
    assert all(r["policy_lag_versions"] == 2 for r in chunks[1:])
    assert all(r["policy_lag"] == 2 * per_version for r in chunks[1:])
    assert all(r["worker_rows_dropped"] == 0 for r in chunks)  # gymnasium: same-step resets
    losses = lambda run_dir: [(r["value_loss"], r["actor_loss"]) for r in ppo_chunks(run_dir)]
    assert losses(b.run_dir) == losses(a.run_dir)[:2]
    # resume b to 768 steps
    c = train(cfg.replace(run_name="b"), quiet=True, resume=b.run_dir)
    assert c.summary["resumed_from"] is not None and c.summary["env_steps"] == 768
    assert int(np.asarray(c.state.iteration)[0]) == 12
    assert int(np.asarray(c.state.actor_updates)[0]) == 12 * per_version
    resumed = ppo_chunks(c.run_dir)[-1]
    assert resumed["policy_lag_versions"] == pytest.approx((1 + 2 + 2 + 2) / 4)
    assert worker_threads() == []
    # `jaxspreeze eval` of a PPO host run plays host episodes
    out = evaluate_checkpoint(c.run_dir, episodes=2)
    assert out["env_steps"] == 768 and out["length_mean"][0] > 0


def test_ppo_trains_on_envpool_one_version_behind(tmp_path):
    pytest.importorskip("envpool")
    cfg = tiny_ppo(tmp_path, env="envpool/CartPole-v1", run_name="envpool")
    result = train(cfg, quiet=True)
    chunks = ppo_chunks(result.run_dir)
    # next-step reset rows make envs drift apart: aligned blocks keep the lag rule exact
    assert all(r["policy_lag_versions"] <= 2 for r in chunks)
    assert result.summary["policy_lag"] == 2 * 4
    assert result.summary["final_eval_length"] > 0
    assert worker_threads() == []


@pytest.mark.slow
@pytest.mark.parametrize("env", [CARTPOLE, "envpool/CartPole-v1"])
def test_ppo_learns_host_cartpole(tmp_path, env):
    """PPO's defaults (16 envs x 64 steps) at 20k env steps: eval return >= 150."""
    if env.startswith("envpool/"):
        pytest.importorskip("envpool")
    cfg = RunConfig(
        algo="ppo", env=env, total_steps=20_000, eval_episodes=8, logdir=str(tmp_path),
        sinks=("jsonl",), run_name="learn",
    )  # fmt: skip
    result = train(cfg, quiet=True)
    assert result.summary["final_eval_return"] >= 150


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``python -m jaxspreeze ARGS`` and capture its output."""
    cmd = [sys.executable, "-m", "jaxspreeze", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--env", "gymnasium/HalfCheeta-v5"], ["--env", "HalfCheetah-v5"]),
        (["--env", "envpool/Pendulum-v9"], ["--env", "Pendulum-v1"]),
        (["--env", CARTPOLE, "--algo", "ppo", "--batch-size", "1000"], ["batch", "1024"]),
    ],
)
def test_bad_host_input_exits_2_in_one_line(tmp_path, args, words, run_main):
    out = run_main("train", *args, "--logdir", str(tmp_path))
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and all(w in lines[0] for w in words), out.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # a fresh process compiles everything (about 2 min on 2 busy cores)
def test_train_cli_on_a_gymnasium_env(tmp_path):
    out = run_cli(
        "train", "--algo", "sac", "--env", PENDULUM, "--total-steps", "600", "--num-envs", "4",
        "--grad-steps", "1", "--batch-size", "32", "--learning-starts", "200",
        "--eval-episodes", "2", "--sac.hidden", "32", "32", "--logdir", str(tmp_path),
        "--run-name", "cli", "--sinks", "jsonl",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["env"] == PENDULUM and summary["final_eval_return"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("env", [PENDULUM, "envpool/Pendulum-v1"])
def test_sac_learns_host_pendulum(tmp_path, env):
    """The gymnax preset (8k env steps) on the host envs: eval return >= -250."""
    if env.startswith("envpool/"):
        pytest.importorskip("envpool")
    cfg = config_lib.load(PRESETS / "sac_pendulum.toml").replace(
        env=env, logdir=str(tmp_path), sinks=("jsonl",), run_name="learn"
    )
    result = train(cfg, quiet=True)
    assert result.summary["final_eval_return"] >= -250
