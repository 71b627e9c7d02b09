"""Runs in a subprocess with two fake CPU devices (``JAX_NUM_CPU_DEVICES=2``) for test_dqn.

``python tests/dqn_worker.py split`` runs a tiny DQN config (2 seeds, 2-step returns) with
the single and the split placement from the same seed; ``dp`` runs it data-parallel over
both devices and as the same two shards on one device. Each prints one JSON line of
findings; the assertions live in test_dqn.py.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "2")

import jax
import numpy as np
from split_worker import compare, run

from jaxspreeze import schedules
from jaxspreeze.schedules import DataParallel
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan


def tiny() -> RunConfig:
    """3 chunks of 2 iterations of 4 envs after a warm-up of 64 steps, 2 seeds, 2 gradient
    steps of 16 per iteration, 2-step returns, a target update every 3 steps."""
    return resolve(
        RunConfig(
            algo="dqn",
            env="gymnax/CartPole-v1",
            num_envs=4,
            rollout_steps=1,
            grad_steps=2,
            batch_size=16,
            buffer_size=512,
            learning_starts=64,
            chunk_iterations=2,
            total_steps=64 + 3 * 2 * 4,
            num_seeds=2,
        ).replace(dqn={"hidden": (16, 16), "n_step": 2, "target_update_every": 3})
    )


def split() -> dict:
    """Single vs split: where the parts live and whether the runs agree."""
    d = jax.devices()
    single = run(tiny(), devices.single(d[0]))
    two = run(tiny(), devices.resolve("split"))
    return {
        "state": compare(single["state"], two["state"]),
        "metrics": compare(single["metrics"], two["metrics"]),
        "where_split": two["where"],
        "epsilon": [np.asarray(m["epsilon"]).tolist() for m in two["metrics"]],
    }


def data_parallel() -> dict:
    """Both devices vs the same two shards on one device: how far apart the runs end."""
    every = devices.resolve("data")
    one = devices.data_parallel(jax.devices()[:1])
    a = schedules.make(plan(tiny(), every))
    b = DataParallel(plan(tiny(), one), shards=every.data_devices)
    state_a, state_b = a.init(), b.init()
    a.compile(state_a)
    b.compile(state_b)
    state_a, state_b = a.warmup(state_a), b.warmup(state_b)
    for _ in range(a.num_chunks):
        state_a, _ = a.chunk(state_a)
        state_b, _ = b.chunk(state_b)
    la, lb = jax.tree.leaves(jax.device_get(state_a.agent)), jax.tree.leaves(state_b.agent)
    diff = max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(la, lb, strict=True)
    )
    return {
        "schedule": type(a).__name__,
        "devices": every.data_devices,
        "agent_max_abs_diff": diff,
        "replicas_agree": [a.replicas_agree(state_a), b.replicas_agree(state_b)],
        "critic_steps": np.asarray(state_a.agent.critic.steps).tolist(),
    }


if __name__ == "__main__":
    mode = sys.argv[1]
    print(json.dumps(split() if mode == "split" else data_parallel()))
