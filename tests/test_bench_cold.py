"""The bench's cold-start group: its cases, their rows, and one tiny job cold then warm."""

from __future__ import annotations

import pytest

from jaxspreeze.bench import cold, report, suite


def test_the_cold_group_holds_imports_help_and_each_job_cold_then_warm():
    ids = [c.id for c in suite.cold_selection()]
    assert ids[:2] == ["cold-imports", "cold-help"]
    for job in cold.JOBS:
        assert ids.index(f"cold-{job}-cold") + 1 == ids.index(f"cold-{job}-warm")
    assert len(set(ids)) == len(ids)
    assert all(c.args["total_steps"] == 2000 for c in suite.cold_selection(2000)[2:])


def test_a_cold_row_reads_wall_seconds_with_the_cpu_beside():
    rec = {"id": "cold-sac-pendulum-cold", "kind": "cold", "wall_s": 31.5, "cpu_s": 40.2,
           "compile_all_s": 12.0, "command_to_first_chunk_s": 15.0, "load_1min": 2.0}  # fmt: skip
    line = report.row(rec)
    assert "31.5" in line and "s wall" in line
    assert "cpu 40.2 s" in line and "first chunk at 15 s" in line


@pytest.mark.slow  # spawns two training processes
def test_a_warm_job_loads_every_program_its_cold_run_kept(monkeypatch):
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "on")  # a user's default (tests: off)
    args = {"what": "sac-pendulum", "cache": "warm", "total_steps": 1008}
    rec = cold.measure(args, rounds=1)
    (run,) = rec["runs"]
    assert rec["wall_s"] > 0 and rec["cpu_s"] > 0
    assert run["programs_compiled"] == []
    assert {"init", "warmup", "fused_chunk", "evaluate"} <= set(run["programs_loaded"])
