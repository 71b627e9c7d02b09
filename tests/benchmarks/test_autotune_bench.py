"""Autotuned vs default config on the learning tasks: time to threshold and final return.

Each case is a ``jaxspreeze bench --full`` learning case (jaxspreeze/bench/learning.py):
``autotune.tune`` on this machine (nothing pinned), then the default config and the
autotuned one trained with the same env-step budget, 3 seeds each, interleaved chunk by
chunk, evaluated after every chunk. ``benchmark.extra_info`` holds both sides: sizes,
gradient steps per env step, wall time to the threshold (per seed and median), final
return per seed, compile time, the probe's own cost and the verdict.
``JAXSPREEZE_AUTOTUNE_BUDGET_S`` overrides the tasks' probe budgets.
"""

from __future__ import annotations

import os

import pytest

from jaxspreeze.bench import learning

pytestmark = pytest.mark.benchmark

KEYS = (
    "num_envs",
    "batch_size",
    "grad_steps",
    "chunk_iterations",
    "grad_steps_per_env_step",
    "wall_to_threshold_s",
    "wall_to_threshold_s_per_seed",
    "steady_to_threshold_s",
    "env_steps_to_threshold_per_seed",
    "reached",
    "final_return",
    "final_return_per_seed",
    "env_steps_per_s",
    "compile_s",
)


@pytest.mark.parametrize("name", list(learning.TASKS))
def test_autotuned_vs_default(benchmark, name: str) -> None:
    """Train the autotuned and the default config of one task; report both."""
    task = learning.TASKS[name]
    budget = os.environ.get("JAXSPREEZE_AUTOTUNE_BUDGET_S")
    out: dict = {}
    benchmark.pedantic(
        lambda: out.update(
            rec=learning.compare(task, autotune_budget_s=float(budget) if budget else None)
        ),
        rounds=1,
        iterations=1,
    )
    rec = out["rec"]
    default = rec["reference"]
    benchmark.extra_info.update(
        {
            "task": name,
            "threshold": task.threshold,
            "total_steps": task.total_steps,
            "autotune": rec["autotune"],
            "side_by_side": {k: {"autotuned": rec.get(k), "default": default.get(k)} for k in KEYS},
            "verdict": rec["verdict"],
            "hardware": rec["hardware"],
        }
    )
    for side in (rec, default):
        assert side["env_steps"] >= task.total_steps and side["env_steps_per_s"] > 0
    assert rec["grad_steps_per_env_step"] >= default["grad_steps_per_env_step"]
