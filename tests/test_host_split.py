"""The host learner (HostAsync) split over two fake CPU devices (a subprocess:
host_split_worker.py): the critic side on one device, the actor side on the other.

Fake CPU devices prove placement and correctness, not speed: they share the same cores.
"""

from __future__ import annotations

from pathlib import Path

import fake_devices
import pytest

WORKER = Path(__file__).with_name("host_split_worker.py")


def run_worker(*args: str, timeout: float) -> dict:
    """Run ``host_split_worker.py *args`` with two CPU devices; its JSON findings."""
    return fake_devices.run_worker(WORKER, *args, devices=2, timeout=timeout, cwd=WORKER.parent)


@pytest.mark.slow  # a whole host-env run on two devices (about 40 s)
def test_split_host_learner_places_the_sides_apart_and_equals_one_device(tmp_path):
    found = run_worker("equal", str(tmp_path), timeout=900)
    assert found["devices"] == 2
    one, two = found["single"], found["split"]
    assert not one["split"] and {d for ids in one["where"].values() for d in ids} == {0}
    assert two["split"]
    w = two["where"]
    # critic side (critic, buffer) on one device; actor side (actor, obs-only copy,
    # counters, key) on the other
    assert w["critic"] == w["buffer"] != w["actor"] == w["obs_buffer"] == w["counters"]
    # the same phases, keys and views: equal to float rounding (here bitwise)
    assert found["agent"]["max_abs_diff"] <= 1e-5, found["agent"]
    assert found["buffer"]["bitwise"] and found["counters"]["bitwise"]
    assert found["obs_copy"]["bitwise"]  # the actor side's copy holds the same observations
    assert found["metrics_equal_names"]


@pytest.mark.slow  # a fresh process compiles two runs (a few minutes on 2 busy cores)
def test_trainer_runs_a_split_host_run_and_resumes_it(tmp_path):
    found = run_worker("train", str(tmp_path), timeout=900)
    assert found["schedule_split"] and found["resumed_split"]
    w = found["where"]
    assert w["critic"] == w["buffer"] != w["actor"] == w["obs_buffer"]
    assert found["env_steps"] == 224 and found["final_eval_return"] is not None
    assert found["policy_lag"] >= 2
    assert found["resumed_from"] and found["resumed_env_steps"] == 304
    # PPO: the learner on the critic's device, the workers act on the actor's
    ppo = found["ppo"]
    assert ppo["where"]["actor"] == ppo["where"]["critic"] != ppo["slot"]
    assert ppo["env_steps"] == 384 and ppo["policy_lag"] == 2 * 2 * (4 * 16 // 32)
