"""Autotune: the choice rule on injected timings, the grid walk's stop rules, profiles, CLI.

Most tests inject a fake prober with known knees (or synthetic throughput tables) and a
fake clock, so they are exact and need no compile; one test runs the real probe on
gymnax/Pendulum-v1 with a small budget; a slow one trains the autotuned and the default
SAC on Pendulum to the same threshold.
"""

from __future__ import annotations

import json
import math

import pytest
from fake_autotune import FakeClock, FakeProber

from jaxspreeze import autotune
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.autotune import grid, probes
from jaxspreeze.autotune.choose import (
    ON_POLICY_MAX_MINIBATCHES,
    ON_POLICY_MIN_MINIBATCHES,
    Point,
    choose,
    interpolate,
    target_replay_ratio,
)
from jaxspreeze.bench import learning
from jaxspreeze.bench import report as bench_report
from jaxspreeze.cli import main
from jaxspreeze.cli.train import pinned_fields
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup.config import RunConfig, resolve


def run(cfg=None, budget=1000.0, pinned=frozenset(), memory=10**12, out=None, **fake):
    clock = FakeClock()
    prober = FakeProber(clock, **fake)
    chosen, profile = autotune.tune(
        cfg or RunConfig(total_steps=20_000),  # a run long enough for the whole env grid
        budget_s=budget,
        out_dir=out,
        pinned=pinned,
        say=lambda *a: None,
        prober=prober,
        memory_limit=memory,
        clock=clock,
    )
    return chosen, profile, prober


def picked(cfg: RunConfig) -> tuple[int, int, int, int]:
    return cfg.num_envs, cfg.batch_size, cfg.grad_steps, cfg.chunk_iterations


def test_update_bound_keeps_gradient_steps_and_takes_the_free_batch():
    # SAC defaults (8 envs, G=8, batch 256: one gradient step per env step). A step's time
    # is flat up to batch 1024 (U saturates there), so 1024 is free; every num_envs gives
    # the same predicted wall time (update-bound), so the configured 8 envs stay
    chosen, profile, _ = run()
    k = round(1 / (8 / 8e4 + 8 * 1024 / 102_400))
    assert picked(chosen) == (8, 1024, 8, k)
    assert [p["value"] for p in profile["sampling"]["points"]] == [8, 32, 128, 256]
    assert [p["value"] for p in profile["update"]["points"]] == [256, 512, 1024, 2048, 4096]
    assert profile["update"]["stop"] in ("plateau", "step time")
    c = profile["choice"]
    assert c["grad_steps_per_env_step"] == c["update_ratio_target"] == 1.0
    assert c["free_batch"] == 1024
    assert c["base"] == {"num_envs": 8, "batch_size": 256, "grad_steps": 8, "total_steps": 20_000}
    assert (c["sampling_knee"], c["update_knee"]) == (128, 1024)  # 64 is not on the grid
    assert 0.5 <= c["predicted"]["chunk_s"] <= 2.0
    assert chosen.sac == resolve(RunConfig()).sac  # no learning-rate rule: nothing was traded
    assert profile["retime_rounds"] == grid.RETIME_ROUNDS  # all points timed again
    assert len(profile["update"]["points"][0]["rates"]) == 5 * (1 + grid.RETIME_ROUNDS)


def _points(table: dict[int, float]) -> list[Point]:
    return [Point(v, r, 1.0, 0.01, v) for v, r in table.items()]


def test_a_faster_point_with_fewer_gradient_steps_is_not_chosen():
    """Issue 17's case: batch 1024 gives 2.5x the update samples/s of 256 but each step
    takes 1.6x as long. Holding update samples per env step (the old rule) took batch 1024
    with a quarter of the gradient steps; the rule keeps the gradient steps and the batch."""
    cfg = RunConfig(total_steps=10_000)
    sampling = _points({8: 3e4, 32: 6e4, 128: 8e4})
    update = _points({256: 6_000.0, 512: 9_000.0, 1024: 15_000.0})
    c = choose(cfg, sampling, update)
    assert (c["num_envs"], c["batch_size"], c["grad_steps"]) == (8, 256, 8)
    assert c["grad_steps_per_env_step"] == 1.0
    cands = c["candidates"]
    # the most update samples/s was at batch 1024 ...
    assert max(cands, key=lambda x: x["update_samples_per_s"])["batch_size"] == 1024
    # ... but no eligible point takes fewer gradient steps per env step than the default
    assert all(x["grad_steps_per_env_step"] >= 1.0 for x in cands if x["eligible"])
    assert {x["why_not"] for x in cands if x["batch_size"] > 256} == {"batch not free"}
    # the same table where batch 1024 costs only 8% more per step: it is free and taken
    update = _points({256: 6_000.0, 512: 11_800.0, 1024: 6_000.0 * 4 / 1.08})
    c = choose(cfg, sampling, update)
    assert (c["num_envs"], c["batch_size"], c["grad_steps"]) == (8, 1024, 8)


def test_a_cpu_like_step_cost_keeps_the_configured_sizes():
    # a step's time grows with the batch (U flat from 256) and updates dominate
    chosen, profile, _ = run(u_knee=256)
    assert picked(chosen)[:3] == (8, 256, 8)
    assert profile["choice"]["predicted"]["wall_s"] == profile["choice"]["predicted"]["base_wall_s"]


def test_sampling_bound_grows_num_envs_nearest_the_configured_within_tolerance():
    # updates almost free: the wall time is sampling's, flat from 64 envs on; 128 and 256
    # tie (within 5%) and 128 is nearer the configured 8; G grows with n (1 per env step)
    chosen, profile, _ = run(u_unit=1e9)
    assert picked(chosen)[:3] == (128, 1024, 128)
    c = profile["choice"]
    assert c["grad_steps_per_env_step"] == 1.0
    assert c["predicted"]["wall_s"] < 0.5 * c["predicted"]["base_wall_s"]


def test_td3_grad_steps_are_a_multiple_of_the_policy_delay():
    # --replay-ratio 128 at batch 256: half a gradient step per env step; TD3 needs a
    # multiple of policy_delay (2): 1 env would take 2 per env step (4x the target)
    cfg = RunConfig(algo="td3", replay_ratio=128.0, total_steps=10_000)
    c = choose(cfg, _points({1: 1e4, 8: 1e4}), _points({256: 1e4}))
    assert all(x["grad_steps"] % 2 == 0 for x in c["candidates"])
    assert all(x["grad_steps_per_env_step"] >= 0.5 for x in c["candidates"])
    assert (c["num_envs"], c["grad_steps"]) == (8, 4)
    chosen, _, _ = run(RunConfig(algo="td3", total_steps=20_000), u_unit=1e9)
    assert chosen.grad_steps % chosen.td3.policy_delay == 0
    assert chosen.grad_steps == chosen.num_envs  # one gradient step per env step kept


def test_ppo_keeps_the_minibatch_and_bounds_the_rollout():
    cfg = RunConfig(algo="ppo", total_steps=10**7)
    s = _points({16: 1e3, 64: 4e3, 256: 1.6e4, 1024: 6.4e4})  # sampling-bound
    c = choose(cfg, s, _points({256: 1e9}))
    # a minibatch of 256 at the same epochs keeps epochs / 256 gradient steps per env
    # step; at most 32 minibatches per rollout: 128 envs x 64 steps, so 1024 is out
    assert (c["num_envs"], c["batch_size"]) == (64, 256)
    assert c["grad_steps_per_env_step"] == pytest.approx(cfg.ppo.epochs / 256)
    assert c["replay_ratio"] == cfg.ppo.epochs
    assert max(x["num_envs"] for x in c["candidates"]) == 64  # 256 x 64 / 256 = 64 > 32
    for x in c["candidates"]:
        minibatches = x["num_envs"] * 64 // x["batch_size"]
        assert ON_POLICY_MIN_MINIBATCHES <= minibatches <= ON_POLICY_MAX_MINIBATCHES
    assert grid.plan_grids(cfg, set()) == ([16, 64], [256])
    # the default budget (100k steps) allows 31 envs (50 iterations): the grid is n0 only
    assert grid.plan_grids(RunConfig(algo="ppo"), set()) == ([16], [256])
    chosen, profile, fake = run(RunConfig(algo="ppo", total_steps=400_000), s_unit=1e2)
    assert picked(chosen)[:2] == (64, 256)
    assert {v for k, v in fake.calls if k == "update"} == {256}
    assert profile["update"]["stop"].startswith("kept")


def test_the_grids_reach_65536_where_the_budget_allows():
    big = RunConfig(total_steps=10**8, buffer_size=10**6)
    envs, batches = grid.plan_grids(big, set())
    assert (envs[0], envs[-1], batches[0], batches[-1]) == (8, 65_536, 256, 65_536)
    envs, batches = grid.plan_grids(RunConfig(), set())  # 10k steps: 50 iterations
    assert envs == [8, 32, 128] and batches[-1] == 65_536


def test_pinned_fields_keep_their_values_and_the_rest_fits_around_them():
    chosen, profile, fake = run(RunConfig(batch_size=256), pinned={"batch_size"})
    assert picked(chosen)[:3] == (8, 256, 8)
    assert {v for k, v in fake.calls if k == "update"} == {256}
    assert profile["update"]["stop"] == "pinned"

    cfg = RunConfig(num_envs=16, chunk_iterations=7)
    chosen, _, fake = run(cfg, pinned={"num_envs", "chunk_iterations"})
    assert picked(chosen) == (16, 1024, 16, 7)
    assert {v for k, v in fake.calls if k == "sampling"} == {16}

    # a pinned G=2 at 8 envs is a quarter gradient step per env step: more envs with
    # G=2 would take fewer, so they are ruled out
    chosen, profile, _ = run(RunConfig(grad_steps=2, total_steps=20_000), pinned={"grad_steps"})
    assert picked(chosen)[:3] == (8, 1024, 2)
    rejected = {x["why_not"] for x in profile["choice"]["candidates"] if x["num_envs"] > 8}
    assert rejected == {"fewer gradient steps per env step"}


def test_memory_limit_stops_the_batch_grid_and_bounds_the_choice():
    chosen, profile, _ = run(memory=600_000, bytes_per_sample=1000)
    assert profile["update"]["stop"] == "memory"
    assert [p["value"] for p in profile["update"]["points"]] == [256, 512]
    assert picked(chosen)[:3] == (8, 512, 8)


def test_impossible_requests_fail_before_any_probe():
    with pytest.raises(ConfigError) as e:
        run(
            RunConfig(batch_size=2048), pinned={"batch_size"}, memory=600_000, bytes_per_sample=1000
        )
    assert e.value.field == "batch_size" and "pinned batch size 2048" in str(e.value)
    with pytest.raises(ConfigError) as e:
        run(budget=0.5)
    assert e.value.field == "autotune_budget_s"
    with pytest.raises(ConfigError) as e:
        run(memory=1000, fixed_bytes=10_000)
    assert e.value.field == "buffer_size"
    with pytest.raises(ConfigError) as e:
        target_replay_ratio(RunConfig(algo="ppo", replay_ratio=8.0))
    assert e.value.field == "replay_ratio"
    assert target_replay_ratio(RunConfig()) == 256.0  # one batch-256 step per env step


def test_budget_stops_the_grids():
    # 3 s per point, 12 s budget: one point of each grid first; update-bound, so the
    # sampling grid gets 15% (no more point), both grids 85% (a 2nd update point)
    _, profile, fake = run(budget=12.0, cost_s=3.0)
    assert profile["sampling"]["stop"] == "budget"
    assert profile["update"]["stop"] == "budget"
    assert len(fake.calls) == 3 and not profile["over_budget"]
    assert profile["elapsed_s"] <= 12.0


def test_profile_round_trip_and_mismatches(tmp_path):
    chosen, _, _ = run(out=tmp_path)
    path = tmp_path / "autotune.json"
    assert (tmp_path / "autotune.png").stat().st_size > 0
    assert "choice: num_envs 8" in (tmp_path / "autotune.md").read_text()
    assert autotune.apply_profile(RunConfig(total_steps=20_000), path) == chosen

    # a pinned batch re-runs the rule on the stored rates: gradient steps per env step kept
    cfg = autotune.apply_profile(
        RunConfig(batch_size=4096, total_steps=20_000), path, pinned={"batch_size"}
    )
    assert cfg.batch_size == 4096 and cfg.grad_steps == cfg.num_envs

    with pytest.raises(ConfigError) as e:
        autotune.apply_profile(RunConfig(algo="td3"), path)
    assert e.value.field == "profile" and "measured for sac" in str(e.value)

    data = json.loads(path.read_text())
    data["hardware"]["backend"] = "gpu"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.warns(autotune.ProfileWarning, match="backend"):
        autotune.apply_profile(RunConfig(), other)

    for text in ("{not json", json.dumps({"format": "x"}), json.dumps({**data, "version": 99})):
        other.write_text(text)
        with pytest.raises(ConfigError) as e:
            autotune.apply_profile(RunConfig(), other)
        assert e.value.field == "profile"
    data["choice"]["num_envs"] = 0
    other.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="positive integer"):
        autotune.apply_profile(RunConfig(), other)


def test_pinned_fields_from_argv(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text("grad_steps = 4\nseed = 3\n")
    argv = ["--batch-size", "512", "--num_envs=4", "--seed", "1", "--config", str(preset)]
    assert pinned_fields(argv) == {"batch_size", "num_envs", "grad_steps"}
    assert pinned_fields(["--total-steps", "100"]) == set()


def test_cli_writes_the_profile(tmp_path, monkeypatch, capsys):
    clock = FakeClock()
    monkeypatch.setattr(probes, "RealProber", lambda plan, limit: FakeProber(clock))
    out = tmp_path / "out"
    assert main(["autotune", "--out", str(out), "--batch-size", "512"]) == 0
    profile = json.loads((out / "autotune.json").read_text())
    assert profile["choice"]["batch_size"] == 512 and profile["choice"]["pinned"] == ["batch_size"]
    assert "jaxspreeze train --profile" in capsys.readouterr().out
    assert main(["autotune", "--out", str(out), "--autotune-budget-s", "0.1"]) == 2
    assert "--autotune-budget-s" in capsys.readouterr().err


def test_grid_geometry_and_interpolation():
    assert grid.geometric(1, 4, 100) == [1, 4, 16, 64]
    assert grid.geometric(256, 2, 100) == [256]
    pts = [Point(256, 1000.0, 0, 0, 0), Point(1024, 4000.0, 0, 0, 0)]
    assert interpolate(pts, 512).rate == pytest.approx(2000.0)
    assert interpolate(pts, 4096).rate == pytest.approx(4000.0)  # flat beyond the grid


@pytest.mark.slow  # a real probe; the choice rule is tested on fakes (the default run stays under 10 minutes)
def test_real_probe_on_pendulum(tmp_path):
    """The real probe with a small budget: measures, stops by a rule, writes a usable profile."""
    cfg = RunConfig(
        total_steps=5_000,
        buffer_size=5_000,
        learning_starts=500,
        compile_cache="off",
        sac=SACConfig(hidden=(32, 32)),
    )
    chosen, profile = autotune.tune(cfg, budget_s=10.0, out_dir=tmp_path, say=lambda *a: None)
    for kind in ("sampling", "update"):
        grid = profile[kind]
        assert len(grid["points"]) >= 1
        assert grid["stop"] in ("budget", "plateau", "step time", "end of grid", "memory")
        for p in grid["points"]:
            assert p["rate"] > 0 and p["compile_s"] > 0 and len(p["rates"]) >= probes.REPS
    assert profile["hardware"]["backend"] == "cpu" and "jax" in profile["versions"]
    applied = autotune.apply_profile(cfg, tmp_path / "autotune.json")
    assert picked(applied) == picked(chosen)
    assert math.isfinite(profile["choice"]["predicted"]["env_steps_per_s"])


def _learning_side(label: str, n: int, times: list, finals: list[float]) -> dict:
    return {
        "kind": "learning",
        "label": label,
        "num_envs": n,
        "batch_size": 256,
        "grad_steps": n,
        "chunk_iterations": 1,
        "grad_steps_per_env_step": 1.0,
        "wall_to_threshold_s_per_seed": times,
        "env_steps_to_threshold_per_seed": [None if t is None else 1000 for t in times],
        "reached": sum(t is not None for t in times),
        "wall_to_threshold_s": learning._median_or_none(times),
        "steady_to_threshold_s": None,
        "final_return_per_seed": finals,
        "final_return": sum(finals) / len(finals),
        "final_return_std": 1.0,
        "env_steps_per_s": 100.0,
        "compile_s": 3.0,
    }


def test_learning_verdict_and_table():
    """Sooner = median over seeds (unreached counts as late); final within the spread."""
    default = _learning_side("default", 8, [10.0, 12.0, None], [-150.0, -190.0, -260.0])
    ours = _learning_side("autotuned", 32, [8.0, 9.0, 30.0], [-170.0, -180.0, -200.0])
    assert default["wall_to_threshold_s"] == 12.0 and ours["wall_to_threshold_s"] == 9.0
    v = learning.verdict(ours, default)
    assert (v["sooner"], v["final_ok"], v["same_config"]) == (True, True, False)
    assert v["speedup"] == pytest.approx(12 / 9)
    worse = _learning_side("autotuned", 32, [8.0, None, None], [-300.0, -900.0, -900.0])
    assert learning.verdict(worse, default)["sooner"] is False
    assert learning.verdict(worse, default)["final_ok"] is False
    rec = {**ours, "task": "sac-Pendulum-v1", "threshold": -200.0, "reference": default}
    rec["verdict"], rec["autotune"] = v, {"probe_s": 30.0}
    lines = "\n".join(bench_report.learning_markdown([rec]))
    assert "| sac-Pendulum-v1 | -200 | default | 8 / 256 / 8 / 1 |" in lines
    assert "12 (10, 12, -)" in lines and "| False | True (1.33) |" in lines


@pytest.mark.slow
def test_autotuned_sac_reaches_the_default_threshold(tmp_path):
    """Autotuned vs default SAC on Pendulum, 3 seeds, 10k env steps: both reach -200."""
    task = learning.TASKS["sac-Pendulum-v1"]
    rec = learning.compare(task, autotune_budget_s=20.0, out_dir=tmp_path)
    default = rec["reference"]
    assert default["wall_to_threshold_s"] is not None  # the defaults learn the task
    assert rec["wall_to_threshold_s"] is not None  # and so does autotune's choice
    assert rec["grad_steps_per_env_step"] == default["grad_steps_per_env_step"] == 1.0
    assert rec["verdict"]["final_ok"]
    assert (tmp_path / "autotune.png").stat().st_size > 0
