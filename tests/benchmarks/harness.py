"""Helpers of the benchmark tests: case selection and timing a case with its reference.

(A module of its own, not conftest.py: ``tests/conftest.py`` already owns that name.)
"""

from __future__ import annotations

import os
import statistics
from types import ModuleType

import pytest

from jaxspreeze.bench import cases, suite
from jaxspreeze.bench.record import (
    matmul_peak_flops,
    throughput_record,
    time_pair,
    time_workload,
    with_reference,
)

ROUNDS = int(os.environ.get("JAXSPREEZE_BENCH_ROUNDS", "5"))
WARMUP = int(os.environ.get("JAXSPREEZE_BENCH_WARMUP", "1"))


def selected(kind: str) -> list[suite.Case]:
    """The full selection's cases of one kind, at this machine's scale."""
    scale = os.environ.get("JAXSPREEZE_BENCH_SCALE") or None
    return [c for c in suite.selection(full=True, scale=scale) if c.kind == kind]


def ids(cs: list[suite.Case]) -> list[str]:
    """pytest ids of cases."""
    return [c.id.replace("/", "_") for c in cs]


def bench_case(benchmark, case: suite.Case, refs: ModuleType | None) -> dict:
    """Time ``case`` with pytest-benchmark, then its reference; fill ``extra_info``."""
    try:
        w = suite.prepare(case)
    except cases.Unavailable as e:
        pytest.skip(str(e))
    peak = matmul_peak_flops(fresh=True) if case.kind == "update" else None
    benchmark.pedantic(w.run, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:  # timed by pytest-benchmark
        times = list(stats.stats.data)
    else:  # --benchmark-disable: the call ran once untimed; time it here
        times = time_workload(w, 1, 0)
    record = throughput_record(w, statistics.median(times), peak, times)
    ref = suite.prepare_reference(case, refs, w)
    if ref is not None:
        # the ratio comes from interleaved rounds of both, so a shared machine's load
        # hits both alike; the headline rate stays pytest-benchmark's
        pair, ref_times = time_pair(w, ref, ROUNDS, WARMUP)
        reference = throughput_record(ref, statistics.median(ref_times), peak, ref_times)
        paired = with_reference(throughput_record(w, statistics.median(pair), peak), reference)
        record = {
            **record,
            "reference": paired["reference"],
            "ratio_metric": paired["ratio_metric"],
            "ratio_vs_reference": paired["ratio_vs_reference"],
            "ratio_timing": "interleaved rounds",
        }
    record = {"id": case.id, **record}
    benchmark.extra_info.update(record)
    return record
