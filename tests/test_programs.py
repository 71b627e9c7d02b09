"""The program cache: compiled programs kept across processes (jaxspreeze.core.programs).

A kept program is found again only for the same code, run and argument shapes; it computes
bitwise what the traced program computes; a damaged entry is compiled again; programs that
cannot be loaded elsewhere (host callbacks) are not kept; a second CLI run of a config
loads every program and trains the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import schedules
from jaxspreeze.core import programs
from jaxspreeze.core.programs import ProgramCache
from jaxspreeze.run.caches import program_run
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.plan import plan

ON = {"JAXSPREEZE_PROGRAM_CACHE": "on"}


@pytest.fixture
def cache_on(monkeypatch, no_xla_cache_writes):
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "on")


def _schedule(cfg, directory, unique, dispatched=None):
    """A schedule for ``cfg`` whose program cache is keyed as the trainer keys it, plus
    ``unique`` (a test's own namespace: JAX's persistent cache, on in the test process
    after any run, never answers its compiles); ``dispatched``: the split's pieces."""
    cfg = config.resolve(cfg)
    schedule = schedules.make(plan(cfg, devices.single()), dispatched=dispatched)
    schedule.programs = ProgramCache(directory, (program_run(schedule), unique))
    return schedule


def _leaves(tree):
    """Every leaf as a numpy array (PRNG keys as their key data)."""
    as_data = lambda x: (
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    )
    return [np.asarray(x) for x in jax.tree.leaves(jax.tree.map(as_data, tree))]


SPLIT_PIECES = [
    "split_actor",
    "split_collect",
    "split_critic",
    "split_critic_view",
    "stack_metrics",
    "stack_metrics",
    "store",
    "store_obs",
    "warmup_collect",
]


@pytest.mark.slow  # the fused programs' keep-and-load (a second run) is in the default run
def test_the_split_pieces_are_kept_and_compute_the_same(tiny_cfg, tmp_path, cache_on):
    """The split's pieces (here on one device, the fused program cut at its seams) are
    kept and loaded like the fused chunk; their outputs' shapes come from the kept ones."""
    directory, unique = tmp_path / "programs", str(tmp_path)
    outs = []
    for _ in range(2):
        schedule = _schedule(tiny_cfg, directory, unique, dispatched=True)
        state = schedule.init()
        schedule.compile(state)
        outs.append((schedule.programs, _leaves(schedule.chunk(schedule.warmup(state)))))
    (first, out1), (second, out2) = outs
    assert sorted(first.compiled) == sorted(["init", *SPLIT_PIECES]) and first.loaded == []
    assert sorted(second.loaded) == sorted(["init", *SPLIT_PIECES]) and second.compiled == []
    for a, b in zip(out1, out2, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_program_compiled_beside_the_init_is_the_one_the_state_finds(
    tiny_cfg, tmp_path, cache_on
):
    """The chunk and warm-up compiled ahead for the init's shapes (weak types and
    placements kept) are keyed as the state's own arrays key them: a schedule compiling
    for a state loads them."""
    directory, unique = tmp_path / "programs", str(tmp_path)
    first = _schedule(tiny_cfg, directory, unique)
    first.init_compiled()
    assert sorted(first.programs.compiled) == ["fused_chunk", "init", "warmup"]
    second = _schedule(tiny_cfg, directory, unique)
    second.compile(second.init())
    assert sorted(second.programs.loaded) == ["fused_chunk", "init", "warmup"]
    assert second.programs.compiled == []
    third = _schedule(tiny_cfg, directory, unique)  # its init is kept: no compile ahead
    third.init_compiled()
    assert sorted(third.programs.loaded) == ["fused_chunk", "init", "warmup"]


def test_another_config_names_other_programs(tiny_cfg, tmp_path, cache_on):
    """A field that leaves every argument's shape as it was (the batch size) still names
    other programs: the config is part of the key; the run's name and sinks are not."""

    def namespace(cfg):
        cfg = config.resolve(cfg)
        schedule = schedules.make(plan(cfg, devices.single()))
        return ProgramCache(tmp_path, program_run(schedule)).namespace

    base = namespace(tiny_cfg)
    assert namespace(tiny_cfg.replace(batch_size=16)) != base
    assert namespace(tiny_cfg.replace(sac={"gamma": 0.9})) != base
    assert namespace(tiny_cfg.replace(run_name="other", sinks=("csv",), seed=3)) == base


def test_the_key_holds_each_argument_shape_dtype_and_placement():
    x = jnp.zeros((2, 3))
    base = programs.signature((x,))
    assert programs.signature((jnp.zeros((2, 3)),)) == base
    assert programs.signature((jnp.zeros((3, 2)),)) != base
    assert programs.signature((jnp.zeros((2, 3), jnp.int32),)) != base
    assert programs.signature(((x,),)) != base  # the tree's structure
    assert programs.signature((jax.ShapeDtypeStruct((2, 3), jnp.float32),)) != base  # unplaced


def test_a_damaged_entry_is_compiled_again_and_replaced(tmp_path, cache_on):
    directory = tmp_path / "programs"
    fn = lambda x: jnp.sin(x) * 2
    x = jnp.arange(4.0)
    cache = ProgramCache(directory, ("damaged", str(tmp_path)))
    cache.compile("f", cache.jit("f", fn), x)
    (entry,) = directory.glob(f"*{programs.SUFFIX}")
    entry.write_bytes(b"not a program")
    again = ProgramCache(directory, ("damaged", str(tmp_path)))
    program = again.compile("f", again.jit("f", fn), x)
    assert again.compiled == ["f"] and again.loaded == []
    np.testing.assert_allclose(program(x), fn(x))
    third = ProgramCache(directory, ("damaged", str(tmp_path)))
    third.compile("f", third.jit("f", fn), x)
    assert third.loaded == ["f"]


def test_programs_with_host_callbacks_are_not_kept(tmp_path, cache_on):
    directory = tmp_path / "programs"
    cache = ProgramCache(directory, ("callback", str(tmp_path)))

    def fn(x):
        y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y + 1

    x = jnp.arange(3.0)
    text = jax.jit(fn).lower(x).as_text()
    assert not programs.loadable(programs.custom_calls(text))
    program = cache.compile("cb", cache.jit("cb", fn), x)
    np.testing.assert_allclose(program(x), np.sin(np.arange(3.0)) + 1, rtol=1e-6)
    assert list(directory.glob(f"*{programs.SUFFIX}")) == []
    calls = programs.custom_calls("stablehlo.custom_call @lapack_spotrf_ffi(%0) ...")
    assert calls == {"lapack_spotrf_ffi"} and programs.loadable(calls)
    assert not programs.loadable({"some_unknown_kernel"})


def test_off_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "off")
    cache = ProgramCache(tmp_path / "programs", ("off",))
    assert not cache.on
    cache.compile("f", cache.jit("f", jnp.cos), jnp.zeros(2))
    assert not (tmp_path / "programs").exists()


LAPACK = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jaxspreeze.core.programs import ProgramCache
    cache = ProgramCache(sys.argv[1], ("lapack",))
    a = jnp.array([[4.0, 1.0], [1.0, 3.0]])
    fn = lambda m: jnp.linalg.cholesky(m) @ jnp.linalg.inv(m)
    if sys.argv[2] == "keep":
        cache.compile("chol", cache.jit("chol", fn), a)
        print("compiled", cache.compiled)
    else:
        program = cache.load("chol", a)  # nothing linear-algebra is lowered in this process
        assert program is not None
        print("loaded", np.asarray(program(a)).round(5).tolist())
    """
)


def test_a_program_with_lapack_calls_runs_in_a_fresh_process(tmp_path):
    """CPU LAPACK kernels are set up when a program using them is lowered; a loaded one
    skips that, so the cache sets them up (without it the process crashes)."""
    env = {**os.environ, **ON}
    script = tmp_path / "lapack.py"
    script.write_text(LAPACK)
    runs = [
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / "programs"), mode],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        for mode in ("keep", "load")
    ]
    for out in runs:
        assert out.returncode == 0, out.stderr[-2000:]
    a = np.array([[4.0, 1.0], [1.0, 3.0]])
    expected = (np.linalg.cholesky(a) @ np.linalg.inv(a)).round(5).tolist()
    loaded = json.loads(runs[1].stdout.strip().splitlines()[-1].removeprefix("loaded "))
    np.testing.assert_allclose(loaded, expected, atol=1e-4)


def _train(tmp_path, name, *extra, env=None):
    args = [
        sys.executable, "-m", "jaxspreeze", "train", "--algo", "sac",
        "--env", "gymnax/Pendulum-v1", "--total-steps", "600", "--num-envs", "4",
        "--batch-size", "32", "--buffer-size", "2000", "--learning-starts", "200",
        "--chunk-iterations", "50", "--eval-episodes", "2", "--sac.hidden", "32", "32",
        "--sinks", "jsonl", "--logdir", str(tmp_path), "--run-name", name,
        "--compile-cache", str(tmp_path / "cache"), *extra,
    ]  # fmt: skip
    out = subprocess.run(
        args, capture_output=True, text=True, env={**os.environ, **ON, **(env or {})}, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").open()]
    return out, summary, rows


@pytest.mark.slow  # two whole runs; a kept program's load is tested alone below (the default run stays under 10 minutes)
def test_a_second_run_of_a_config_loads_every_program_and_trains_the_same(tmp_path):
    _, first, rows1 = _train(tmp_path, "first")
    out, second, rows2 = _train(tmp_path, "second")
    everything = ["evaluate", "fused_chunk", "init", "warmup"]
    assert first["programs_compiled"] == everything and first["programs_loaded"] == []
    assert second["programs_loaded"] == everything and second["programs_compiled"] == []
    assert "4 programs loaded from the program cache" in out.stdout + out.stderr
    assert second["final_eval_return"] == first["final_eval_return"]
    learned = lambda rows: [
        {k: v for k, v in r.items() if k in ("actor_loss", "critic_loss", "q_mean", "eval_return")}
        for r in rows
    ]
    assert learned(rows1) == learned(rows2) and any(learned(rows1))
    # `jaxspreeze eval` of the run loads the evaluation program the run kept, and evaluates
    # the last checkpoint (the final state) exactly as the trainer's final evaluation did
    evaluated = subprocess.run(
        [sys.executable, "-m", "jaxspreeze", "eval", str(tmp_path / "first"), "--json"],
        capture_output=True, text=True, env={**os.environ, **ON}, timeout=900,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["programs_loaded"] == ["evaluate"]
    assert result["return_mean"] == [first["final_eval_return"]]


@pytest.mark.slow
def test_a_second_split_run_on_two_devices_loads_every_piece(tmp_path):
    """Actor and critic on two (fake CPU) devices: every piece, on either device, is kept
    and loaded onto the device it was compiled for."""
    two = {"JAX_NUM_CPU_DEVICES": "2"}
    _, first, rows1 = _train(tmp_path, "first", "--placement", "split", env=two)
    _, second, rows2 = _train(tmp_path, "second", "--placement", "split", env=two)
    everything = sorted(["evaluate", "init", *SPLIT_PIECES])
    assert first["programs_compiled"] == everything
    assert second["programs_loaded"] == everything and second["programs_compiled"] == []
    assert second["final_eval_return"] == first["final_eval_return"]
    keys = ("actor_loss", "critic_loss", "q_mean", "eval_return")
    learned = lambda rows: [{k: v for k, v in r.items() if k in keys} for r in rows]
    assert learned(rows1) == learned(rows2) and any(learned(rows1))
