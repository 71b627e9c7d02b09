"""A host env whose step stops answering, through the trainer and the CLI.

The run must detect the stall within ``--host-stall-timeout-s``, end with exit 1 and one
line naming the env and the worker, keep its last checkpoint and leave no worker thread
behind; it never hangs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.cli import main, report
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.host.workers import ParamSlot, WorkerError, WorkerPool, WorkerStalledError
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

STALL_AFTER = 250  # steps of one env before its step blocks
STALL_S = 5.0  # how long it blocks (bounded, so the test can see the thread end)
STALLED = threading.Event()  # one env of the run stalls
RUN_DIR: list = []  # the stalling run's directory: an env stalls once it holds a checkpoint


class Stall(gym.Env):
    """Pendulum-shaped env: the first to take STALL_AFTER steps blocks for STALL_S seconds."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    stall_s = STALL_S

    def __init__(self):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        # the first env past STALL_AFTER steps once the run has checkpointed (the workers
        # run ahead of the learner: on a loaded machine they pass STALL_AFTER while it compiles)
        if self.t >= STALL_AFTER and not STALLED.is_set() and _checkpointed():
            STALLED.set()
            threading.Event().wait(self.stall_s)  # stuck inside the simulator
        return np.zeros(3, np.float32), -float(np.square(action).sum()), False, False, {}


def _checkpointed() -> bool:
    return not RUN_DIR or checkpoint.latest(RUN_DIR[0]) is not None


gym.register("JaxspreezeStall-v0", entry_point=Stall, max_episode_steps=50)


class StallAtOnce(Stall):
    """Stalls at its first step: inside the random-action warm-up, before any checkpoint."""

    stall_s = 3.0

    def step(self, action):
        if not STALLED.is_set():
            STALLED.set()
            threading.Event().wait(self.stall_s)
        return np.zeros(3, np.float32), 0.0, False, False, {}


gym.register("JaxspreezeStallAtOnce-v0", entry_point=StallAtOnce, max_episode_steps=50)


def worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("jaxspreeze-worker")]


ARGS = [
    "--algo", "sac", "--total-steps", "4000", "--num-envs", "4", "--rollout-steps", "2",
    "--grad-steps", "2", "--batch-size", "32", "--buffer-size", "4000",
    "--learning-starts", "200", "--chunk-iterations", "25", "--eval-episodes", "2",
    "--sac.hidden", "32", "32", "--sinks", "jsonl", "--checkpoint-every", "400",
]  # fmt: skip


def test_a_short_get_timeout_does_not_hide_a_stalled_worker():
    """The learner waits for blocks with a timeout; a worker stuck inside its env is still
    reported as stalled (naming it), not as a bare "no block within ..." timeout."""
    STALLED.clear()
    RUN_DIR.clear()
    slot = ParamSlot()
    slot.publish({"a": jnp.zeros(())}, 0)
    policy = lambda params, obs, key: jnp.zeros((obs.shape[0], 1)) + params["a"]
    quick = type("QuickStall", (Stall,), {"stall_s": 2.0})
    pool = WorkerPool(quick, policy, slot, envs_per_worker=1, stall_timeout=1.0)
    with pool, pytest.raises(WorkerStalledError, match=r"worker 0 .* has not answered"):
        while True:
            pool.get(timeout=0.2)  # shorter than the stall timeout
    assert worker_threads() == []


def test_the_stall_timeout_is_validated():
    cfg = RunConfig(env="gymnasium/Pendulum-v1")
    assert plan(cfg, on_devices=False).cfg.host_stall_timeout_s == 60.0
    with pytest.raises(ConfigError, match="host_stall_timeout_s"):
        plan(cfg.replace(host_stall_timeout_s=0.0), on_devices=False)


def test_a_stalled_worker_ends_the_run_in_one_line_keeping_the_checkpoint(tmp_path, capsys):
    STALLED.clear()
    RUN_DIR[:] = [tmp_path / "stall"]
    argv = [
        "train", "--env", "gymnasium/JaxspreezeStall-v0", *ARGS, "--host-stall-timeout-s",
        "2", "--logdir", str(tmp_path), "--run-name", "stall",
    ]  # fmt: skip
    assert main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    line = err[0]
    assert "worker 0 (gymnasium/JaxspreezeStall-v0) has not answered" in line
    assert "stepping the env" in line and "--host-stall-timeout-s" in line
    assert "unexpected" not in line
    run_dir = tmp_path / "stall"
    latest = checkpoint.latest(run_dir)
    assert latest is not None and str(latest) in line  # the last checkpoint is kept, named
    assert not (run_dir / "summary.json").exists()
    assert worker_threads() == []  # the env answered late; its thread ended and closed


@pytest.mark.slow  # a fresh process compiles everything
def test_a_worker_stuck_for_good_does_not_hang_the_cli(tmp_path):
    """The env never answers: the process still exits 1 (the stuck thread is a daemon)."""
    (tmp_path / "stuck_env.py").write_text(
        textwrap.dedent(
            """
            import threading
            import gymnasium as gym
            import numpy as np

            class Stuck(gym.Env):
                observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
                action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

                def __init__(self):
                    self.t = 0

                def reset(self, *, seed=None, options=None):
                    super().reset(seed=seed)
                    return np.zeros(3, np.float32), {}

                def step(self, action):
                    self.t += 1
                    if self.t == 250:
                        threading.Event().wait()  # never returns
                    return np.zeros(3, np.float32), 0.0, False, False, {}

            gym.register("JaxspreezeStuck-v0", entry_point=Stuck, max_episode_steps=50)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    cmd = [
        sys.executable, "-m", "jaxspreeze", "train", "--env",
        "gymnasium/stuck_env:JaxspreezeStuck-v0", *ARGS, "--host-stall-timeout-s", "2",
        "--logdir", str(tmp_path), "--run-name", "stuck",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "worker 0" in lines[0] and "JaxspreezeStuck-v0" in lines[0]
    config = json.loads((tmp_path / "stuck" / "config.json").read_text())
    assert config["host_stall_timeout_s"] == 2.0
    assert checkpoint.latest(tmp_path / "stuck") is not None


def test_the_cli_reports_host_env_errors_and_timeouts_as_faults(capsys):
    """A worker's error is a fault (exit 1, its message); a TimeoutError, an OSError, is not
    reported as a file problem."""
    assert report(WorkerError("worker 1 (gymnasium/X-v0) failed while stepping", 1, "X")) == 1
    assert capsys.readouterr().err.strip() == (
        "jaxspreeze: error: worker 1 (gymnasium/X-v0) failed while stepping"
    )
    assert report(TimeoutError("no block from the workers within 60 s")) == 1
    err = capsys.readouterr().err.strip()
    assert err == "jaxspreeze: error: timed out: no block from the workers within 60 s"


def test_a_worker_stalled_while_warming_up_is_explained_too(tmp_path, capsys):
    """A stall before the chunks (the warm-up) gets the same advice and says that no
    checkpoint was written yet."""
    STALLED.clear()
    argv = [
        "train", "--env", "gymnasium/JaxspreezeStallAtOnce-v0", *ARGS,
        "--host-stall-timeout-s", "1", "--logdir", str(tmp_path), "--run-name", "early",
    ]  # fmt: skip
    assert main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "has not answered" in err[0] and "--host-stall-timeout-s" in err[0]
    assert "no checkpoint was written" in err[0]
    assert checkpoint.latest(tmp_path / "early") is None
