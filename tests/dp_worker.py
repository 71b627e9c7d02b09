"""Runs the data-parallel schedule in a subprocess, for test_data_parallel and test_multiprocess.

``python tests/dp_worker.py run [--shards D] [--algo sac|ppo]`` joins a multi-process run
when ``jaxspreeze launch`` started it (else one process, on every device it has, e.g.
``JAX_NUM_CPU_DEVICES=4``), trains a tiny config for three chunks and prints one JSON line
per process: the topology, a hash of the final agent and of the metrics (bitwise
comparisons) and whether every device holds the same agent. ``compare`` runs the tiny config on every
device and as the same shards on one device and prints how far apart they end.
``config`` checks that the processes agree on their config (``--differ``: they do not).
``forever`` trains until killed, after writing ``<dir>/ready-<process>`` (the fault tests).
``split-data`` runs the tiny config with ``--placement split-data`` over every device and
data-parallel over its actor-side devices (the same global sizes and seed) and prints
where each part lives, what agrees bitwise and whether each side's replicas agree.
The assertions live in the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from jaxspreeze.setup import distributed  # before jax touches a device

distributed.initialize()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxspreeze import schedules  # noqa: E402
from jaxspreeze.algos.ppo import PPOConfig  # noqa: E402
from jaxspreeze.algos.sac import SACConfig  # noqa: E402
from jaxspreeze.core.errors import ConfigError  # noqa: E402
from jaxspreeze.schedules import DataParallel  # noqa: E402
from jaxspreeze.setup import devices  # noqa: E402
from jaxspreeze.setup.config import RunConfig, resolve  # noqa: E402
from jaxspreeze.setup.plan import plan  # noqa: E402


def tiny(algo: str, seeds: int = 2, chunks: int = 3, normalize_obs: bool = False) -> RunConfig:
    """The tiny runs: 8 envs, 2 iterations per chunk, 2 seeds, one hidden layer of 8
    (``normalize_obs``: SAC's ``--sac.normalize-obs``)."""
    if algo == "ppo":
        return resolve(
            RunConfig(
                algo="ppo",
                num_envs=8,
                rollout_steps=4,
                batch_size=16,
                chunk_iterations=2,
                total_steps=chunks * 2 * 32,
                num_seeds=seeds,
                ppo=PPOConfig(hidden=(8,), epochs=2, normalize_obs=True),
            )
        )
    return resolve(
        RunConfig(
            algo="sac",
            num_envs=8,
            rollout_steps=1,
            grad_steps=2,
            batch_size=16,
            buffer_size=256,
            learning_starts=32,
            chunk_iterations=2,
            total_steps=32 + chunks * 2 * 8,
            num_seeds=seeds,
            sac=SACConfig(hidden=(8,), normalize_obs=normalize_obs),
        )
    )


def leaves(tree) -> list[np.ndarray]:
    """The leaves of a (process-local) tree as numpy arrays (keys as their raw data)."""
    out = []
    for x in jax.tree.leaves(distributed.local_copy(tree)):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        out.append(np.asarray(x))
    return out


def digest_host(tree) -> str:
    """sha256 of a host tree's leaves (numpy arrays)."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(tree):
        h.update(np.asarray(x).tobytes())
    return h.hexdigest()[:16]


def local_copies_equal(tree) -> bool:
    """True when every device of this process holds the same bits of every leaf."""
    for x in jax.tree.leaves(tree):
        copies = [np.asarray(s.data) for s in x.addressable_shards]
        if not all(np.array_equal(copies[0], c) for c in copies[1:]):
            return False
    return True


def digest(tree) -> str:
    """sha256 of every leaf's bytes."""
    h = hashlib.sha256()
    for x in leaves(tree):
        h.update(x.tobytes())
    return h.hexdigest()[:16]


def train(schedule: DataParallel, chunks: int):
    """Init, warm up and ``chunks`` chunks; returns the final state and every chunk's metrics."""
    state = schedule.init()
    schedule.compile(state)
    state = schedule.warmup(state)
    metrics = []
    for _ in range(chunks):
        state, m = schedule.chunk(state)
        metrics.append(m)
    return state, metrics


def run(args: argparse.Namespace) -> dict:
    """Train the tiny config data-parallel over every device; the findings of this process."""
    cfg = tiny(args.algo)
    distributed.check_same_config(cfg)
    placement = devices.resolve("data")
    schedule = schedules.make(plan(cfg, placement))
    if args.shards:
        schedule = DataParallel(plan(cfg, placement), shards=args.shards)
    state, metrics = train(schedule, schedule.num_chunks)
    # the resume path at the schedule level: the whole state to the host and back
    host = distributed.host_copy(state)
    placed = schedule.place(host)
    round_trip = digest_host(host) == digest_host(distributed.host_copy(placed))
    placed, _ = schedule.chunk(placed)
    out = {
        "process": distributed.process_index(),
        "topology": distributed.topology(),
        "describe": placement.describe(),
        "shards": schedule.shards,
        "agent": digest(state.agent),
        "metrics": digest(metrics),
        "replicas_agree": schedule.replicas_agree(state),
        "local_copies_equal": local_copies_equal(state.agent),
        "host_round_trip": round_trip,
        "env_steps": leaves(state.env_steps)[0].tolist(),
        "episodes": float(sum(leaves(m["episodes"])[0].sum() for m in metrics)),
        "local_devices_hold": sorted(
            {d.id for x in jax.tree.leaves(state.agent) for d in x.sharding.addressable_devices}
        ),
    }
    state, _ = schedule.chunk(state)  # one more chunk: from the state and from its copy
    out["resumes_bitwise"] = digest(state.agent) == digest(placed.agent)
    return out


def max_abs_diff(a, b) -> float:
    """The largest absolute difference between two trees' leaves."""
    pairs = zip(leaves(a), leaves(b), strict=True)
    return max(
        (float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in pairs),
        default=0.0,
    )


def divergence_detected(schedule: DataParallel, state) -> bool:
    """Make the last device's copy of one agent leaf differ: does the check notice?"""
    broken = state._replace(agent=diverged(state.agent))
    try:
        schedule.assert_replicas_agree(broken)
    except RuntimeError:
        return not schedule.replicas_agree(broken)
    return False


def compare(args: argparse.Namespace) -> dict:
    """Every device vs the same shards on one device: how far apart the runs end."""
    cfg = tiny(args.algo, normalize_obs=args.normalize_obs)
    every = devices.resolve("data")
    n = every.data_devices
    one = devices.data_parallel(jax.devices()[:1])
    a = schedules.make(plan(cfg, every))
    b = DataParallel(plan(cfg, one), shards=n)
    steps = {}
    state_a, state_b = a.init(), b.init()
    a.compile(state_a)
    b.compile(state_b)
    steps["init"] = digest(state_a) == digest(state_b)
    state_a, state_b = a.warmup(state_a), b.warmup(state_b)
    steps["warmup"] = digest(state_a) == digest(state_b)
    warmup_diff = max_abs_diff(state_a.agent, state_b.agent)
    first_chunk = None
    metrics_a, metrics_b = [], []
    for _ in range(a.num_chunks):
        state_a, m_a = a.chunk(state_a)
        state_b, m_b = b.chunk(state_b)
        metrics_a.append(m_a)
        metrics_b.append(m_b)
        if first_chunk is None:
            first_chunk = {
                "agent_max_abs_diff": max_abs_diff(state_a.agent, state_b.agent),
                "metrics_max_abs_diff": max_abs_diff(m_a, m_b),
                "env_bitwise": digest(state_a.env) == digest(state_b.env),
            }
    return {
        "divergence_detected": divergence_detected(a, state_a),
        "devices": n,
        "describe": [every.describe(), one.describe()],
        "bitwise_after": steps,
        "warmup_agent_max_abs_diff": warmup_diff,
        "first_chunk": first_chunk,
        "schedule": type(a).__name__,
        "agent_bitwise": digest(state_a.agent) == digest(state_b.agent),
        "agent_max_abs_diff": max_abs_diff(state_a.agent, state_b.agent),
        "agent_scale": max(float(np.max(np.abs(x))) for x in leaves(state_a.agent) if x.size),
        "metrics_max_abs_diff": {
            k: max_abs_diff(metrics_a[-1][k], metrics_b[-1][k]) for k in metrics_a[-1]
        },
        "metrics_final": {k: leaves(v)[0].tolist() for k, v in metrics_a[-1].items()},
        "buffer_bitwise": state_a.buffer is None
        or digest(state_a.buffer) == digest(state_b.buffer),
        "replicas_agree": [a.replicas_agree(state_a), b.replicas_agree(state_b)],
        "local_copies_equal": local_copies_equal(state_a.agent),
        "agent_on_devices": sorted(
            {d.id for x in jax.tree.leaves(state_a.agent) for d in x.sharding.device_set}
        ),
        "env_sharding": str(jax.tree.leaves(state_a.env)[0].sharding.spec),
        "env_steps": leaves(state_a.env_steps)[0].tolist(),
        "num_seeds": cfg.num_seeds,
        "obs_stats": obs_stats(state_a.agent.actor) if args.normalize_obs else None,
    }


def devices_of(tree) -> list[int]:
    """The ids of the devices that hold ``tree``'s leaves (of every process)."""
    return sorted({d.id for x in jax.tree.leaves(tree) for d in x.sharding.device_set})


def split_data(args: argparse.Namespace) -> dict:
    """split-data over every device vs data-parallel over its actor-side devices."""
    cfg = tiny(args.algo, normalize_obs=args.normalize_obs)
    distributed.check_same_config(cfg)
    placement = devices.resolve("split-data")
    a = schedules.make(plan(cfg, placement))
    b = schedules.make(plan(cfg, devices.data_parallel(list(placement.mesh.devices.flat))))
    state_a, metrics_a = train(a, a.num_chunks)
    state_b, metrics_b = train(b, b.num_chunks)
    host_a, host_b = distributed.host_copy(state_a), distributed.host_copy(state_b)
    same = lambda x, y: digest_host(x) == digest_host(y)
    fields = ("agent", "env", "buffer", "key", "env_steps", "iteration", "actor_updates")
    bitwise = {f: same(getattr(host_a, f), getattr(host_b, f)) for f in fields}
    bitwise["metrics"] = same(distributed.host_copy(metrics_a), distributed.host_copy(metrics_b))
    obs_copy = None
    if host_a.obs_buffer is not None:  # the actor side's rows: the critic side's observations
        obs_copy = same(host_a.obs_buffer.data.obs, host_a.buffer.data.obs)
    # the resume path: the whole state to the host, laid out again, one more chunk each
    placed = a.place(host_a)
    round_trip = same(host_a, distributed.host_copy(placed))
    placed, _ = a.chunk(placed)
    state_a, _ = a.chunk(state_a)
    broken = state_a._replace(agent=state_a.agent._replace(critic=diverged(state_a.agent.critic)))
    try:
        a.assert_replicas_agree(broken)
        detected = False
    except RuntimeError as e:
        detected = "critic side" in str(e)
    return {
        "process": distributed.process_index(),
        "describe": placement.describe(),
        "kind": placement.kind,
        "schedule": type(a).__name__,
        "shards": a.shards,
        "pairs_in_one_process": all(
            x.process_index == y.process_index
            for x, y in zip(
                placement.mesh.devices.flat, placement.critic_mesh.devices.flat, strict=True
            )
        ),
        "devices": {
            "actor": devices_of(state_a.agent.actor),
            "critic": devices_of(state_a.agent.critic),
            "env": devices_of(state_a.env),
            "obs_buffer": devices_of(state_a.obs_buffer),
            "buffer": devices_of(state_a.buffer),
        },
        "bitwise": bitwise,
        "agent_max_abs_diff": max_abs_diff(host_a.agent, host_b.agent),
        "obs_copy_matches_buffer": obs_copy,
        "replicas_agree": a.replicas_agree(state_a),
        "local_copies_equal": {
            "actor": local_copies_equal(state_a.agent.actor),
            "critic": local_copies_equal(state_a.agent.critic),
        },
        "divergence_detected": detected,
        "host_round_trip": round_trip,
        "resumes_bitwise": digest(state_a.agent) == digest(placed.agent),
        "env_steps": leaves(state_a.env_steps)[0].tolist(),
        "num_seeds": cfg.num_seeds,
    }


def obs_stats(actor) -> dict:
    """The running observation statistics of an actor side (``--sac.normalize-obs``)."""
    stats = distributed.local_copy(actor.obs_stats)
    return {k: np.asarray(v).tolist() for k, v in stats._asdict().items()}


def diverged(tree):
    """``tree`` (replicated) with the last local device's copy of its first leaf changed."""
    leaves_, treedef = jax.tree.flatten(tree)
    x = leaves_[0]
    copies = [s.data for s in x.addressable_shards]
    copies[-1] = jax.device_put(copies[-1] + 1, copies[-1].devices().pop())
    leaves_[0] = jax.make_array_from_single_device_arrays(x.shape, x.sharding, copies)
    return jax.tree.unflatten(treedef, leaves_)


def learn(args: argparse.Namespace) -> dict:
    """SAC on Pendulum data-parallel over every device, test_train.py's settings."""
    from jaxspreeze.agent.evaluate import make_seed_evaluate
    from jaxspreeze.envs import make_env

    cfg = resolve(
        RunConfig(
            total_steps=4_000,
            num_envs=8,
            grad_steps=16,
            batch_size=128,
            learning_starts=500,
            eval_episodes=8,
            sac=SACConfig(hidden=(64, 64)),
        )
    )
    placement = devices.resolve("data")
    schedule = schedules.make(plan(cfg, placement))
    state, _ = train(schedule, schedule.num_chunks)
    keys = jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds)
    evaluate = make_seed_evaluate(schedule.algo, make_env(cfg.env, cfg.eval_episodes), keys)
    result = evaluate(distributed.local_copy(state.agent.actor))
    return {
        "describe": placement.describe(),
        "final_eval_return": float(np.mean(np.asarray(result.return_mean))),
        "env_steps": leaves(state.env_steps)[0].tolist(),
        "replicas_agree": schedule.replicas_agree(state),
    }


def config(args: argparse.Namespace) -> dict:
    """Check that every process holds the same config (``--differ``: process i uses seed i)."""
    cfg = tiny("sac")
    if args.differ:
        cfg = cfg.replace(seed=distributed.process_index())
    try:
        distributed.check_same_config(cfg)
    except ConfigError as e:
        return {"process": distributed.process_index(), "refused": str(e)}
    return {"process": distributed.process_index(), "refused": None}


def forever(args: argparse.Namespace) -> None:
    """Train the tiny config chunk after chunk until killed (ready file once compiled)."""
    cfg = tiny("sac", seeds=1, chunks=1000)
    schedule = schedules.make(plan(cfg, devices.resolve("data")))
    state = schedule.init()
    schedule.compile(state)
    state = schedule.warmup(state)
    state, _ = schedule.chunk(state)
    jax.block_until_ready(state)
    Path(args.dir, f"ready-{distributed.process_index()}").write_text(str(os.getpid()))
    while True:
        state, _ = schedule.chunk(state)
        jax.block_until_ready(state)
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "mode", choices=["run", "compare", "learn", "config", "forever", "split-data"]
    )
    parser.add_argument("--differ", action="store_true")
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--shards", type=int, default=0)
    parser.add_argument("--normalize-obs", action="store_true")
    parser.add_argument("--dir", default=".")
    args = parser.parse_args()
    if args.mode == "forever":
        try:
            forever(args)
        except Exception as e:  # a peer died: its collectives fail here
            distributed.abort(distributed.peer_failure_message(e, wait_s=30))
        return
    modes = {"run": run, "compare": compare, "learn": learn, "config": config}
    found = {**modes, "split-data": split_data}[args.mode](args)
    # one write per line: the processes of a launch share the pipe (atomic below 4 KiB)
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps(found) + "\n").encode())


if __name__ == "__main__":
    main()
