"""A whole training chunk (collect + store + update, K iterations) of SAC and PPO."""

from __future__ import annotations

import pytest
from harness import bench_case, ids, selected

pytestmark = pytest.mark.benchmark

CASES = selected("chunk")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_chunk(benchmark, case) -> None:
    """Env steps/s and update samples/s of the fused chunk; replay ratio; policy lag."""
    record = bench_case(benchmark, case, None)
    assert record["env_steps_per_s"] > 0
    assert record["replay_ratio"] > 0
    assert record["policy_lag"] is not None
