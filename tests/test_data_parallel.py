"""Data parallelism: the hooks on one device here, the schedule on 4 fake CPU devices.

The schedule itself runs in a subprocess with ``JAX_NUM_CPU_DEVICES=4`` (dp_worker.py):
data-parallel over the 4 devices against the same 4 shards carried by one device (vmapped),
from the same seed. Fake CPU devices prove correctness, not speed: they share the cores.
Those subprocess tests compile two 4-device programs (minutes on a shared 2-core machine)
and are ``slow``; the trainer's data placement on this process's device is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fake_devices
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxspreeze import schedules
from jaxspreeze.algos import common
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.schedules.data_parallel import DataParallel
from jaxspreeze.schedules.iteration import Shards, reduce_metrics
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan, shard_plan, shard_sizes

WORKER = Path(__file__).with_name("dp_worker.py")
AXES = ("data",)


def run_worker(*args: str, devices: int = 4, timeout: float = 900) -> dict:
    """Run ``dp_worker.py *args`` in one process with ``devices`` fake CPU devices."""
    return fake_devices.run_worker(WORKER, *args, devices=devices, timeout=timeout)


def tiny(**changes) -> RunConfig:
    """A small resolved SAC config (nothing here compiles it)."""
    base = dict(
        num_envs=8,
        rollout_steps=1,
        grad_steps=2,
        batch_size=16,
        buffer_size=256,
        learning_starts=30,
        chunk_iterations=2,
        total_steps=30 + 6 * 8 + 3,
        sac=SACConfig(hidden=(8,)),
    )
    return resolve(RunConfig(**{**base, **changes}))


# ------------------------------------------------------------------ sizes and placement
def test_global_sizes_must_split_evenly():
    with pytest.raises(ConfigError, match="does not split evenly over 4") as e:
        shard_sizes(plan(tiny(num_envs=6), on_devices=False), 4)
    assert e.value.field == "num_envs"
    with pytest.raises(ConfigError) as e:
        shard_sizes(plan(tiny(batch_size=18), on_devices=False), 4)
    assert e.value.field == "batch_size"


def test_a_shard_has_the_same_iterations_and_its_share_of_the_sizes():
    cfg = tiny()
    whole = plan(cfg, on_devices=False)
    shard = shard_plan(whole, 4)
    assert (shard.cfg.num_envs, shard.cfg.batch_size, shard.cfg.buffer_size) == (2, 4, 64)
    assert shard.num_iterations == whole.num_iterations
    assert shard.warmup_steps * 4 == whole.warmup_steps


def test_data_placement_meshes_every_device():
    p = devices.resolve("data")
    assert p.data_parallel and p.data_devices == len(jax.devices())
    assert not p.split
    assert p.describe().startswith("data-parallel over 1 cpu devices")
    assert not devices.resolve("auto").data_parallel  # one process: as before
    schedule = schedules.make(plan(tiny(), p))
    assert isinstance(schedule, DataParallel) and schedule.shards == 1
    assert schedule.init_abstract().env.obs.shape == (1, 8, 3)  # global num_envs
    with pytest.raises(ValueError, match="one fused program"):
        schedules.make(plan(tiny(), p), dispatched=True)


def test_shards_must_be_a_multiple_of_the_devices():
    with pytest.raises(ConfigError, match="multiple of the mesh"):
        DataParallel(plan(tiny(), devices.resolve("data")), shards=0)


# ------------------------------------------------------------------ the hooks in common
def test_adam_outside_data_parallel_is_the_plain_optimiser():
    """Single-device programs are unchanged: the same jaxpr as optax's own Adam."""
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    grads = jax.tree.map(lambda x: x + 0.5, params)
    for clip in (None, 0.5):
        ours = common.adam(1e-3, clip)
        plain = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
        if clip is not None:
            plain = optax.chain(optax.clip_by_global_norm(clip), plain)
        state = ours.init(params)
        a = jax.make_jaxpr(ours.update)(grads, state, params)
        b = jax.make_jaxpr(plain.update)(grads, state, params)
        assert str(a) == str(b)


def test_adam_averages_gradients_over_shards():
    params = jnp.array([1.0, -2.0, 3.0])
    tx = common.adam(0.1)
    state = tx.init(params)
    grads = jnp.array([[1.0, 0.0, 2.0], [3.0, -4.0, 0.0]])  # one row per shard

    def shard(g):
        with common.data_parallel(AXES):
            updates, _ = tx.update(g, state, params)
        return optax.apply_updates(params, updates)

    out = jax.vmap(shard, axis_name="data")(grads)
    updates, _ = tx.update(grads.mean(0), state, params)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_allclose(out[0], optax.apply_updates(params, updates), rtol=1e-6)


def test_observation_statistics_merge_every_shards_batch():
    x = jax.random.normal(jax.random.key(0), (2, 5, 3)) * jnp.array([1.0, 3.0, 0.5]) + 2.0
    stats = common.stats_init((3,))

    def shard(xs):
        with common.data_parallel(AXES):
            return common.stats_update(stats, xs)

    merged = jax.vmap(shard, axis_name="data")(x)
    whole = common.stats_update(stats, x.reshape(10, 3))
    for got, want in zip(merged, whole, strict=True):
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[0], got[1])


def test_step_metrics_add_up_average_or_all_over_shards():
    shards = Shards(AXES, (2,))
    metrics = {
        "episodes": jnp.array([1.0, 2.0]),
        "critic_loss": jnp.array([1.0, 3.0]),
        "critic_finite": jnp.array([True, False]),
        "env_steps": jnp.array([16, 16]),
    }
    out = jax.vmap(lambda m: reduce_metrics(m, shards), axis_name="data")(metrics)
    assert out["episodes"].tolist() == [3.0, 3.0]
    assert out["critic_loss"].tolist() == [2.0, 2.0]
    assert out["critic_finite"].tolist() == [False, False]
    assert out["env_steps"].tolist() == [16, 16]
    assert reduce_metrics(metrics, None) is metrics


def test_each_shard_has_its_own_keys():
    shards = Shards(("data", "local"), (2, 3))
    index = jax.vmap(jax.vmap(lambda _: shards.index(), axis_name="local"), axis_name="data")(
        jnp.zeros((2, 3))
    )
    assert index.tolist() == [[0, 1, 2], [3, 4, 5]]
    keys = jax.vmap(lambda _: jax.random.key_data(Shards(AXES, (4,)).key(jax.random.key(0))),
                    axis_name="data")(jnp.zeros(4))  # fmt: skip
    assert len({tuple(k) for k in np.asarray(keys).tolist()}) == 4


# ------------------------------------------------------------------ 4 fake devices
@pytest.fixture(scope="module")
def found() -> dict:
    """SAC (2 seeds): data-parallel over 4 devices vs the same 4 shards on one device."""
    return run_worker("compare", "--algo", "sac")


@pytest.mark.slow
def test_four_devices_run_the_data_parallel_schedule(found):
    assert found["devices"] == 4 and found["schedule"] == "DataParallel"
    assert found["agent_on_devices"] == [0, 1, 2, 3]  # the agent is replicated
    assert found["env_sharding"] == "P(None, 'data')"  # the envs are split
    assert found["num_seeds"] == 2
    assert found["env_steps"] == [8 * 4 + 6 * 8] * 2  # global steps, every seed


@pytest.mark.slow
def test_parameters_are_identical_on_every_device(found):
    assert found["replicas_agree"] == [True, True]
    assert found["local_copies_equal"]
    assert found["divergence_detected"]  # the debug check notices a differing copy


@pytest.mark.slow
def test_data_parallel_equals_one_device_within_float_rounding(found):
    """Same start bitwise; the all-reduce's summation order differs from vmap's."""
    assert found["bitwise_after"] == {"init": True, "warmup": True}
    first = found["first_chunk"]
    assert first["agent_max_abs_diff"] < 1e-4, first
    assert first["metrics_max_abs_diff"] < 1e-2, first  # losses are O(50)
    assert found["agent_max_abs_diff"] < 1e-2, found["agent_max_abs_diff"]


@pytest.mark.slow
def test_ppo_data_parallel_equals_one_device():
    """PPO: minibatch epochs and the merged observation statistics."""
    found = run_worker("compare", "--algo", "ppo")
    assert found["replicas_agree"] == [True, True] and found["local_copies_equal"]
    assert found["bitwise_after"] == {"init": True, "warmup": True}
    assert found["first_chunk"]["agent_max_abs_diff"] < 1e-4, found["first_chunk"]
    assert found["agent_max_abs_diff"] < 1e-3, found["agent_max_abs_diff"]


@pytest.mark.slow
def test_sac_data_parallel_learns_pendulum():
    s = run_worker("learn", timeout=1800)
    assert s["describe"].startswith("data-parallel over 4"), s
    assert s["replicas_agree"], s
    assert s["final_eval_return"] > -400, s


def test_train_with_the_data_placement(tmp_path):
    from jaxspreeze.run.trainer import train

    cfg = tiny(
        logdir=str(tmp_path), run_name="dp", sinks=("jsonl",), placement="data", total_steps=96
    )
    result = train(cfg, quiet=True, save=False)
    assert result.summary["env_steps"] == cfg.total_steps  # 32 warm-up + 4 chunks x 2 x 8
    assert result.summary["placement"].startswith("data-parallel over 1 cpu devices")
    topology = result.summary["topology"]
    assert topology["processes"] == 1 and topology["data_parallel_devices"] == 1
    assert (tmp_path / "dp" / "summary.json").is_file()
    manifest = json.loads(next((tmp_path / "dp" / "checkpoints").iterdir()).joinpath(
        "manifest.json").read_text())  # fmt: skip
    assert manifest["extra"]["layout"] == {
        "processes": 1, "data_parallel": True, "data_devices": 1, "placement_kind": "data"
    }  # fmt: skip


@pytest.mark.slow
def test_train_on_two_devices_evaluates_and_resumes_on_the_same_devices_only(tmp_path):
    """The trainer over 2 fake devices: evaluations of the replicated actor succeed (the
    evaluator's copy survives the next chunk's donation), a resume on 1 device is refused."""
    args = ["--algo", "sac", "--num-envs", "4", "--batch-size", "16", "--buffer-size", "400",
            "--learning-starts", "64", "--chunk-iterations", "10", "--sac.hidden", "8",
            "--sinks", "jsonl", "--eval-episodes", "2", "--eval-every", "40",
            "--logdir", str(tmp_path), "--run-name", "r", "--placement", "data"]  # fmt: skip

    def train_cli(*more: str, devices: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(devices)}
        return subprocess.run(
            [sys.executable, "-m", "jaxspreeze", "train", *more],
            env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip

    first = train_cli(*args, "--total-steps", "300", devices=2)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr[-2000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["evaluations_failed"] == 0 and summary["evaluations_done"] >= 2
    assert summary["placement"].startswith("data-parallel over 2 cpu devices")
    refused = train_cli("--resume", str(tmp_path / "r"), "--total-steps", "400", devices=1)
    assert refused.returncode == 2 and "data-parallel over 2 devices" in refused.stderr
    resumed = train_cli("--resume", str(tmp_path / "r"), "--total-steps", "400", devices=2)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
