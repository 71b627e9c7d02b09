"""Sampling with the policy in the loop: jaxspreeze's collect vs a hand-fused scan."""

from __future__ import annotations

import pytest
from harness import bench_case, ids, selected

pytestmark = pytest.mark.benchmark

CASES = selected("sampling")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_sampling(benchmark, case, refs) -> None:
    """Env steps/s of T steps x num_envs, 2x256 policy acting, vs the bare reference."""
    record = bench_case(benchmark, case, refs)
    assert record["env_steps_per_s"] > 0
    assert record["reference"]["env_steps_per_s"] > 0
