"""Compile accounting: every trace, lowering and compile, nested traces counted once, and
the summary of a run reporting them all."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxspreeze.core.compiles import BACKEND, LOWER, TRACE, CompileLog, compiles_overlap
from jaxspreeze.setup.plan import plan


def _cpus(monkeypatch, n: int) -> None:
    """This process may run on ``n`` CPUs (its affinity, as ``taskset`` sets it)."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(n)), raising=False)


@pytest.fixture
def two_cpus(monkeypatch):
    """Compiles overlap on threads, whatever CPUs this test process is pinned to."""
    _cpus(monkeypatch, 2)


def test_compiles_overlap_where_the_process_has_more_than_one_cpu(monkeypatch):
    _cpus(monkeypatch, 1)
    assert not compiles_overlap()
    _cpus(monkeypatch, 4)
    assert compiles_overlap()
    monkeypatch.delattr("os.sched_getaffinity", raising=False)  # macOS: no affinity
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert not compiles_overlap()


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
    """Every program in the summary; the evaluation compiled once, ahead of time (its
    first call compiles nothing); init traced once (the memory estimate reads its trace);
    the start timed from the command."""
    from jaxspreeze.run.trainer import train

    with CompileLog() as log:
        summary = train(tiny_cfg, quiet=True, save=False).summary
    programs = summary["compile_programs_s"]
    assert any("chunk" in name for name in programs), programs
    assert len(programs) >= 3  # more than the chunk: init, warm-up, evaluation...
    assert summary["compile_all_s"] >= max(programs.values())
    assert 0 < summary["first_chunk_dispatched_s"] < summary["wall_s"]
    # from the process's start: before train() was called (this test's own start)
    assert summary["command_to_train_s"] > 0
    assert summary["command_to_first_chunk_s"] == pytest.approx(
        summary["command_to_train_s"] + summary["first_chunk_dispatched_s"]
    )
    # the evaluation: one trace, one compile (on its thread, not waited for before the
    # first chunk: run.starting.PendingEvaluate)
    evals = [(event, end) for event, name, _, end in log.spans if "evaluate" in name]
    assert sorted(e for e, _ in evals) == sorted([TRACE, LOWER, BACKEND]), evals
    assert summary["evaluations_done"] >= 1  # ... and it ran, without compiling again
    # the init program is traced once: the memory estimate used that trace's shapes
    assert [name for event, name, _, _ in log.spans if event == TRACE].count("init") == 1


def test_on_one_cpu_a_run_compiles_in_turn_and_trains_the_same(tiny_cfg, monkeypatch):
    """One CPU: every program (the evaluation's too) compiles on the caller's thread, one
    after another; the run is bitwise the one whose compiles overlapped on threads."""
    import threading

    import numpy as np

    from jaxspreeze.run.trainer import train

    def run(cpus: int):
        _cpus(monkeypatch, cpus)
        threads: set[str] = set()
        listen = lambda event, duration, **kw: (
            threads.add(threading.current_thread().name) if event == BACKEND else None
        )
        jax.monitoring.register_event_duration_secs_listener(listen)
        try:
            result = train(tiny_cfg, quiet=True, save=False, overwrite=True)
        finally:
            jax.monitoring.unregister_event_duration_listener(listen)
        return threads, result

    overlapped, a = run(2)
    in_turn, b = run(1)
    assert len(overlapped) > 1 and in_turn == {threading.current_thread().name}
    assert a.summary["final_eval_return_per_seed"] == b.summary["final_eval_return_per_seed"]
    for x, y in zip(jax.tree.leaves(a.state.agent), jax.tree.leaves(b.state.agent), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_memory_estimate_never_traces_the_env(tiny_cfg, monkeypatch):
    """Given the init trace's shapes the estimate traces nothing (neither env step nor
    reset); on its own it traces the reset and the networks' init, never the step."""
    from jaxspreeze import schedules
    from jaxspreeze.envs import VecEnv
    from jaxspreeze.setup import devices, memory
    from jaxspreeze.setup.config import resolve

    calls = {"step": 0, "reset": 0}
    for method in calls:
        real = getattr(VecEnv, method)

        def counted(self, *args, _real=real, _name=method):
            calls[_name] += 1
            return _real(self, *args)

        monkeypatch.setattr(VecEnv, method, counted)
    cfg = resolve(tiny_cfg)
    schedule = schedules.make(plan(cfg, devices.single()))
    abstract = schedule.init_abstract()  # the init program's trace (the run needs it)
    assert calls == {"step": 0, "reset": 1}
    with CompileLog() as log:
        est = memory.check_memory(plan(cfg, on_devices=False), devices.single(), state=abstract)
    assert calls == {"step": 0, "reset": 1} and log.spans == []  # nothing traced
    assert est == memory.estimate_memory(
        plan(cfg, on_devices=False)
    )  # the same figures as tracing its own
    assert calls["step"] == 0


def _compile_threads(schedule, monkeypatch, fail_warmup: bool = False) -> dict[str, str]:
    """Run ``schedule.compile`` recording the thread each of its two programs compiled on."""
    import threading

    threads: dict[str, str] = {}
    for part in ("_compile_warmup", "_compile_chunk"):
        real = getattr(schedule, part)

        def recorded(state, _real=real, _part=part):
            threads[_part] = threading.current_thread().name
            if _part == "_compile_warmup" and fail_warmup:
                raise RuntimeError("warm-up compile failed")
            return _real(state)

        monkeypatch.setattr(schedule, part, recorded)
    schedule.compile(schedule.init())
    return threads


def test_the_warmup_compiles_beside_the_chunk(tiny_cfg, monkeypatch, two_cpus):
    """The warm-up's program compiles on its own thread while the chunk's compiles on the
    caller's; both are ready when compile returns (running them compiles nothing more)."""
    import threading

    from jaxspreeze import schedules
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import resolve

    schedule = schedules.make(plan(resolve(tiny_cfg), devices.single()))
    threads = _compile_threads(schedule, monkeypatch)
    assert threads["_compile_chunk"] == threading.current_thread().name
    assert threads["_compile_warmup"] not in (threads["_compile_chunk"], None)
    with CompileLog() as log:
        state = jax.block_until_ready(schedule.warmup(schedule.init()))
        jax.block_until_ready(schedule.chunk(state))
    assert not [name for _, name, _, _ in log.spans if "warmup" in name or "chunk" in name]


@pytest.mark.parametrize("cpus", [2, 1])
def test_a_failed_warmup_compile_is_raised_by_compile(tiny_cfg, monkeypatch, cpus):
    _cpus(monkeypatch, cpus)
    from jaxspreeze import schedules
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import resolve

    schedule = schedules.make(plan(resolve(tiny_cfg), devices.single()))
    with pytest.raises(RuntimeError, match="warm-up compile failed"):
        _compile_threads(schedule, monkeypatch, fail_warmup=True)


def _compile_thread(schedule, monkeypatch, fail: bool = False) -> dict[str, str]:
    """Record the thread ``schedule.compile`` runs on (raising when ``fail``)."""
    import threading

    seen: dict[str, str] = {}
    real = schedule.compile

    def recorded(state):
        seen["compile"] = threading.current_thread().name
        if fail:
            raise RuntimeError("chunk compile failed")
        return real(state)

    monkeypatch.setattr(schedule, "compile", recorded)
    return seen


@pytest.mark.parametrize(
    ("dispatched", "cpus"),
    [(False, 2), (False, 1), pytest.param(True, 2, marks=pytest.mark.slow)],
    ids=["fused", "fused-one-cpu", "split"],
)
def test_the_chunk_compiles_beside_the_init(tiny_cfg, monkeypatch, dispatched, cpus):
    """``init_compiled()`` compiles the chunk and the warm-up on a thread, for the
    init's shapes, while the init runs: the programs are those of the state's own arrays
    (running them compiles nothing more) and the run is bitwise the one compiled after
    its init. On one CPU the same programs compile first, on the caller's thread."""
    import threading

    import numpy as np

    from jaxspreeze import schedules
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import resolve

    def run(ahead: bool):
        schedule = schedules.make(plan(resolve(tiny_cfg), devices.single()), dispatched=dispatched)
        seen = _compile_thread(schedule, monkeypatch)
        state = schedule.init_compiled() if ahead else schedule.init()
        if not ahead:
            schedule.compile(state)
        with CompileLog() as log:
            state = jax.block_until_ready(schedule.warmup(state))
            state, _ = jax.block_until_ready(schedule.chunk(state))
        return seen["compile"], log.spans, state

    _cpus(monkeypatch, cpus)
    thread, spans, ahead = run(True)
    assert (thread == threading.current_thread().name) == (cpus == 1) and spans == []
    thread, _, after = run(False)
    assert thread == threading.current_thread().name
    as_data = lambda x: (
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    )
    for a, b in zip(
        jax.tree.leaves(jax.tree.map(as_data, ahead)),
        jax.tree.leaves(jax.tree.map(as_data, after)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("cpus", [2, 1])
def test_a_failed_compile_beside_the_init_is_raised(tiny_cfg, monkeypatch, cpus):
    _cpus(monkeypatch, cpus)
    from jaxspreeze import schedules
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import resolve

    schedule = schedules.make(plan(resolve(tiny_cfg), devices.single()))
    _compile_thread(schedule, monkeypatch, fail=True)
    with pytest.raises(RuntimeError, match="chunk compile failed"):
        schedule.init_compiled()


def test_a_failed_init_waits_for_the_compile_beside_it(tiny_cfg, monkeypatch):
    """The init's error is the one raised, once no thread is left compiling."""
    import threading

    from jaxspreeze import schedules
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import resolve

    schedule = schedules.make(plan(resolve(tiny_cfg), devices.single()))
    compiled = threading.Event()
    real = schedule.compile
    monkeypatch.setattr(schedule, "compile", lambda s: (real(s), compiled.set()))

    def broken_init(seed=None):
        raise ValueError("init failed")

    monkeypatch.setattr(schedule, "init", broken_init)
    with pytest.raises(ValueError, match="init failed"):
        schedule.init_compiled()
    assert compiled.is_set()
