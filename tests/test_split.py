"""The actor/critic device split on two fake CPU devices (a subprocess: split_worker.py).

Fake CPU devices prove placement and correctness, not speed: they share the same cores.
"""

from __future__ import annotations

from pathlib import Path

import fake_devices
import pytest

WORKER = Path(__file__).with_name("split_worker.py")


def run_worker(*args: str, timeout: float) -> dict:
    """Run ``split_worker.py *args`` with two CPU devices; its JSON findings."""
    return fake_devices.run_worker(WORKER, *args, devices=2, timeout=timeout)


@pytest.fixture(scope="module")
def found() -> dict:
    """Single vs split for a tiny SAC run (2 seeds) from the same seed."""
    return run_worker("equal", "sac", timeout=900)


@pytest.fixture(scope="module")
def found_ppo() -> dict:
    """The same for PPO (on-policy: the rollout goes to both sides). Slow tests only."""
    return run_worker("equal", "ppo", timeout=900)


ALGOS = [
    pytest.param("sac", id="sac"),
    pytest.param("ppo", id="ppo", marks=pytest.mark.slow),
]


def findings(request, algo: str) -> dict:
    """The worker's findings for ``algo`` (runs the worker once per module)."""
    return request.getfixturevalue("found" if algo == "sac" else "found_ppo")


def test_auto_picks_split_with_two_devices(found):
    """(And single with one device: test_loop.py, in this one-device process.)"""
    assert found["devices"] == 2
    assert found["auto_split"] is True


@pytest.mark.parametrize("algo", ALGOS)
def test_each_part_lives_on_its_device(request, algo):
    found = findings(request, algo)
    actor_dev, critic_dev = [0], [1]
    for when in ("init", "warm", "end"):
        w = found[algo]["where_split"][when]
        assert w["actor"] == actor_dev, (when, w)
        assert w["critic"] == critic_dev, (when, w)
        assert w["env"] == actor_dev and w["key"] == actor_dev and w["counters"] == actor_dev
        if algo == "sac":
            assert w["buffer"] == critic_dev, (when, w)
            assert w["obs_buffer"] == actor_dev, (when, w)
        else:  # on-policy: no replay buffer at all
            assert w["buffer"] == [] and w["obs_buffer"] == []
        single = found[algo]["where_single"][when]
        assert all(ids in ([], [0]) for ids in single.values()), single


@pytest.mark.parametrize("algo", ALGOS)
def test_split_equals_single_device_run(request, algo):
    found = findings(request, algo)
    f = found[algo]
    # same per-seed functions on the same inputs: XLA compiles them alike here
    assert f["state"]["max_abs_diff"] <= 1e-5, f["state"]
    assert f["metrics"]["max_abs_diff"] <= 1e-4, f["metrics"]
    assert f["state"]["bitwise"], f["state"]
    assert f["metric_keys_equal"]
    assert f["metric_shape"] == [2, f["num_seeds"]]  # [K, S] in both placements


def test_split_warmup_fills_the_same_buffer_and_the_obs_copy(found):
    """Warm-up on the actor device, stored on both: the buffer equals single's."""
    f = found["sac"]
    assert f["warm_buffer"]["bitwise"], f["warm_buffer"]
    assert f["obs_buffer_matches"] is True  # the obs-only copy holds the buffer's obs


@pytest.mark.parametrize("algo", ALGOS)
def test_policy_lag_follows_the_staleness_rule(request, algo):
    f = findings(request, algo)[algo]
    lag = f["actor_steps_per_iteration"]
    for chunk in f["policy_lag_split"] + f["policy_lag_single"]:
        assert chunk == [[lag] * f["num_seeds"]] * 2
    # counters: every iteration applied `lag` actor updates
    assert f["actor_updates"] == [it * lag for it in f["iterations"]]
    assert f["iterations"] == [2 * f["chunks"]] * f["num_seeds"]


def test_each_side_sees_the_other_from_the_start_of_the_iteration(found):
    """Pins the staleness rule: a chunk equals the rule restated by hand (seed 0)."""
    rule = found["sac"]["staleness_rule"]
    assert rule["matches_rule"], rule
    assert rule["buffer_matches"] and rule["counters_match"], rule
    assert rule["rules_differ"], rule  # the check can tell the rules apart


# the programs of one chunk, as compile logs name them (jaxspreeze.schedules)
PROGRAMS = {
    "single": ("fused_chunk",),
    "split": ("split_collect", "split_critic", "split_actor", "split_critic_view"),
}


@pytest.mark.parametrize("algo", ALGOS)
def test_chunk_programs_trace_and_compile_once(request, algo):
    """JAX's own events: each chunk program traced and compiled once per run, then reused."""
    f = findings(request, algo)[algo]
    for placement, names in PROGRAMS.items():
        traces, compiles = f[f"traces_{placement}"], f[f"compiles_{placement}"]
        for name in names:
            assert traces.get(name) == 1, (placement, name, traces)
            assert compiles.get(f"jit({name})") == 1, (placement, name, compiles)
        # warm-up and every chunk reuse what compile() built: nothing traced or compiled
        assert f[f"events_after_compile_{placement}"] == 0, placement


@pytest.mark.slow
def test_sac_with_split_learns_pendulum():
    s = run_worker("learn", timeout=1800)
    assert s["placement"].startswith("split"), s
    assert s["final_eval_return"] > -400, s
