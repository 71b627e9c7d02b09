"""Autotune's output pinned: the grids walked, the choice, the profile and its table.

With fake probers (known rates, a clock that moves only when a probe takes time) and a
fixed hardware description, ``autotune.tune`` is deterministic: every scenario below gives
the same profile (every number, to the bit), the same lines said and the same Markdown
table each time. ``tests/autotune_golden.json`` holds them as the code gave them when
this test was written; a change to autotune that should not change its behaviour must
leave them equal. (A deliberate change rewrites the file: ``python
tests/test_autotune_golden.py --write``, and says why.)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_autotune import FakeClock, FakeProber

from jaxspreeze import autotune
from jaxspreeze.autotune import probes
from jaxspreeze.autotune.choose import Point, choose, choose_host
from jaxspreeze.autotune.report import table
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig

GOLDEN = Path(__file__).with_name("autotune_golden.json")
HARDWARE = {"backend": "cpu", "devices": ["cpu"], "device_count": 1, "cpu_count": 4}
VOLATILE = ("created", "versions")  # the clock's date and the installed versions
PENDULUM = "gymnasium/Pendulum-v1"


class DeviceProber(FakeProber):
    """FakeProber's rates, with sampling bytes, spread repeats and a retime that takes time."""

    def sampling_bytes(self, num_envs: int) -> int:
        return 3 * num_envs

    def _point(self, kind: str, value: int, rate: float, nbytes: int) -> Point:
        self.clock.t += self.cost_s
        rates = [rate * (1 + 0.01 * i) for i in range(probes.REPS)]
        return Point(value, rate, 0.8 * self.cost_s, 0.001 * value, value, rates, nbytes)

    def retime(self, kind: str, value: int) -> list[float]:
        self.clock.t += 0.1
        return [(self.s if kind == "sampling" else self.u)(value) * 0.97] * probes.REPS


class HostProber(DeviceProber):
    """S(W, n) = s_unit min(n, s_knee) min(W, w_knee); with ``check``, a fake ``host_run``."""

    def __init__(self, clock: FakeClock, w_knee: int = 1, check: bool = False, **kw: Any) -> None:
        kw = {"s_knee": 32, "u_knee": 256, "s_unit": 500.0, **kw}
        super().__init__(clock, **kw)
        self.w_knee = w_knee
        if check:
            self.host_run = self._host_run

    def host_sampling(self, workers: int, num_envs: int) -> Point:
        self.clock.t += self.cost_s
        rate = self.s(num_envs) * min(workers, self.w_knee)
        return Point(num_envs, rate, 0.5, 0.001, num_envs, [rate] * 5, 7, workers=workers)

    def retime(self, kind: str, value: int) -> list[float]:
        assert kind == "update"
        return super().retime(kind, value)

    def _host_run(self, run: RunConfig, iteration_s: float) -> dict[str, Any]:
        self.clock.t += 4.0
        rate = run.num_envs * run.rollout_steps / iteration_s * 0.9
        return {"env_steps_per_s": rate, "seconds": 3.0, "compile_s": 1.5, "chunk_iterations": 2}


# name: (config fields, pinned, prober class, prober arguments, tune arguments)
SCENARIOS: dict[str, tuple[dict[str, Any], set[str], type, dict[str, Any], dict[str, Any]]] = {
    "sac_update_bound": ({"total_steps": 20_000}, set(), DeviceProber, {}, {}),
    "sac_sampling_bound": ({"total_steps": 20_000}, set(), DeviceProber, {"u_unit": 1e9}, {}),
    "sac_cpu_like": ({"total_steps": 20_000}, set(), DeviceProber, {"u_knee": 256}, {}),
    "td3_replay_ratio": (
        {"algo": "td3", "total_steps": 20_000, "replay_ratio": 128.0},
        set(),
        DeviceProber,
        {"u_unit": 1e9},
        {},
    ),
    "ppo": ({"algo": "ppo", "total_steps": 400_000}, set(), DeviceProber, {"s_unit": 1e2}, {}),
    "sac_pinned": (
        {"num_envs": 16, "chunk_iterations": 7, "total_steps": 20_000},
        {"num_envs", "chunk_iterations"},
        DeviceProber,
        {},
        {},
    ),
    "sac_pinned_grad_steps": (
        {"grad_steps": 2, "total_steps": 20_000},
        {"grad_steps"},
        DeviceProber,
        {},
        {},
    ),
    "sac_memory": (
        {"total_steps": 20_000},
        set(),
        DeviceProber,
        {"bytes_per_sample": 1000, "fixed_bytes": 1000},
        {"memory_limit": 600_000},
    ),
    "sac_budget": ({"total_steps": 20_000}, set(), DeviceProber, {"cost_s": 3.0}, {"budget": 12.0}),
    "sac_over_budget": (
        {"total_steps": 20_000},
        set(),
        DeviceProber,
        {"cost_s": 5.0},
        {"budget": 4.0},
    ),
    "host_learner_bound": ({"env": PENDULUM, "total_steps": 20_000}, set(), HostProber, {}, {}),
    "host_sampling_bound": (
        {"env": PENDULUM, "total_steps": 20_000},
        set(),
        HostProber,
        {"u_unit": 1e9, "u_knee": 2048, "w_knee": 2},
        {},
    ),
    "host_pinned": (
        {"env": PENDULUM, "total_steps": 20_000, "host_workers": 2, "num_envs": 16},
        {"host_workers", "num_envs"},
        HostProber,
        {},
        {},
    ),
    "host_pinned_batch": (
        {"env": PENDULUM, "total_steps": 20_000, "batch_size": 512},
        {"batch_size"},
        HostProber,
        {"w_knee": 2},
        {},
    ),
    "host_budget": (
        {"env": PENDULUM, "total_steps": 20_000},
        set(),
        HostProber,
        {"cost_s": 2.0},
        {"budget": 10.0, "cpus": 2},
    ),
    "host_check": (
        {"env": PENDULUM, "total_steps": 20_000},
        set(),
        HostProber,
        {"check": True, "u_unit": 1e6, "w_knee": 2},
        {"budget": 100.0},
    ),
    "host_check_over_budget": (
        {"env": PENDULUM, "total_steps": 20_000},
        set(),
        HostProber,
        {"check": True, "cost_s": 3.0},
        {"budget": 12.0},
    ),
}


def _plain(x: Any) -> Any:
    """``x`` as JSON gives it back (tuples as lists, int keys as strings)."""
    return json.loads(json.dumps(x))


def tune_scenario(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run one scenario: what was said, the chosen sizes, the profile and its table."""
    fields, pinned, prober_cls, prober_kw, tune_kw = SCENARIOS[name]
    tune_kw = dict(tune_kw)
    monkeypatch.setattr(devices, "describe_hardware", lambda: dict(HARDWARE))
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 0.5))
    monkeypatch.setattr(os, "cpu_count", lambda: tune_kw.pop("cpus", 4))
    clock = FakeClock()
    said: list[str] = []
    chosen, profile = autotune.tune(
        RunConfig(**fields),
        budget_s=tune_kw.pop("budget", 1000.0),
        pinned=pinned,
        say=said.append,
        prober=prober_cls(clock, **prober_kw),
        memory_limit=tune_kw.pop("memory_limit", 10**12),
        clock=clock,
    )
    assert not tune_kw
    profile = {k: v for k, v in profile.items() if k not in VOLATILE}
    sizes = ("num_envs", "batch_size", "grad_steps", "chunk_iterations", "host_workers")
    return _plain(
        {
            "said": said,
            "chosen": {k: getattr(chosen, k) for k in sizes},
            "profile": profile,
            "table": table(profile),
        }
    )


def _points(table: dict[Any, float]) -> list[Point]:
    out = []
    for key, rate in table.items():
        w, n = key if isinstance(key, tuple) else (0, key)
        out.append(Point(n, rate, 1.0, 0.01, n, [rate], 10 * n, workers=w))
    return out


def choices() -> dict[str, Any]:
    """The choice rule on synthetic tables: overlap (split placement) and host pairs."""
    cfg = RunConfig(total_steps=10_000)
    sampling = _points({8: 3e4, 32: 6e4, 128: 8e4})
    update = _points({256: 6_000.0, 512: 11_800.0, 1024: 6_000.0 * 4 / 1.08})
    host = RunConfig(env=PENDULUM, total_steps=10_000)
    h_sampling = _points({(1, 8): 800.0, (1, 32): 3000.0, (2, 8): 1500.0, (2, 32): 1600.0})
    h_update = _points({256: 256 * 1000.0, 512: 512 * 900.0})
    return _plain(
        {
            "split": choose(cfg, sampling, update, overlap=True),
            "memory": choose(cfg, sampling, update, memory_limit=12_000, fixed_bytes=100),
            "tolerance": choose(cfg, sampling, update, tolerance=0.3, batch_tolerance=0.5),
            "host": choose_host(host, h_sampling, h_update),
            "host_pinned": choose_host(host, h_sampling, h_update, pinned={"host_workers"}),
            "host_pinned_n": choose_host(
                host.replace(num_envs=16), h_sampling, h_update, pinned={"num_envs"}
            ),
        }
    )


# a stored profile applied to a run with pinned fields: the choice rule re-run around them
APPLIED = {
    "sac_update_bound": ({"total_steps": 20_000, "batch_size": 4096}, {"batch_size"}),
    "sac_sampling_bound": ({"total_steps": 20_000, "num_envs": 32}, {"num_envs"}),
    "host_sampling_bound": ({"env": PENDULUM, "total_steps": 20_000}, {"host_workers"}),
}


def applied(profiles: dict[str, Any], tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The sizes ``apply_profile`` gives for each of APPLIED's stored profiles."""
    monkeypatch.setattr(devices, "describe_hardware", lambda: dict(HARDWARE))
    out = {}
    for name, (fields, pinned) in APPLIED.items():
        path = tmp / f"{name}.json"
        path.write_text(json.dumps({**profiles[name], "version": autotune.VERSION}))
        cfg = autotune.apply_profile(RunConfig(**fields), path, pinned)
        sizes = ("num_envs", "batch_size", "grad_steps", "chunk_iterations", "host_workers")
        out[name] = {k: getattr(cfg, k) for k in sizes}
    return out


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def same(got: Any, want: Any) -> bool:
    """Equal as JSON text: the same values with their keys in the same order."""
    return json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_tune_gives_the_pinned_profile(name, monkeypatch):
    got, want = tune_scenario(name, monkeypatch), _golden()["tune"][name]
    for key in want:  # the lines said, the sizes, the profile, the table
        assert got[key] == want[key], key
        assert same(got[key], want[key]), f"{key}: the same values, in another order"


def test_the_choice_rule_gives_the_pinned_choices():
    got, want = choices(), _golden()["choose"]
    for key in want:
        assert got[key] == want[key], key
        assert same(got[key], want[key]), f"{key}: the same values, in another order"


def test_applied_profiles_give_the_pinned_sizes(tmp_path, monkeypatch):
    profiles = {name: g["profile"] for name, g in _golden()["tune"].items()}
    assert same(applied(profiles, tmp_path, monkeypatch), _golden()["apply"])


def _write() -> None:
    """Record the golden file from the code as it is (a deliberate change only)."""
    import tempfile

    out: dict[str, Any] = {"tune": {}, "choose": choices()}
    for name in sorted(SCENARIOS):
        with pytest.MonkeyPatch.context() as mp:
            out["tune"][name] = tune_scenario(name, mp)
    profiles = {name: g["profile"] for name, g in out["tune"].items()}
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        out["apply"] = applied(profiles, Path(tmp), mp)
    GOLDEN.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    _write()
