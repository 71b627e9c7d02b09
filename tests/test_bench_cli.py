"""`jaxspreeze bench`: selection, options, the throughput record and the report."""

from __future__ import annotations

import json

import pytest

from jaxspreeze.bench import cases, report, suite
from jaxspreeze.bench.record import Workload, throughput_record, time_workload, with_reference
from jaxspreeze.cli import main

RECORD_FIELDS = (
    "env_steps_per_s",
    "update_samples_per_s",
    "grad_steps_per_s",
    "replay_ratio",
    "policy_lag",
    "compile_s",
    "hardware",
    "versions",
)


def test_list_quick_and_full(capsys) -> None:
    """--list prints the selection; full adds trainers and end-to-end cases."""
    assert main(["bench", "--list", "--scale", "cpu"]) == 0
    quick = capsys.readouterr().out.split()
    assert main(["bench", "--list", "--full", "--scale", "cpu"]) == 0
    full = capsys.readouterr().out.split()
    assert set(quick) < set(full)
    kinds = {c.split("-")[0] for c in full}
    kinds_all = {"sampling", "update", "chunk", "suite", "memory", "trainer", "end_to_end"}
    assert kinds == kinds_all | {"learning"}
    for env in ("gymnax/Pendulum-v1", "gymnax/CartPole-v1", "brax/ant"):
        assert any(env in c for c in quick)


def test_gpu_scale_reaches_65536() -> None:
    """The GPU sizes go to at least 65,536 envs and samples per batch."""
    full = suite.selection(full=True, scale="gpu")
    assert max(c.args.get("num_envs", 0) for c in full) >= 65_536
    assert max(c.args.get("batch_size", 0) for c in full) >= 65_536


def test_bad_option_exits_2(capsys) -> None:
    """An unknown option or a bad value is a usage error."""
    assert main(["bench", "--no-such-flag"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-such-flag" in err[0], err  # tyro's message, on one line
    assert main(["bench", "--rounds", "0"]) == 2
    assert "--rounds" in capsys.readouterr().err


def test_record_has_the_throughput_fields_and_ratio() -> None:
    """Rates are work / seconds; the ratio is jaxspreeze / reference of the headline."""
    w = Workload("x", lambda: None, env_steps=1000, update_samples=4000, compile_s=1.5)
    w.grad_steps, w.policy_lag, w.params = {"critic": 4, "actor": 2}, 2.0, {"kind": "chunk"}
    rec = throughput_record(w, 0.5)
    for f in RECORD_FIELDS:
        assert f in rec
    assert rec["env_steps_per_s"] == 2000
    assert rec["replay_ratio"] == 4.0
    assert rec["grad_steps_per_s"] == {"critic": 8.0, "actor": 4.0}
    ref = throughput_record(Workload("r", lambda: None, env_steps=1000, params=w.params), 1.0)
    both = with_reference(rec, ref)
    assert both["ratio_vs_reference"] == pytest.approx(2.0)
    assert both["ratio_metric"] == "env_steps_per_s"


def test_report_writes_json_and_markdown(tmp_path) -> None:
    """bench.json round-trips; bench.md states command, hardware, date and the ratio."""
    rec = {"id": "update-sac-256", "kind": "update", "update_samples_per_s": 5e4}
    rec = with_reference(rec, {"update_samples_per_s": 4e4})
    skipped = {"id": "update-ppo-256", "kind": "update", "skipped": "not implemented"}
    out = {
        "command": "jaxspreeze bench",
        "selection": "quick",
        "date": "2026-01-01 00:00 UTC",
        "hardware": {"backend": "cpu", "device_count": 1, "devices": ["cpu"], "cpu_count": 2},
        "versions": {"jax": "0"},
        "matmul_peak_flops_per_s": 1e11,
        "rounds": 3,
        "warmup": 1,
        "records": [rec, skipped],
    }
    js, md = report.write(out, tmp_path)
    assert json.loads(js.read_text())["records"][0]["ratio_vs_reference"] == pytest.approx(1.25)
    text = md.read_text()
    assert "`jaxspreeze bench`" in text and "2026-01-01" in text and "cpu" in text
    assert "| 1.25 |" in text and "skipped: not implemented" in text
    assert "update-sac-256" in report.table([rec])


def test_workload_compiles_before_timing() -> None:
    """The compile happens in prepare; run() then reuses donated state call after call."""
    w = cases.sampling("gymnax/Pendulum-v1", 2, steps=4, hidden=(8,))
    assert w.compile_s > 0 and w.env_steps == 8
    times = time_workload(w, rounds=2, warmup=1)
    assert len(times) == 2 and all(t > 0 for t in times)
