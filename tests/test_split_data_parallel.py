"""The actor/critic split composed with data parallelism (``--placement split-data``).

The schedule runs in subprocesses with fake CPU devices (dp_worker.py ``split-data``):
with 4 devices, split-data (k=2: actor side on devices 0-1, critic side on 2-3) against
data-parallel over the 2 actor-side devices, from the same seed and global sizes. Those
compile two multi-device runs (minutes on a shared 2-core machine) and are ``slow``, as
are the trainer's runs from the CLI; the refusals of bad input end before anything is
compiled and run by default.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import pytest
from test_data_parallel import run_worker
from test_multiprocess import clean_env, launched

from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

TRAIN = ["--algo", "sac", "--num-envs", "4", "--batch-size", "16", "--buffer-size", "400",
         "--learning-starts", "64", "--chunk-iterations", "10", "--sac.hidden", "8",
         "--sinks", "jsonl", "--eval-episodes", "2", "--placement", "split-data"]  # fmt: skip


def train_cli(*args: str, devices: int, timeout: float = 900) -> subprocess.CompletedProcess:
    """``jaxspreeze train ARGS`` in one process with ``devices`` fake CPU devices."""
    return subprocess.run(
        [sys.executable, "-m", "jaxspreeze", "train", *args],
        env=clean_env(JAX_NUM_CPU_DEVICES=str(devices)),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# ------------------------------------------------------------------ bad input: exit 2
def test_split_data_needs_an_even_number_of_devices():
    assert len(jax.devices()) == 1
    with pytest.raises(ConfigError, match="even number of devices") as e:
        devices.resolve("split-data")
    assert e.value.field == "placement"
    assert not devices.resolve("auto").data_parallel  # auto never picks split-data


def test_split_data_is_a_placement_but_not_for_host_envs():
    assert plan(RunConfig(placement="split-data"), on_devices=False).cfg.placement == "split-data"
    with pytest.raises(ConfigError, match="do not run data-parallel") as e:
        plan(RunConfig(env="gymnasium/Pendulum-v1", placement="split-data"), on_devices=False)
    assert e.value.field == "placement"


def test_the_cli_refuses_bad_split_data_input_before_compiling(tmp_path):
    """Odd devices, sizes that do not split over k: exit 2, one line naming the flag."""
    args = [*TRAIN, "--total-steps", "200", "--logdir", str(tmp_path)]
    odd = train_cli(*args, devices=3)
    assert odd.returncode == 2, odd.stderr[-2000:]
    assert "--placement" in odd.stderr and "even number of devices" in odd.stderr
    uneven = train_cli(*args, "--num-envs", "5", devices=4)
    assert uneven.returncode == 2, uneven.stderr[-2000:]
    assert "--num-envs" in uneven.stderr and "use a multiple of 2" in uneven.stderr
    assert "compiled" not in odd.stdout + uneven.stdout


# ------------------------------------------------------------------ 4 fake devices
@pytest.fixture(scope="module")
def found() -> dict:
    """SAC (2 seeds): split-data over 4 devices vs data-parallel over its 2 actor devices."""
    return run_worker("split-data", "--algo", "sac")


@pytest.mark.slow
def test_each_side_lives_on_its_half_of_the_devices(found):
    assert found["schedule"] == "SplitDataParallel" and found["shards"] == 2
    assert found["describe"].startswith("split-data over 4 cpu devices (1 process)")
    where = found["devices"]
    assert where["actor"] == where["env"] == where["obs_buffer"] == [0, 1]
    assert where["critic"] == where["buffer"] == [2, 3]
    assert found["obs_copy_matches_buffer"]  # each actor device holds its pair's obs rows


@pytest.mark.slow
def test_split_data_equals_data_parallel_over_k_devices_bitwise(found):
    """The same per-shard pieces, keys and all-reduces: bitwise (as split == fused)."""
    assert found["bitwise"] == dict.fromkeys(
        ("agent", "env", "buffer", "key", "env_steps", "iteration", "actor_updates", "metrics"),
        True,
    ), found
    assert found["env_steps"] == [32 + 8 * 8] * 2  # 3 chunks compared, 1 more (the resume)


@pytest.mark.slow
def test_parameters_are_identical_on_every_device_of_each_side(found):
    assert found["replicas_agree"] == {"actor": True, "critic": True}
    assert found["local_copies_equal"] == {"actor": True, "critic": True}
    assert found["divergence_detected"]  # a differing critic copy is named


@pytest.mark.slow
def test_a_split_data_state_goes_to_the_host_and_back(found):
    assert found["host_round_trip"] and found["resumes_bitwise"]


@pytest.mark.slow
def test_ppo_split_data_equals_data_parallel_bitwise():
    found = run_worker("split-data", "--algo", "ppo")
    assert found["devices"]["actor"] == found["devices"]["env"] == [0, 1]
    assert found["devices"]["critic"] == [2, 3] and found["devices"]["buffer"] == []
    assert all(found["bitwise"].values()), found["bitwise"]
    assert found["replicas_agree"] == {"actor": True, "critic": True}
    assert found["local_copies_equal"] == {"actor": True, "critic": True}


# ------------------------------------------------------------------ the trainer
@pytest.mark.slow
def test_train_with_split_data_from_the_cli_and_resume(tmp_path):
    args = [*TRAIN, "--eval-every", "80", "--logdir", str(tmp_path), "--run-name", "r"]
    first = train_cli(*args, "--total-steps", "304", devices=4)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr[-2000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["placement"].startswith("split-data over 4 cpu devices")
    topology = summary["topology"]
    assert topology["placement_kind"] == "split-data"
    assert topology["actor_devices"] == topology["critic_devices"] == 2
    assert topology["devices_per_shard"] == 2 and topology["data_parallel_devices"] == 2
    assert summary["evaluations_failed"] == 0 and summary["evaluations_done"] >= 2
    refused = train_cli("--resume", str(tmp_path / "r"), "--total-steps", "400", devices=2)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "split-data over 4 devices" in refused.stderr
    assert "with 4 devices and --placement split-data" in refused.stderr
    resumed = train_cli("--resume", str(tmp_path / "r"), "--total-steps", "400", devices=4)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["env_steps"] >= 400 and summary["resumed_from"]
    assert summary["topology"]["placement_kind"] == "split-data"


# ------------------------------------------------------------------ 2 processes x 2 devices
@pytest.mark.slow
def test_two_processes_of_two_devices_pair_their_devices_locally():
    """Each process: its device 0 on the actor side, its device 1 on the critic side."""
    found = launched("split-data", "--algo", "sac", devices_per_process=2)
    assert [d["process"] for d in found] == [0, 1]
    for d in found:
        assert d["describe"].startswith("split-data over 4 cpu devices (2 processes)")
        assert d["pairs_in_one_process"] and d["shards"] == 2
        assert not set(d["devices"]["actor"]) & set(d["devices"]["critic"])
        assert all(d["bitwise"].values()), d["bitwise"]
        assert d["replicas_agree"] == {"actor": True, "critic": True}
        assert d["resumes_bitwise"]
    assert found[0]["bitwise"] == found[1]["bitwise"]
