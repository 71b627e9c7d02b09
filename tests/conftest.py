"""Shared test fixtures: tiny configs that compile and run fast on 2 CPU cores."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
from fake_devices import QUICK_XLA_FLAGS

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# every program a test compiles (and its children's, which inherit the variable) is
# compiled for compile speed: the options of `--compile quick` (fake_devices.py says why)
if QUICK_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {QUICK_XLA_FLAGS}".strip()
# compiled programs are not kept across tests (nor the CLI runs they start): tests patch
# module-level functions that a kept program would not see; tests/test_programs.py turns
# the program cache on where it is the subject
os.environ["JAXSPREEZE_PROGRAM_CACHE"] = "off"

# JAX's persistent compilation cache, on from the session's first compile, in a directory
# of the session's own (never the user's: a run starts cold and leaves nothing behind). A
# program one test compiled is read, not compiled again, by the next test that builds the
# same program; `jaxspreeze train` children find the directory through
# JAXSPREEZE_CACHE_DIR (their default --compile-cache). The cache is keyed by the
# program's own text, so a test that patches a function gets its own entry. Tests of the
# cache give it a directory of their own (--compile-cache DIR) in a child process.
# Under pytest-xdist the workers share the controller's directory (they inherit its
# environment): a program one worker compiled is read by the other; only the process that
# made the directory removes it.
SHARED = "JAXSPREEZE_TESTS_XLA_CACHE"
OWNS_CACHE = SHARED not in os.environ
XLA_CACHE = os.environ.get(SHARED) or tempfile.mkdtemp(prefix="jaxspreeze-tests-xla-")
os.environ[SHARED] = XLA_CACHE
os.environ["JAXSPREEZE_CACHE_DIR"] = XLA_CACHE

import jax  # noqa: E402  (after JAX_PLATFORMS)

jax.config.update("jax_compilation_cache_dir", XLA_CACHE)


@pytest.fixture(autouse=True)
def _cache_every_compile():
    """Keep every compile, however short (a run's trainer sets its own threshold)."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


@pytest.fixture
def no_xla_cache_writes():
    """JAX's persistent cache keeps none of this test's compiles (the program cache's
    tests: a program that JAX's cache answered is, by design, not kept by theirs)."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)
    yield
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_unconfigure(config):
    if OWNS_CACHE:
        shutil.rmtree(XLA_CACHE, ignore_errors=True)


@pytest.fixture
def run_main(capsys):
    """``jaxspreeze ARGS`` run in this process (``jaxspreeze.cli.main``), as subprocess.run
    would report it: for tests of bad input (exit code, one-line message) that need no
    fresh interpreter (tests/test_cli.py keeps real ``python -m jaxspreeze`` runs)."""
    from jaxspreeze import cli

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = cli.main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["jaxspreeze", *args], code, out.out, out.err)

    return run


TINY_RUN = dict(
    total_steps=600,
    num_envs=4,
    grad_steps=2,
    batch_size=32,
    buffer_size=2_000,
    learning_starts=200,
    chunk_iterations=50,
    eval_episodes=2,
    run_name="tiny",
    sinks=("jsonl",),
)  # 200 warm-up steps, then 2 chunks of 50 iterations x 4 envs


@pytest.fixture
def tiny_config(tmp_path):
    """``tiny_config(**fields)``: a run of :data:`TINY_RUN`'s sizes logging under
    ``tmp_path``, with ``fields`` (the algorithm and its section) applied."""
    from jaxspreeze.setup.config import RunConfig

    def make(**fields):
        return RunConfig(**TINY_RUN, logdir=str(tmp_path)).replace(**fields)

    return make


@pytest.fixture
def tiny_cfg(tiny_config):
    """A SAC run small enough to compile and train in seconds."""
    return tiny_config(sac={"hidden": (32, 32)})
