"""Runs in a subprocess with two fake CPU devices (``JAX_NUM_CPU_DEVICES=2``) for
test_host_split: the host learner (HostAsync) on one device and split over two.

``python tests/host_split_worker.py equal DIR`` (``equal-normalized``: with
``--sac.normalize-obs``) feeds the same blocks of transitions to a
one-device and a split HostAsync learner (the workers stay idle: ``learn_on``); ``train
DIR`` trains a tiny SAC run on gymnasium's Pendulum with ``--placement split`` through the
trainer and resumes it (``auto``). Each prints one JSON line of findings; the assertions
live in test_host_split.py.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "2")

import jax
import numpy as np
from split_worker import compare, where

from jaxspreeze import schedules
from jaxspreeze.algos.ppo import PPOConfig
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core.types import Transition
from jaxspreeze.host.workers import Batch
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

ENV = "gymnasium/Pendulum-v1"


def config(logdir: str, **changes) -> RunConfig:
    """A tiny SAC run on the host Pendulum."""
    base = RunConfig(
        algo="sac",
        env=ENV,
        num_envs=4,
        rollout_steps=2,
        grad_steps=2,
        batch_size=16,
        buffer_size=512,
        learning_starts=64,
        chunk_iterations=10,
        total_steps=64 + 2 * 10 * 8,
        eval_episodes=1,
        logdir=logdir,
        sinks=("jsonl",),
        sac=SACConfig(hidden=(16, 16)),
    )
    return base.replace(**changes)


def blocks(count: int, T: int, n: int, seed: int = 0) -> list[Batch]:
    """``count`` blocks ``[T, n]`` of Pendulum-shaped transitions, the same every call."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        obs = rng.normal(size=(T, n, 3)).astype(np.float32)
        tr = Transition(
            obs,
            rng.uniform(-2, 2, size=(T, n, 1)).astype(np.float32),
            rng.normal(size=(T, n)).astype(np.float32),
            rng.uniform(size=(T, n)) < 0.05,
            rng.uniform(size=(T, n)) > 0.95,
            (obs + 0.1).astype(np.float32),
        )
        empty = np.zeros(0, np.float32)
        out.append(
            Batch(tr, np.zeros((T, n), np.int64), {}, 0, ENV, T * n, empty, empty.astype(int), 0.0)
        )
    return out


def learner(cfg: RunConfig, placement) -> dict:
    """Feed the same blocks to the learner on ``placement``: its final state."""
    loop = schedules.make(plan(cfg, placement))
    try:
        state = loop.init()
        loop.compile(state)
        T, n = cfg.rollout_steps, cfg.num_envs // cfg.host_workers
        data = blocks(4 + 6 * 2, T, n)
        state, _ = loop.learn_on(state, data[:4])  # a first update on 4 blocks
        for i in range(6):
            state, metrics = loop.learn_on(state, data[4 + 2 * i : 6 + 2 * i])
        return {
            "split": loop.split,
            "where": where(state),
            "state": jax.device_get(state._replace(obs_buffer=None)),
            "obs_buffer": jax.device_get(state.obs_buffer),
            "metrics": sorted(metrics),
        }
    finally:
        loop.close()


def equal(logdir: str, normalize_obs: bool = False) -> dict:
    """One-device vs split learner on the same blocks (``normalize_obs``: SAC's
    ``--sac.normalize-obs``, the running statistics on the actor side)."""
    cfg = resolve(config(logdir, sac={"hidden": (16, 16), "normalize_obs": normalize_obs}))
    one = learner(cfg, devices.resolve("single"))
    two = learner(cfg, devices.resolve("split"))
    return {
        "devices": len(jax.devices()),
        "single": {"split": one["split"], "where": one["where"]},
        "split": {"split": two["split"], "where": two["where"]},
        "agent": compare(one["state"].agent, two["state"].agent),
        "buffer": compare(one["state"].buffer, two["state"].buffer),
        "counters": compare(
            (one["state"].env_steps, one["state"].iteration, one["state"].actor_updates),
            (two["state"].env_steps, two["state"].iteration, two["state"].actor_updates),
        ),
        "obs_copy": compare(two["obs_buffer"].data.obs, two["state"].buffer.data.obs),
        "metrics_equal_names": one["metrics"] == two["metrics"],
    }


def trained(logdir: str) -> dict:
    """The trainer with --placement split, then resumed with auto (which splits too)."""
    run = train(config(logdir, placement="split", run_name="split"), quiet=True)
    resumed = train(
        config(logdir, placement="auto", run_name="split", total_steps=64 + 3 * 10 * 8),
        quiet=True,
        resume=run.run_dir,
    )
    return {
        "schedule_split": run.schedule.split,
        "where": where(run.state),
        "env_steps": run.summary["env_steps"],
        "final_eval_return": run.summary["final_eval_return"],
        "policy_lag": run.summary["policy_lag"],
        "resumed_env_steps": resumed.summary["env_steps"],
        "resumed_from": resumed.summary["resumed_from"] is not None,
        "resumed_split": resumed.schedule.split,
        "ppo": ppo_split(logdir),
    }


def ppo_split(logdir: str) -> dict:
    """PPO on a host env with a split placement: the learner on the critic's device, the
    workers' policy on the actor's."""
    cfg = RunConfig(
        algo="ppo", env="gymnasium/CartPole-v1", placement="split", total_steps=384,
        num_envs=4, rollout_steps=16, batch_size=32, chunk_iterations=3, eval_episodes=1,
        logdir=logdir, run_name="ppo", sinks=("jsonl",),
        ppo=PPOConfig(hidden=(16, 16), epochs=2),
    )  # fmt: skip
    run = train(cfg, quiet=True)
    return {
        "where": where(run.state),
        "slot": sorted(d.id for d in [run.schedule.slot.device]),
        "env_steps": run.summary["env_steps"],
        "policy_lag": run.summary["policy_lag"],
    }


if __name__ == "__main__":
    mode, logdir = sys.argv[1:3]
    modes = {"equal": equal, "equal-normalized": lambda d: equal(d, True), "train": trained}
    print(json.dumps(modes[mode](logdir)))
