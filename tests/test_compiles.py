"""Compile accounting: every trace, lowering and compile, nested traces counted once, and
the summary of a run reporting them all."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxspreeze.compiles import BACKEND, TRACE, CompileLog


def test_total_is_the_union_of_the_intervals():
    log = CompileLog()
    # a trace (0-4) with a nested trace (1-2), a compile (5-7) and a second one (6-9)
    log.spans = [
        (TRACE, "jit_outer", 0.0, 4.0),
        (TRACE, "inner", 1.0, 2.0),
        (BACKEND, "jit_outer", 5.0, 7.0),
        (BACKEND, "jit_eval", 6.0, 9.0),
    ]
    assert log.total_s() == pytest.approx(8.0)
    assert log.total_s(until=6.5) == pytest.approx(5.5)
    assert log.programs() == {"jit_eval": pytest.approx(3.0), "jit_outer": pytest.approx(2.0)}


def test_the_log_sees_every_program_while_open():
    @jax.jit
    def inner(x):
        return jnp.sin(x) * 2

    @jax.jit
    def outer(x):
        return inner(x) + inner(x + 1)

    x = jax.block_until_ready(jnp.arange(3.0))
    with CompileLog() as log:
        jax.block_until_ready(outer(x))
        jax.block_until_ready(jax.jit(jnp.cos)(x))
    jax.block_until_ready(jax.jit(jnp.tan)(x))  # after: not seen
    names = {name for _, name, _, _ in log.spans}
    assert {"outer", "jit(outer)", "jit(cos)"} <= names and "jit(tan)" not in names
    assert set(log.programs()) == {"jit(outer)", "jit(cos)"}  # inner is inlined in outer
    durations = [end - start for _, _, start, end in log.spans]
    assert max(durations) <= log.total_s() <= sum(durations) + 1e-9


def test_the_summary_reports_all_compiles(tiny_cfg):
    from jaxspreeze.trainer import train

    summary = train(tiny_cfg, quiet=True, save=False).summary
    programs = summary["compile_programs_s"]
    assert any("chunk" in name for name in programs), programs
    assert len(programs) >= 3  # more than the chunk: init, warm-up, evaluation...
    assert summary["compile_all_s"] >= max(programs.values())
    assert 0 < summary["first_chunk_dispatched_s"] < summary["wall_s"]
