"""experiments/gpu_bench.sh's dry runs: every stage at tiny sizes on the CPU
(``GPU_BENCH_DRY=1``), so that a lent GPU's minutes are never spent on a broken script.

Each stage runs the script as the GPU machine would (a fresh process, the same commands,
only the sizes cut) and must exit 0 and write the result files the real run writes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "gpu_bench.sh"

# stage -> the files (under RESULTS_DIR) its real run writes
STAGES = {
    "autotune": ("autotune/autotune.json", "autotune/autotune.md", "autotune/autotune.log"),
    "learning": ("learning/bench.json", "learning/bench.md", "learning/bench.log"),
    "bench": ("bench.json", "bench.md", "bench.log"),
    "score": ("score/score.json", "score/score.md", "score/score.log"),
    # fast: the runs' config.json (the presets load and plan with the stage's flags);
    # Playground's and brax humanoid's compile alone can outlast a dry run's time limit on
    # a busy 2-core CPU, which the stage tolerates as the GPU run does (rc 124)
    "fast": (
        "fast/fast.md",
        "fast/fasttd3_cheetah_run_gpu/config.json",
        "fast/fasttd3_brax_humanoid_gpu/config.json",
    ),
    "minatar": (
        "minatar/minatar.md",
        "minatar/ppo_breakout_minatar_gpu/summary.json",
        "minatar/ppo_space_invaders_minatar_gpu/summary.json",
        "minatar/pqn_breakout_minatar_gpu/summary.json",
    ),
    # suites: Craftax's PPO preset cut to a few thousand env steps, and one Navix row
    "suites": (
        "suites/suites.md",
        "suites/ppo_craftax_classic_symbolic_gpu/summary.json",
        "suites/bench.json",
        "suites/bench.md",
        "suites/bench.log",
    ),
    "population": (
        "population/population.md",
        "population/sac-2/summary.json",
        "population/td3-2/summary.json",
    ),
    "scaling": ("scaling/scaling.md", "scaling/devices-1/summary.json"),
}


def dry_run(stage: str, out: Path) -> subprocess.CompletedProcess[str]:
    """Run one stage of the script dry, with this interpreter, in a fresh process."""
    env = {**os.environ, "GPU_BENCH_DRY": "1", "PYTHON": sys.executable}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), stage],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )


@pytest.mark.slow  # each stage compiles and trains in fresh processes (about a minute each)
@pytest.mark.parametrize("stage", list(STAGES))
def test_stage_dry_run_writes_its_results(stage: str, tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    if stage == "suites" and importlib.util.find_spec("craftax") is None:
        pytest.skip('craftax is not installed: pip install "jaxspreeze[craftax]"')
    proc = dry_run(stage, tmp_path / "results")
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert "GPU_BENCH_DRY=1" in proc.stdout
    for name in STAGES[stage]:
        path = tmp_path / "results" / name
        assert path.is_file() and path.stat().st_size > 0, f"{name} missing\n{tail}"
    for js in (tmp_path / "results").rglob("*.json"):
        json.loads(js.read_text())  # every JSON result is whole
    # the dry run never installs wheels nor asks for a GPU
    assert not (tmp_path / "results" / "nvidia-smi.txt").exists()


def test_dry_mode_is_documented_and_covers_every_stage() -> None:
    """Every stage the script's header lists has a dry run here (a new stage needs one)."""
    text = SCRIPT.read_text()
    assert "GPU_BENCH_DRY" in text
    for stage in STAGES:
        assert f"has {stage}" in text, stage
    stages = {
        line.split()[2].rstrip(";") for line in text.splitlines() if line.startswith("if has ")
    }
    assert stages == set(STAGES), stages ^ set(STAGES)
