"""Autotune on host envs (gymnasium/, envpool/): workers x num_envs, batch, the two sides.

The choice rule and the grid walk run on injected timings (a fake prober and clock: exact,
no compile); one test runs the real probe on gymnasium's Pendulum with a small budget;
a slow one trains with the profile it writes.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
from fake_autotune import FakeClock

from jaxspreeze import autotune
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.autotune import host, probes
from jaxspreeze.autotune.choose import Point, choose_host
from jaxspreeze.cli import main
from jaxspreeze.cli.train import pinned_fields
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup.config import RunConfig

PENDULUM = "gymnasium/Pendulum-v1"


class FakeHostProber:
    """S(W, n) = s_unit * min(n, s_knee) * min(W, w_knee); U(B) = u_unit * min(B, u_knee)."""

    def __init__(
        self,
        clock: FakeClock,
        s_knee: int = 32,
        w_knee: int = 1,
        u_knee: int = 256,
        s_unit: float = 500.0,
        u_unit: float = 100.0,
        cost_s: float = 1.0,
    ) -> None:
        self.clock, self.cost_s = clock, cost_s
        self.s = lambda w, n: s_unit * min(n, s_knee) * min(w, w_knee)
        self.u = lambda b: u_unit * min(b, u_knee)
        self.fixed_bytes = 0
        self.calls: list[tuple] = []

    def sampling_bytes(self, num_envs: int) -> int:
        return 0

    def update_bytes(self, batch: int) -> int:
        return 0

    def host_sampling(self, workers: int, num_envs: int) -> Point:
        self.calls.append(("sampling", workers, num_envs))
        self.clock.t += self.cost_s
        rate = self.s(workers, num_envs)
        return Point(num_envs, rate, 0.5, 0.001, num_envs, [rate] * 5, 0, workers=workers)

    def update(self, batch: int) -> Point:
        self.calls.append(("update", batch))
        self.clock.t += self.cost_s
        rate = self.u(batch)
        return Point(batch, rate, 0.8, 0.001, batch, [rate] * 5)

    def retime(self, kind: str, value: int) -> list[float]:
        assert kind == "update"  # host sampling points are measured once
        return [self.u(value)] * probes.REPS


def run(cfg=None, budget=1000.0, pinned=frozenset(), out=None, cpus=4, monkeypatch=None, **fake):
    clock = FakeClock()
    prober = FakeHostProber(clock, **fake)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    chosen, profile = autotune.tune(
        cfg or RunConfig(env=PENDULUM, total_steps=20_000),
        budget_s=budget,
        out_dir=out,
        pinned=pinned,
        say=lambda *a: None,
        prober=prober,
        memory_limit=10**12,
        clock=clock,
    )
    return chosen, profile, prober


def sizes(cfg: RunConfig) -> tuple[int, int, int, int, int]:
    return cfg.host_workers, cfg.num_envs, cfg.batch_size, cfg.grad_steps, cfg.chunk_iterations


def pts(table: dict[tuple[int, int], float]) -> list[Point]:
    return [Point(n, r, 1.0, 0.01, n, workers=w) for (w, n), r in table.items()]


def test_learner_bound_keeps_the_configured_sizes_and_reports_both_sides(monkeypatch):
    # sampling is fast (4k+ env steps/s), a batch-256 step takes 10 ms: the learner bounds
    # the run at 100 env steps/s whatever n; the configured 1 worker x 8 envs stays
    chosen, profile, fake = run(monkeypatch=monkeypatch)
    assert sizes(chosen)[:4] == (1, 8, 256, 8)
    c = profile["choice"]
    assert c["bound"] == "learner" and c["overlap"] is True
    assert profile["check"] == {"done": False, "why_not": "this prober has no check"}
    assert c["predicted"]["learner_env_steps_per_s"] == pytest.approx(100.0)
    assert c["predicted"]["sampling_env_steps_per_s"] == pytest.approx(4000.0)
    assert c["predicted"]["env_steps_per_s"] == pytest.approx(100.0)
    assert c["grad_steps_per_env_step"] == c["update_ratio_target"] == 1.0
    assert profile["host"] is True and profile["sampling"]["workers"] == [1, 2, 4]
    # every worker count's grid holds num_envs that are multiples of it
    measured = {(w, n) for k, w, n in (x for x in fake.calls if x[0] == "sampling")}
    assert all(n % w == 0 for w, n in measured) and {w for w, _ in measured} == {1, 2, 4}
    assert {x[1] for x in fake.calls if x[0] == "update"} >= {256, 512}
    assert profile["retime_rounds"] >= 1  # the update points are timed again


def test_sampling_bound_takes_workers_and_envs_where_they_pay(monkeypatch):
    # updates nearly free; sampling grows with workers up to 2 and envs up to 32
    chosen, profile, _ = run(monkeypatch=monkeypatch, u_unit=1e9, u_knee=2**20, w_knee=2)
    c = profile["choice"]
    assert c["bound"] == "sampling"
    assert (chosen.host_workers, chosen.num_envs) == (2, 32)
    assert chosen.grad_steps == chosen.num_envs  # one gradient step per env step kept
    assert c["predicted"]["wall_s"] < 0.5 * c["predicted"]["base_wall_s"]


def test_choose_host_is_the_min_of_the_two_sides():
    cfg = RunConfig(env=PENDULUM, total_steps=10_000)
    sampling = pts({(1, 8): 800.0, (1, 32): 3000.0, (2, 8): 1500.0, (2, 32): 1600.0})
    update = [Point(256, 256 * 1000.0, 1.0, 0.01, 256)]  # 1 ms per step: 1000 env steps/s
    c = choose_host(cfg, sampling, update)
    by = {(x["host_workers"], x["num_envs"]): x for x in c["candidates"]}
    assert by[1, 8]["env_steps_per_s"] == pytest.approx(800.0)  # sampling-bound
    assert by[1, 8]["bound"] == "sampling"
    assert by[1, 32]["env_steps_per_s"] == pytest.approx(1000.0)  # learner-bound
    assert by[1, 32]["bound"] == "learner" and by[1, 32]["grad_steps"] == 32
    # 1x32, 2x8 and 2x32 all reach the learner's 1000 (a tie within 5%): the nearest to
    # the configured 1 x 8 wins, by |log n/n0| + |log W/W0|: 2x8 (log 2) before 1x32 (log 4)
    assert (c["host_workers"], c["num_envs"]) == (2, 8)
    pinned = choose_host(cfg, sampling, update, pinned={"host_workers"})
    assert (pinned["host_workers"], pinned["num_envs"]) == (1, 32)


def test_pinned_workers_and_envs(monkeypatch):
    cfg = RunConfig(env=PENDULUM, total_steps=20_000, host_workers=2, num_envs=16)
    chosen, profile, fake = run(cfg, pinned={"host_workers", "num_envs"}, monkeypatch=monkeypatch)
    assert (chosen.host_workers, chosen.num_envs) == (2, 16)
    assert {(w, n) for _, w, n in (x for x in fake.calls if x[0] == "sampling")} == {(2, 16)}
    assert "pinned" in profile["sampling"]["stop"]
    assert pinned_fields(["--host-workers", "2", "--batch-size", "64"]) == {
        "host_workers",
        "batch_size",
    }


def test_the_budget_bounds_the_host_grids(monkeypatch):
    # 2 s per point, 10 s: the first point of each of 2 worker grids and of the batches,
    # then what sampling's share and the batches' leave
    _, profile, fake = run(budget=10.0, cost_s=2.0, cpus=2, monkeypatch=monkeypatch)
    assert profile["elapsed_s"] <= 10.0 and not profile["over_budget"]
    assert fake.calls[:3] == [("sampling", 1, 8), ("sampling", 2, 8), ("update", 256)]
    assert profile["update"]["stop"] == "budget"


def test_host_profile_round_trip_and_cli(tmp_path, monkeypatch, capsys):
    chosen, _, _ = run(out=tmp_path, monkeypatch=monkeypatch, u_unit=1e9, w_knee=2)
    path = tmp_path / "autotune.json"
    assert (tmp_path / "autotune.png").stat().st_size > 0
    md = (tmp_path / "autotune.md").read_text()
    assert "host_workers 2" in md and "bound by the sampling" in md
    base = RunConfig(env=PENDULUM, total_steps=20_000)
    assert autotune.apply_profile(base, path) == chosen
    # a pinned worker count re-runs the rule on the stored rates around it
    one = autotune.apply_profile(base, path, pinned={"host_workers"})
    assert one.host_workers == 1 and one.num_envs == 32
    # through the CLI (the prober replaced by the fake one)
    clock = FakeClock()
    monkeypatch.setattr(autotune, "HostProber", lambda plan, limit: FakeHostProber(clock))
    out = tmp_path / "cli"
    argv = ["autotune", "--env", PENDULUM, "--out", str(out), "--host-workers", "2"]
    assert main(argv) == 0
    data = json.loads((out / "autotune.json").read_text())
    assert data["host"] and data["choice"]["host_workers"] == 2
    assert data["choice"]["pinned"] == ["host_workers"]
    assert "jaxspreeze train --profile" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="measured for sac on gymnasium/Pendulum-v1"):
        autotune.apply_profile(RunConfig(), out / "autotune.json")


@pytest.mark.slow  # a real probe; the host probe's rule is tested on stand-ins
def test_real_host_probe_on_gymnasium_pendulum(tmp_path):
    """The real probe, small budget: the worker pool and the learner are measured."""
    cfg = RunConfig(
        env=PENDULUM,
        total_steps=5_000,
        buffer_size=5_000,
        learning_starts=500,
        compile_cache="off",
        sac=SACConfig(hidden=(32, 32)),
    )
    chosen, profile = autotune.tune(
        cfg, budget_s=6.0, out_dir=tmp_path, pinned={"host_workers"}, say=lambda *a: None
    )
    s, u = profile["sampling"]["points"], profile["update"]["points"]
    assert s and u and all(p["workers"] == 1 and p["rate"] > 0 for p in s)
    assert all(p["compile_s"] > 0 and len(p["rates"]) >= probes.REPS for p in s + u)
    assert chosen.num_envs % chosen.host_workers == 0
    c = profile["choice"]
    assert c["predicted"]["env_steps_per_s"] == pytest.approx(
        min(c["predicted"]["sampling_env_steps_per_s"], c["predicted"]["learner_env_steps_per_s"])
    )
    assert autotune.apply_profile(cfg, tmp_path / "autotune.json") == chosen
    assert not [t for t in threading.enumerate() if t.name.startswith("jaxspreeze-worker")]
    check = profile["check"]  # a short run at the choice, when the budget holds it
    assert check["done"] or check["why_not"].startswith("budget")


@pytest.mark.slow
def test_the_check_runs_the_host_schedule_at_the_choice(tmp_path):
    cfg = RunConfig(env=PENDULUM, total_steps=5_000, sac=SACConfig(hidden=(32, 32)))
    _, profile = autotune.tune(cfg, budget_s=90.0, out_dir=tmp_path, say=lambda *a: None)
    check = profile["check"]
    assert check["done"] and check["env_steps_per_s"] > 0 and check["seconds"] >= 1.0
    assert check["ratio"] == pytest.approx(
        check["env_steps_per_s"] / profile["choice"]["predicted"]["env_steps_per_s"]
    )
    assert "check: a " in (tmp_path / "autotune.md").read_text()
    assert not [t for t in threading.enumerate() if t.name.startswith("jaxspreeze-worker")]


@pytest.mark.slow
def test_train_autotune_on_a_host_env(tmp_path, capsys):
    """`jaxspreeze train --autotune` on gymnasium's Pendulum: probe, then train with it."""
    argv = [
        "train", "--autotune", "--autotune-budget-s", "20", "--env", PENDULUM,
        "--total-steps", "3000", "--learning-starts", "500", "--sac.hidden", "64", "64",
        "--eval-episodes", "2", "--logdir", str(tmp_path), "--run-name", "tuned",
        "--sinks", "jsonl",
    ]  # fmt: skip
    assert main(argv) == 0
    run_dir = tmp_path / "tuned"
    summary = json.loads((run_dir / "summary.json").read_text())
    tuned = summary["autotune"]
    assert tuned["host_workers"] >= 1 and tuned["choice"]["bound"] in ("sampling", "learner")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["host_workers"] == tuned["host_workers"]
    assert (run_dir / "autotune.png").stat().st_size > 0
    assert summary["final_eval_return"] is not None


def test_worker_grid_and_plan():
    cfg = RunConfig(env=PENDULUM, total_steps=20_000)
    assert host.worker_grid(cfg, set(), cpus=6) == [1, 2, 4]
    assert host.worker_grid(cfg, set(), cpus=64) == [1, 2, 4, 8, 16]
    grids, batches = host.plan_host_grids(cfg, set(), cpus=16)
    assert grids[1] == [8, 32, 128, 256] and grids[16] == [32, 128, 256] and batches[0] == 256
    pinned = host.plan_host_grids(cfg.replace(num_envs=6), {"num_envs"}, cpus=4)[0]
    assert pinned == {1: [6], 2: [6]}


def test_on_policy_host_autotune_is_refused_before_any_probe(monkeypatch):
    with pytest.raises(ConfigError) as e:
        run(RunConfig(algo="ppo", env=PENDULUM), monkeypatch=monkeypatch)
    assert e.value.field == "algo"


@pytest.mark.slow
def test_real_host_probe_on_envpool(tmp_path):
    pytest.importorskip("envpool")
    cfg = RunConfig(
        env="envpool/Pendulum-v1",
        total_steps=5_000,
        buffer_size=5_000,
        learning_starts=500,
        sac=SACConfig(hidden=(32, 32)),
    )
    chosen, profile = autotune.tune(cfg, budget_s=10.0, out_dir=tmp_path, say=lambda *a: None)
    assert profile["host"] and profile["sampling"]["points"][0]["rate"] > 0
    assert chosen.num_envs % chosen.host_workers == 0
    assert (tmp_path / "autotune.md").read_text().startswith("### autotune: sac on envpool/")
