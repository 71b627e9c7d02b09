"""Throughput benchmarks: workloads, the throughput record, and ``jaxspreeze bench``.

- :mod:`.record`: :class:`Workload`, timing, the throughput record, matmul peak;
- :mod:`.cases`: the measured cases (sampling, update, chunk, end to end);
- :mod:`.suite`: the quick / full selections and measuring a case with its reference;
- :mod:`.report`: table, ``bench.json`` and ``bench.md``; :mod:`.command`: the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    """``jaxspreeze bench [--full] [--out DIR]`` (see ``jaxspreeze bench --help``)."""
    from jaxspreeze.bench.command import main as bench_main

    return bench_main(argv)
