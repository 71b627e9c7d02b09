"""Autotune: the choice rule on injected timings, the grid walk's stop rules, profiles, CLI.

Most tests inject a fake prober with known knees and a fake clock, so they are exact and
need no compile; one test runs the real probe on gymnax/Pendulum-v1 with a small budget.
"""

from __future__ import annotations

import json
import math

import pytest

from jaxspreeze import autotune
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.autotune import Point
from jaxspreeze.config import RunConfig
from jaxspreeze.errors import ConfigError


class FakeClock:
    """A clock that only moves when a fake probe says it took time."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeProber:
    """Rates with known knees: S(n) = s_unit * min(n, s_knee), U(B) = u_unit * min(B, u_knee)."""

    def __init__(
        self,
        clock: FakeClock,
        s_knee: int = 64,
        u_knee: int = 1024,
        s_unit: float = 1e4,
        u_unit: float = 100.0,
        cost_s: float = 1.0,
        fixed_bytes: int = 0,
        bytes_per_sample: int = 0,
    ) -> None:
        self.clock, self.cost_s = clock, cost_s
        self.s = lambda n: s_unit * min(n, s_knee)
        self.u = lambda b: u_unit * min(b, u_knee)
        self.fixed_bytes = fixed_bytes
        self.bytes_per_sample = bytes_per_sample
        self.calls: list[tuple[str, int]] = []

    def sampling_bytes(self, num_envs: int) -> int:
        return 0

    def update_bytes(self, batch: int) -> int:
        return batch * self.bytes_per_sample

    def _point(self, kind: str, value: int, rate: float, nbytes: int) -> Point:
        self.calls.append((kind, value))
        self.clock.t += self.cost_s
        return Point(value, rate, 0.8 * self.cost_s, 0.001, value, [rate] * 5, nbytes)

    def sampling(self, num_envs: int) -> Point:
        return self._point("sampling", num_envs, self.s(num_envs), 0)

    def update(self, batch: int) -> Point:
        return self._point("update", batch, self.u(batch), self.update_bytes(batch))

    def retime(self, kind: str, value: int) -> list[float]:
        return [(self.s if kind == "sampling" else self.u)(value)] * autotune.REPS


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


def test_update_bound_picks_smallest_num_envs_that_feeds_the_update_knee():
    # SAC at replay ratio 256: updates dominate, so the best rate is U(1024)/256 = 400
    # env steps/s; 4 envs x G=1 x batch 1024 holds the ratio at 396 (within 5%)
    chosen, profile, _ = run()
    assert picked(chosen) == (4, 1024, 1, round(1 / (4 / 4e4 + 1024 / 102_400)))
    assert profile["sampling"]["stop"] == "plateau"  # 64 -> 256 -> 1024: no gain twice
    assert [p["value"] for p in profile["sampling"]["points"]] == [1, 4, 16, 64, 256, 1024]
    assert [p["value"] for p in profile["update"]["points"]] == [256, 512, 1024, 2048, 4096]
    c = profile["choice"]
    assert (c["sampling_knee"], c["update_knee"]) == (64, 1024)
    assert c["replay_ratio"] == pytest.approx(256)
    assert 0.5 <= c["predicted"]["chunk_s"] <= 2.0
    assert profile["retime_rounds"] == autotune.RETIME_ROUNDS  # all points timed again
    assert len(profile["update"]["points"][0]["rates"]) == 5 * (1 + autotune.RETIME_ROUNDS)


def test_sampling_bound_picks_the_sampling_knee():
    # updates almost free: the rate is S(n), which saturates at 64 envs
    chosen, profile, _ = run(u_unit=1e9)
    assert picked(chosen)[:3] == (64, 256, 64)
    assert profile["choice"]["replay_ratio"] == pytest.approx(256)


def test_td3_grad_steps_are_a_multiple_of_the_policy_delay():
    chosen, _, _ = run(RunConfig(algo="td3"))
    assert chosen.grad_steps % chosen.td3.policy_delay == 0
    assert picked(chosen)[:3] == (16, 1024, 4)  # 4 envs would need G=1: not a multiple


def test_ppo_minibatch_divides_the_rollout():
    cfg = RunConfig(algo="ppo", rollout_steps=16)
    clock = FakeClock()
    fake = FakeProber(clock, s_unit=1e3, u_knee=512)
    s = [fake.sampling(n) for n in (1, 4, 16, 64, 256)]
    u = [fake.update(b) for b in (64, 128, 256, 512, 1024)]
    c = autotune.choose(cfg, s, u)
    # U saturates at 512, and a rollout must hold 4 minibatches: 256 envs x 16 steps
    assert (c["num_envs"], c["batch_size"]) == (256, 512)
    assert (c["num_envs"] * 16) % c["batch_size"] == 0
    assert c["num_envs"] * 16 >= autotune.PPO_MIN_MINIBATCHES * c["batch_size"]
    assert autotune.plan_grids(cfg, set())[0][0] == 16  # 16 x 16 = 4 minibatches of 64
    assert c["replay_ratio"] == cfg.ppo.epochs


def test_pinned_fields_keep_their_values_and_the_rest_fits_around_them():
    chosen, profile, fake = run(RunConfig(batch_size=256), pinned={"batch_size"})
    assert picked(chosen)[:3] == (1, 256, 1)
    assert {v for k, v in fake.calls if k == "update"} == {256}
    assert profile["update"]["stop"] == "pinned"

    cfg = RunConfig(num_envs=16, chunk_iterations=7)
    chosen, _, fake = run(cfg, pinned={"num_envs", "chunk_iterations"})
    assert picked(chosen) == (16, 1024, 4, 7)
    assert {v for k, v in fake.calls if k == "sampling"} == {16}

    chosen, profile, _ = run(RunConfig(grad_steps=2), pinned={"grad_steps"})
    assert chosen.grad_steps == 2
    assert chosen.grad_steps * chosen.batch_size == 256 * chosen.num_envs  # ratio held


def test_memory_limit_stops_the_batch_grid_and_bounds_the_choice():
    chosen, profile, _ = run(memory=600_000, bytes_per_sample=1000)
    assert profile["update"]["stop"] == "memory"
    assert [p["value"] for p in profile["update"]["points"]] == [256, 512]
    assert picked(chosen)[:3] == (4, 512, 2)


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
        autotune.target_replay_ratio(RunConfig(algo="ppo", replay_ratio=8.0))
    assert e.value.field == "replay_ratio"


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
    assert "choice: num_envs 4" in (tmp_path / "autotune.md").read_text()
    assert autotune.apply_profile(RunConfig(total_steps=20_000), path) == chosen

    # a pinned batch re-runs the rule on the stored rates: the replay ratio is kept
    cfg = autotune.apply_profile(RunConfig(batch_size=4096), path, pinned={"batch_size"})
    assert cfg.batch_size == 4096 and cfg.grad_steps * 4096 == 256 * cfg.num_envs

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
    assert autotune.pinned_fields(argv) == {"batch_size", "num_envs", "grad_steps"}
    assert autotune.pinned_fields(["--total-steps", "100"]) == set()


def test_cli_writes_the_profile(tmp_path, monkeypatch, capsys):
    clock = FakeClock()
    monkeypatch.setattr(autotune, "RealProber", lambda cfg, placement, limit: FakeProber(clock))
    out = tmp_path / "out"
    assert autotune.main(["--out", str(out), "--batch-size", "512"]) == 0
    profile = json.loads((out / "autotune.json").read_text())
    assert profile["choice"]["batch_size"] == 512 and profile["choice"]["pinned"] == ["batch_size"]
    assert "jaxspreeze train --profile" in capsys.readouterr().out
    assert autotune.main(["--out", str(out), "--autotune-budget-s", "0.1"]) == 2
    assert "--autotune-budget-s" in capsys.readouterr().err


def test_grid_geometry_and_interpolation():
    assert autotune.geometric(1, 4, 100) == [1, 4, 16, 64]
    assert autotune.geometric(256, 2, 100) == [256]
    pts = [Point(256, 1000.0, 0, 0, 0), Point(1024, 4000.0, 0, 0, 0)]
    assert autotune._at(pts, 512).rate == pytest.approx(2000.0)
    assert autotune._at(pts, 4096).rate == pytest.approx(4000.0)  # flat beyond the grid


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
        assert grid["stop"] in ("budget", "plateau", "end of grid", "memory")
        for p in grid["points"]:
            assert p["rate"] > 0 and p["compile_s"] > 0 and len(p["rates"]) >= autotune.REPS
    assert profile["hardware"]["backend"] == "cpu" and "jax" in profile["versions"]
    applied = autotune.apply_profile(cfg, tmp_path / "autotune.json")
    assert picked(applied) == picked(chosen)
    assert math.isfinite(profile["choice"]["predicted"]["env_steps_per_s"])
