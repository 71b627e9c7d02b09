"""Update step of SAC, TD3 and PPO (2x256 MLPs) over batch sizes; FLOP/s vs matmul peak.

An algorithm whose ``make()`` does not exist yet is skipped with the reason.
"""

from __future__ import annotations

import pytest
from harness import bench_case, ids, selected

pytestmark = pytest.mark.benchmark

CASES = selected("update")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_update(benchmark, case, refs) -> None:
    """Update samples/s (batch x gradient steps per second) and the FLOP/s fraction."""
    record = bench_case(benchmark, case, refs)
    assert record["update_samples_per_s"] > 0
    assert record["grad_steps_per_s"]["critic"] > 0
    if case.args["algo"] == "sac":
        assert record["reference"]["update_samples_per_s"] > 0
