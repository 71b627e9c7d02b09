"""A cold start: the rare programs' compile options, their key, the start's compile lines.

The programs a run calls once or rarely (init, warm-up, evaluation) may be compiled for
compile speed (``JAXSPREEZE_QUICK_COMPILE=on``, opt-in: it changes their last bits); the
options are part of a kept program's key; the start says what it compiles, each program
as it is ready and a heartbeat while it compiles; the evaluation's compile is not waited
for before the first chunk.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import make_seed_evaluate
from jaxspreeze.core import programs
from jaxspreeze.core.programs import QUICK_OPTIONS, ProgramCache, default_options
from jaxspreeze.envs import make_env
from jaxspreeze.run import starting
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.plan import plan


def _leaves(tree):
    as_data = lambda x: (
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    )
    return [np.asarray(x) for x in jax.tree.leaves(jax.tree.map(as_data, tree))]


def _schedule(cfg, options=None):
    schedule = schedules.make(plan(config.resolve(cfg), devices.single()))
    schedule.programs = ProgramCache(None, options=options)
    return schedule


def test_only_the_rare_programs_get_quick_options_and_only_when_asked(monkeypatch):
    monkeypatch.delenv(programs.QUICK_VAR, raising=False)
    for name in ("init", "warmup", "evaluate", "fused_chunk"):
        assert default_options()(name) == {}  # the default: full optimisation everywhere
    monkeypatch.setenv(programs.QUICK_VAR, "on")
    quick = default_options()
    for name in ("init", "warmup", "warmup_collect", "evaluate"):
        assert quick(name) == QUICK_OPTIONS
    for name in ("fused_chunk", "split_critic", "stack_metrics"):
        assert quick(name) == {}  # the hot programs keep full optimisation


def test_the_compile_options_are_part_of_a_kept_programs_key(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "on")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)  # XLA compiles
    try:
        fn = lambda x: jnp.sin(x) * 2
        x = jnp.arange(4.0)
        run = ("options", str(tmp_path))
        full = ProgramCache(tmp_path, run, options=default_options(quick=False))
        full.compile("init", full.jit("init", fn), x)
        quick = ProgramCache(tmp_path, run, options=default_options(quick=True))
        quick.compile("init", quick.jit("init", fn), x)
        assert quick.compiled == ["init"] and quick.loaded == []  # another option: a miss
        again = ProgramCache(tmp_path, run, options=default_options(quick=True))
        program = again.compile("init", again.jit("init", fn), x)
        assert again.loaded == ["init"]  # the same options: found
        np.testing.assert_allclose(program(x), fn(x), rtol=1e-6)
        assert len(list(tmp_path.glob(f"*{programs.SUFFIX}"))) == 2
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


@pytest.mark.slow  # compiles init, warm-up and evaluation twice (opt-in mode: ~10 s)
def test_quick_rare_programs_compute_what_the_full_ones_do(tiny_cfg):
    """init, warm-up and evaluation compiled for compile speed: the same integers, keys
    and shapes, floats within a few units in the last place (not bitwise: opt-in)."""
    results = []
    for quick in (False, True):
        schedule = _schedule(tiny_cfg, default_options(quick=quick))
        state = schedule.init()
        state = schedule.warmup(state)
        env = make_env(schedule.cfg.env, 4)
        ev = make_seed_evaluate(schedule.algo, env, jax.random.split(jax.random.key(3), 1))
        ev.compile(abstract_on(state.agent.actor, jax.devices()[0]), schedule.programs)
        results.append((_leaves(state), _leaves(ev(state.agent.actor, 1000))))
    (full_state, full_eval), (quick_state, quick_eval) = results
    for a, b in zip(full_state + full_eval, quick_state + quick_eval, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(a, b)


def test_the_compiling_lines_come_as_the_programs_compile(tiny_cfg, monkeypatch):
    monkeypatch.setattr(starting, "HEARTBEAT_S", 0.05)
    schedule = _schedule(tiny_cfg)
    lines: list[tuple[float, str]] = []
    say = lambda text: lines.append((time.perf_counter(), text))
    progress = starting._progress(schedule, say, evaluates=False)
    assert lines[0][1] == "  compiling 3 programs: init, warm-up, chunk"  # before any compile
    schedule.init_compiled()
    compiled_at = time.perf_counter()
    progress.end()
    schedule.programs.on_ready = None
    texts = [t for _, t in lines]
    for name in ("init", "warm-up", "chunk"):
        assert len([t for t in texts if t.startswith(f"    {name} compiled in ")]) == 1
    chunk_line = next(i for i, t in enumerate(texts) if t.startswith("    chunk compiled"))
    assert any(t.startswith("    still compiling (") for t in texts[:chunk_line])  # heartbeat
    assert all(at <= compiled_at for at, _ in lines)  # each said as it happened
    n = len(lines)
    progress.ready("late", "compiled", 1.0)
    time.sleep(0.15)
    assert len(lines) == n  # nothing said after the end


def test_the_first_call_waits_for_an_evaluation_still_compiling():
    evaluating: Future = Future()
    pending = starting.PendingEvaluate(evaluating)
    threading.Timer(0.1, lambda: evaluating.set_result(lambda actor, steps: (actor, steps))).start()
    assert pending("actor", 7) == ("actor", 7)
    assert pending.waited_s > 0.05
    assert pending("again", 8) == ("again", 8)


def test_a_cold_jobs_extra_flags_reach_the_train_command_and_pass_its_early_check(tmp_path):
    from jaxspreeze.bench import cold
    from jaxspreeze.cli import fastcheck

    extra = ("--sac.hidden", "64", "64")
    command = cold.job_command("sac-pendulum", tmp_path / "c", tmp_path / "r", 5000, extra)
    argv = command[command.index("train") + 1 :]
    assert fastcheck.check("train", argv) is None  # every flag known, every value valid
    job_end = argv.index("--total-steps") + 2
    assert tuple(argv[job_end : job_end + 3]) == extra  # after the job's flags: they win
    assert cold.job_command("sac-pendulum", tmp_path, tmp_path, None)[-4:] == [
        "--compile-cache", str(tmp_path), "--logdir", str(tmp_path),
    ]  # fmt: skip
    bad = cold.job_command("sac-pendulum", tmp_path, tmp_path, None, ("--sac.hiden", "64"))
    assert fastcheck.check("train", bad[bad.index("train") + 1 :]) == 2
