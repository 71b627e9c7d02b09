"""Shared plumbing of the pytest-benchmark suite (opt-in: ``-m benchmark``).

Run it with::

    pytest -n 0 -m benchmark tests/benchmarks --benchmark-enable --benchmark-json out.json

Each case is the workload ``jaxspreeze bench`` measures (jaxspreeze.bench.suite): it is
compiled before timing, pytest-benchmark times ``rounds`` calls after ``warmup`` ones
(each call blocks until its results are ready), then jaxspreeze and the bare reference
are timed in interleaved rounds on the same work in this process for their ratio, and
the throughput record (with the reference's record and the jaxspreeze / reference
ratio) goes into ``benchmark.extra_info``.

Environment: ``JAXSPREEZE_BENCH_SCALE=cpu|gpu`` picks the sizes (default: from the JAX
backend), ``JAXSPREEZE_BENCH_ROUNDS`` / ``JAXSPREEZE_BENCH_WARMUP`` the rounds.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from jaxspreeze.bench import references


def pytest_collection_finish(session: pytest.Session) -> None:
    """Asking for ``--benchmark-json`` (or saving) means timing: undo --benchmark-disable.

    pyproject's addopts pass ``--benchmark-disable`` so that a stray benchmark in the
    default run would run once, untimed; a run that writes results wants them timed.
    (After collection: pytest-benchmark's session exists by then, and the fixture reads
    ``disabled`` only when a test starts.)
    """
    config = session.config
    bench = getattr(config, "_benchmarksession", None)
    wants = config.getoption("benchmark_json", None) or config.getoption("benchmark_save", None)
    if bench is not None and wants and bench.disabled and not bench.xdist_warning:
        bench.disabled = False


@pytest.fixture(scope="session")
def refs() -> ModuleType:
    """The bare references (jaxspreeze/bench/references.py)."""
    return references
