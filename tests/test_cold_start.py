"""A cold start: the compile modes, their key, the start's compile lines.

A run's programs are compiled for run speed (``--compile full``) or compile speed
(``--compile quick``: their floats differ in the last bits); ``auto`` picks quick for a
short device-env run on a CPU and the run's config records the choice; the options are
part of a kept program's key; the start says what it compiles, each program as it is
ready and a heartbeat while it compiles; the evaluation's compile is not waited for
before the first chunk.
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
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.programs import ONCE_OPTIONS, QUICK_OPTIONS, ProgramCache, compile_options
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


def test_the_quick_mode_compiles_every_program_with_the_quick_options():
    for name in ("init", "warmup", "warmup_collect", "evaluate", "fused_chunk", "split_critic"):
        assert compile_options("full")(name) == {}  # XLA's defaults
        assert compile_options("auto")(name) == {}  # unresolved: full
        assert compile_options("quick")(name) == QUICK_OPTIONS
    # on a CPU the init (run once, no env loop) compiles at level 0 in every mode
    for mode in ("full", "auto", "quick"):
        assert compile_options(mode, cpu=True)("init") == ONCE_OPTIONS
        assert ONCE_OPTIONS["xla_backend_optimization_level"] == 0
    assert compile_options("full", cpu=True)("warmup") == {}
    assert compile_options("quick", cpu=True)("fused_chunk") == QUICK_OPTIONS


def test_a_cpu_schedule_compiles_its_init_for_compile_speed(tiny_cfg):
    """The schedule's programs on a CPU: the init at level 0 whatever the mode; the chunk in
    the run's mode. The init it builds computes what a full-optimised init does, to the
    last bits (its kernels round otherwise)."""
    for mode, chunk in (("full", {}), ("quick", QUICK_OPTIONS)):
        schedule = schedules.make(_placed(tiny_cfg, compile=mode))
        assert schedule.programs.options("init") == ONCE_OPTIONS
        assert schedule.programs.options("fused_chunk") == chunk
    full = _schedule(tiny_cfg.replace(compile="full"))  # every program with XLA's defaults
    once = schedules.make(_placed(tiny_cfg, compile="full"))
    a, b = _leaves(full.init()), _leaves(once.init())
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(x, y)


def _placed(tiny_cfg, **changes):
    return plan(config.resolve(tiny_cfg.replace(**changes)), devices.single())


def test_auto_is_quick_for_a_short_cpu_run_and_full_past_its_chunks(tiny_cfg):
    from jaxspreeze.setup.plan import AUTO_QUICK_CHUNKS

    short = _placed(tiny_cfg)
    assert tiny_cfg.compile == "auto" and short.cfg.compile == "quick"
    it, warmup = short.cfg.chunk_iterations, short.warmup_steps
    steps = lambda iterations: warmup + iterations * short.steps_per_iteration
    long = _placed(tiny_cfg, total_steps=steps(AUTO_QUICK_CHUNKS * it + 1))
    assert long.cfg.compile == "full"  # more chunks than AUTO_QUICK_CHUNKS: run speed
    assert _placed(tiny_cfg, total_steps=steps(AUTO_QUICK_CHUNKS * it)).cfg.compile == "quick"
    assert _placed(tiny_cfg, compile="full").cfg.compile == "full"  # asked: kept
    assert (
        _placed(tiny_cfg, total_steps=long.cfg.total_steps, compile="quick").cfg.compile == "quick"
    )
    schedule = schedules.make(short)
    assert schedule.programs.options("fused_chunk") == QUICK_OPTIONS  # the schedule's mode


def test_quick_on_a_host_env_is_refused_and_auto_is_full_there():
    cfg = config.RunConfig(algo="ppo", env="gymnasium/CartPole-v1", total_steps=2048)
    assert plan(cfg, devices.single()).cfg.compile == "full"
    with pytest.raises(ConfigError) as e:
        plan(cfg.replace(compile="quick"), devices.single())
    assert e.value.field == "compile" and "--compile full or auto" in str(e.value)


def test_the_cli_refuses_quick_on_a_host_env_before_any_compile(tmp_path, capsys):
    from jaxspreeze import cli

    argv = ["train", "--env", "gymnasium/Pendulum-v1", "--compile", "quick"]
    assert cli.main([*argv, "--total-steps", "2000", "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--compile" in err[0] and "host-async" in err[0], err
    assert not list(tmp_path.iterdir())  # no run directory claimed


def test_a_run_saved_before_the_compile_field_loads_as_full(tiny_cfg):
    data = config.to_dict(tiny_cfg)
    del data["compile"]
    assert config.from_dict(config.saved_before(data)).compile == "full"
    assert config.from_dict(data).compile == "auto"  # a preset without it: the default


def test_the_compile_options_are_part_of_a_kept_programs_key(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "on")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)  # XLA compiles
    try:
        fn = lambda x: jnp.sin(x) * 2
        x = jnp.arange(4.0)
        run = ("options", str(tmp_path))
        full = ProgramCache(tmp_path, run, options=compile_options("full"))
        full.compile("init", full.jit("init", fn), x)
        quick = ProgramCache(tmp_path, run, options=compile_options("quick"))
        quick.compile("init", quick.jit("init", fn), x)
        assert quick.compiled == ["init"] and quick.loaded == []  # another option: a miss
        again = ProgramCache(tmp_path, run, options=compile_options("quick"))
        program = again.compile("init", again.jit("init", fn), x)
        assert again.loaded == ["init"]  # the same options: found
        np.testing.assert_allclose(program(x), fn(x), rtol=1e-6)
        assert len(list(tmp_path.glob(f"*{programs.SUFFIX}"))) == 2
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


@pytest.mark.slow  # compiles init, warm-up and evaluation twice (~10 s)
def test_quick_programs_compute_what_the_full_ones_do(tiny_cfg):
    """init, warm-up and evaluation compiled for compile speed: the same integers, keys
    and shapes, floats within a few units in the last place (not bitwise)."""
    results = []
    for mode in ("full", "quick"):
        schedule = _schedule(tiny_cfg, compile_options(mode))
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
    quick = "  compiling 3 programs for compile speed (--compile quick): init, warm-up, chunk"
    assert lines[0][1] == quick  # before any compile (a short run on a CPU: quick)
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


def test_the_tests_xla_flags_are_the_quick_options():
    """tests/conftest.py's XLA_FLAGS (every test process's) are --compile quick's options."""
    import fake_devices

    from jaxspreeze.core.programs import QUICK_OPTIONS

    rendered = " ".join(f"--{k}={str(v).lower()}" for k, v in QUICK_OPTIONS.items())
    assert fake_devices.QUICK_XLA_FLAGS == rendered
