"""Throughput benchmarks: workloads, the throughput record, the references and the report.

- :mod:`.record`: :class:`Workload`, timing, the throughput record, matmul peak;
- :mod:`.cases`: the measured cases (sampling, update, chunk, end to end);
- :mod:`.suite`: the quick / full selections and measuring a case with its reference;
- :mod:`.references`: the bare references timed side by side (a hand-fused rollout, a
  minimal SAC update, brax's own trainers; :mod:`.brax_compat` lets those run on new jax);
- :mod:`.report`: table, ``bench.json`` and ``bench.md``.

The ``jaxspreeze bench`` command is :mod:`jaxspreeze.cli.bench`.
"""
