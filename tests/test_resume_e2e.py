"""End to end (CLI): SIGINT stops at a chunk boundary with a checkpoint; --resume finishes.

Marked slow (two trainings in subprocesses); skipped while ``train(cfg, resume=...)`` /
``jaxspreeze train --resume`` do not exist.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jaxspreeze.store import checkpoint

pytestmark = pytest.mark.slow  # two CLI trainings in subprocesses

FLAGS = [
    "--total-steps", "400000", "--num-envs", "2", "--grad-steps", "1", "--batch-size", "8",
    "--buffer-size", "256", "--learning-starts", "8", "--chunk-iterations", "20",
    "--sac.hidden", "8", "8", "--sinks", "jsonl", "--eval-episodes", "2",
]  # fmt: skip


def test_sigint_checkpoints_and_resume_finishes(tmp_path):
    """SIGINT: exit 0, a line naming --resume, a complete checkpoint; resuming it finishes."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "jaxspreeze", "train", *FLAGS]
    cmd += ["--logdir", str(tmp_path), "--run-name", "r"]
    run_dir = tmp_path / "r"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no chunk record within 600 s"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "--resume" in out + err
    path = checkpoint.latest(run_dir)
    assert path is not None
    manifest = checkpoint.read_manifest(path)
    assert 0 < manifest["env_steps"] < 400000

    # resume with a short total so it finishes quickly
    total = manifest["env_steps"] + 80
    cmd = [sys.executable, "-m", "jaxspreeze", "train", "--resume", str(run_dir)]
    cmd += ["--total-steps", str(total)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= total
