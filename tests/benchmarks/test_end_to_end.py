"""End to end: wall time to the return threshold, and brax's own trainers side by side.

- SAC to -200 on gymnax/Pendulum-v1 and PPO to 475 on gymnax/CartPole-v1: wall time from
  the end of compilation to the evaluation that reaches the threshold; compile apart.
- brax/ant: jaxspreeze's chunk vs ``brax.training.agents.sac`` / ``ppo`` at the same
  num_envs, batch and update ratio (env steps/s after compilation).
"""

from __future__ import annotations

import pytest
from harness import ids, selected

from jaxspreeze.bench import suite

pytestmark = pytest.mark.benchmark

E2E = selected("end_to_end")
TRAINERS = selected("trainer")


@pytest.mark.parametrize("case", E2E, ids=ids(E2E))
def test_time_to_threshold(benchmark, case) -> None:
    """One training run to the threshold (one round: a run is its own measurement)."""
    out: list[dict] = []
    benchmark.pedantic(lambda: out.append(suite.measure(case)), rounds=1, iterations=1)
    record = out[0]
    if record.get("skipped"):
        pytest.skip(record["skipped"])
    benchmark.extra_info.update(record)
    assert record["compile_s"] > 0
    assert record["env_steps_per_s"] > 0


@pytest.mark.parametrize("case", TRAINERS, ids=ids(TRAINERS))
def test_vs_brax_trainer(benchmark, case, refs) -> None:
    """jaxspreeze's chunk alternating with brax's trainer epochs of the same env steps."""
    out: list[dict] = []
    benchmark.pedantic(lambda: out.append(suite.measure(case, refs)), rounds=1, iterations=1)
    record = out[0]
    benchmark.extra_info.update(record)
    assert record["env_steps_per_s"] > 0
    assert not record["reference"].get("error"), record["reference"]
    assert record["reference"]["env_steps_per_s"] > 0
