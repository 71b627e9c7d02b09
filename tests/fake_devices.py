"""Worker scripts run in a subprocess with fake CPU devices (``JAX_NUM_CPU_DEVICES``): the
split, host-split and data-parallel tests read the one JSON line of findings they print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# XLA's flags for every test process and its children (tests/conftest.py sets them): the
# options of `--compile quick` (jaxspreeze.core.programs.QUICK_OPTIONS) for every program,
# a jit a test calls itself included. Tests check behaviour, not the rate, and compile in
# half the CPU seconds (a test run's floats are quick programs' floats: last bits only)
QUICK_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=1"

# a launched process's own variables (test_multiprocess): a worker is one process alone
LAUNCH_VARIABLES = ("JAXSPREEZE_COORDINATOR", "JAXSPREEZE_NUM_PROCESSES", "JAXSPREEZE_PROCESS_ID")


def run_worker(
    worker: Path, *args: str, devices: int, timeout: float, cwd: Path | None = None
) -> dict:
    """Run ``python WORKER *args`` in one process with ``devices`` fake CPU devices; the
    JSON findings on its last line of stdout (its exit code must be 0)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(devices)}
    env["XLA_FLAGS"] = QUICK_XLA_FLAGS  # the parent's own flags are not a worker's
    for name in LAUNCH_VARIABLES:
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(worker), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
