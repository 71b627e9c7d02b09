"""Shared test fixtures: tiny configs that compile and run fast on 2 CPU cores."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# compiled programs are not kept across tests (nor the CLI runs they start): tests patch
# module-level functions that a kept program would not see; tests/test_programs.py turns
# the program cache on where it is the subject
os.environ["JAXSPREEZE_PROGRAM_CACHE"] = "off"


@pytest.fixture
def tiny_cfg(tmp_path):
    """A SAC run small enough to compile and train in seconds."""
    from jaxspreeze.algos.sac import SACConfig
    from jaxspreeze.config import RunConfig

    return RunConfig(
        total_steps=600,
        num_envs=4,
        grad_steps=2,
        batch_size=32,
        buffer_size=2_000,
        learning_starts=200,
        chunk_iterations=50,
        eval_episodes=2,
        logdir=str(tmp_path),
        run_name="tiny",
        sinks=("jsonl",),
        sac=SACConfig(hidden=(32, 32)),
    )
