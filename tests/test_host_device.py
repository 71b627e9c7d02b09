"""The host policy's own CPU device: a host-env run asks JAX for a second CPU device before
its backend starts, and runs its sampling workers' and its evaluator's policy calls there,
so that they do not wait behind the learner's programs on the first
(:func:`jaxspreeze.setup.devices.reserve_host_device`).

The device count is fixed when JAX's backend starts, so each case runs in a fresh process
(host_device_worker.py); this test process started its backend with one device
(conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_devices import LAUNCH_VARIABLES, QUICK_XLA_FLAGS

WORKER = Path(__file__).with_name("host_device_worker.py")


def run_worker(mode: str, logdir: Path, **env: str) -> dict:
    """``host_device_worker.py MODE LOGDIR`` in a fresh process; its JSON findings."""
    environ = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    environ.pop("JAX_NUM_CPU_DEVICES", None)  # a user's count turns the reservation off
    environ.update(JAX_PLATFORMS="cpu", XLA_FLAGS=QUICK_XLA_FLAGS, **env)
    proc = subprocess.run(
        [sys.executable, str(WORKER), mode, str(logdir)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=WORKER.parent,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_host_run_calls_its_policy_on_a_device_of_its_own(tmp_path):
    found = run_worker("train", tmp_path)
    assert found["devices"] == [0, 1]  # asked for before JAX started: two CPU devices
    for name in ("sac", "ppo"):  # off-policy (HostAsync) and on-policy (HostRollout)
        run = found[name]
        assert run["placement"] == "single device cpu:0; host policy and eval on cpu:1"
        assert run["state"] == [0]  # the learner's whole state on the first device
        assert run["published"] == [1]  # every parameter the workers acted with: the second
        assert run["evaluated"] == [1] and run["evaluations"] >= 2  # every evaluation too
        assert run["final_eval_return"] is not None
    assert found["sac"]["env_steps"] == 224 and found["ppo"]["env_steps"] == 384
    # the second device is the host policy's alone: no placement computes on it
    p = found["placements"]
    assert p["device_count"] == 1 and p["hardware_devices"] == 1
    for mode in ("auto", "single"):
        assert p[mode]["sides"] == [0] and p[mode]["host"] == p[mode]["eval"] == 1
    assert p["data"]["sides"] == [0] and p["data"]["host"] is None
    assert "split needs 2 devices" in p["split"]["error"]
    assert "has 1 cpu device(s)" in p["split-data"]["error"]


def test_no_host_device_when_jax_started_first_or_the_env_is_on_the_device(tmp_path):
    started = run_worker("started", tmp_path)  # a notebook that ran JAX first: as before
    assert started == {"reserved": False, "devices": 1, "host": None}
    assert run_worker("device-env", tmp_path) == {"devices": 1, "host": None}


@pytest.mark.parametrize("count", ["1", "2"])
def test_a_users_cpu_device_count_is_kept(tmp_path, count):
    p = run_worker("placements", tmp_path, JAX_NUM_CPU_DEVICES=count)
    assert p["devices"] == list(range(int(count))) and p["device_count"] == int(count)
    assert p["auto"]["host"] is None  # the user's devices: no host policy device
    if count == "2":  # as before: auto splits the actor and the critic over the two
        assert p["auto"]["sides"] == [0, 1]
