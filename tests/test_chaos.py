"""Faults at random (slow): a run killed with SIGKILL at random moments and resumed each
time ends bitwise where the uninterrupted run ends (experiments/chaos.py; its committed
result, 10 kills and a 2-process run, is experiments/results/chaos_cpu.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a reference run and several killed and resumed attempts

CHAOS = Path(__file__).resolve().parents[1] / "experiments" / "chaos.py"


def test_a_run_killed_at_random_and_resumed_ends_bitwise_as_the_uninterrupted(tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(CHAOS), "--kills", "3", "--seed", "5", "--total-steps", "3000",
         "--checkpoint-every", "600", "--eval-every", "900", "--logdir", str(tmp_path),
         "--json", str(out)],
        env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["kills"] >= 1, result
    assert result["all_same"], result["same"]
    assert proc.returncode == 0


@pytest.mark.parametrize(
    "population",
    [
        ["--sweep", "sac.actor_lr=0.001,0.0003", "--pbt", "--pbt-interval", "704"],
        ["--stop-at-return", "-1100"],
    ],
    ids=["pbt", "stop-at-return"],
)
def test_a_population_or_a_stopped_run_killed_at_random_keeps_what_users_keep(population, tmp_path):
    """A PBT sweep (and a run stopped at a return) killed and resumed: the best policies,
    the members' files, pbt.jsonl and the program cache end as the uninterrupted run's."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(CHAOS), "--kills", "2", "--seed", "3", "--total-steps", "2400",
         "--checkpoint-every", "600", "--eval-every", "600", "--logdir", str(tmp_path),
         "--json", str(out), *population],
        env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["kills"] >= 1, result
    assert result["all_same"], result["same"]
    assert any(k.startswith("policy files") for k in result["same"])
