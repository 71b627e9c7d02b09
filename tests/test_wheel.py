"""An installed wheel carries what its commands read: ``jaxspreeze score`` finds its rows'
presets (package data) away from the source tree.

The wheel is built here (no build isolation: the test extra installs setuptools) and
installed into a folder of its own, which a fresh interpreter puts first on its path; the
commands run from another folder, so nothing of the checkout is found by a relative path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    build = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp / "dist").glob("jaxspreeze-*.whl")
    target = tmp / "site"
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return target


def _run(installed: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed), "COLUMNS": "200"}
    code = "import sys, jaxspreeze; print(jaxspreeze.__file__); sys.exit(__import__('jaxspreeze.cli', fromlist=['main']).main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def test_score_runs_from_an_installed_wheel(installed: Path, tmp_path: Path) -> None:
    help_ = _run(installed, tmp_path, "score", "--help")
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.splitlines()[0].startswith(str(installed))  # the wheel's copy
    assert "--rows" in help_.stdout
    rows = _run(installed, tmp_path, "score", "--list")
    assert rows.returncode == 0, rows.stderr
    # every row's preset is read from the installed package (sac-Pendulum-v1: SAC's preset)
    assert "sac-Pendulum-v1" in rows.stdout and "ppo-CartPole-v1" in rows.stdout
    assert (installed / "jaxspreeze" / "presets" / "sac_pendulum.toml").is_file()


@pytest.mark.slow
def test_a_tiny_row_from_an_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """One real side of one row, its run in a child process that imports the wheel's copy."""
    import json

    out = tmp_path / "score"
    run = _run(
        installed, tmp_path, "score", "--rows", "ppo-CartPole-v1", "--sides", "jaxspreeze",
        "--seeds", "1", "--no-warm", "--total-steps", "4096", "--out", str(out),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "score.json").read_text())
    assert "ppo-CartPole-v1" in json.dumps(report)
