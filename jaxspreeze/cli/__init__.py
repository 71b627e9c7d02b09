"""Command line: ``jaxspreeze train|eval|autotune|bench|score|render|plot|launch|cache`` (also ``python -m jaxspreeze``).

One module per command (``jaxspreeze.cli.<command>``, each with ``main(argv) -> int``);
:mod:`.common` holds the one-line errors and exit codes they share, :mod:`.args` the
tyro parsing (one dataclass of options per command). Every error ends in one line and an
exit code (2 bad input, 1 fault, 130/143 stopped by SIGINT/SIGTERM before training);
``--debug`` (anywhere on the command line) or ``JAXSPREEZE_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Sequence

from jaxspreeze.cli.common import BAD_INPUT, FAULT, config_error, fail, os_error
from jaxspreeze.core import clock
from jaxspreeze.core.errors import (
    CheckpointError,
    ConfigError,
    HostEnvError,
    NonFiniteError,
    ProcessError,
    UnknownEnvError,
)

USAGE = """usage: jaxspreeze COMMAND [options]

commands:
  train      train an agent (default config: SAC on gymnax/Pendulum-v1)
  sweep      train a population (members differing in learning rates, gamma, ...) at once
  eval       evaluate the latest checkpoint of a run directory
  autotune   measure this machine and pick num_envs, batch size and update ratio
  bench      run the throughput benchmarks and write bench.json / bench.md
  score      time to a return threshold, jaxspreeze beside brax, rejax and SBX
  render     roll out a trained policy to a GIF (every family; brax also to HTML)
  plot       learning-curve and throughput PNGs for one or more run directories
  launch     start N local processes of one data-parallel run:
             jaxspreeze launch --processes N -- train <train args>
  cache      list, clear or cap the compile cache (compiled and kept programs)
  envs       the env families, or the ids of one (gymnax, brax, craftax, jumanji, ...)

`jaxspreeze COMMAND --help` lists a command's options; `--debug` shows the traceback of an error.
"""

COMMANDS = ("train", "sweep", "eval", "autotune", "bench", "score", "render", "plot", "launch", "cache", "envs")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxspreeze`` console script; returns the exit code."""
    if argv is None:  # the command itself (not a call from Python): its run's wall time
        clock.mark_command()  # counts from the process's start
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("JAXSPREEZE_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else BAD_INPUT
    command, rest = argv[0], argv[1:]
    if debug and command == "launch":  # the processes show their tracebacks, the launcher all
        rest = [*rest, "--debug"] if "--" in rest else [*rest, "--", "--debug"]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}; choose one of {', '.join(COMMANDS)}")
    # flags, simple values and env ids that can be checked without JAX: one line, exit 2,
    # before the command (and JAX, and any simulator) is imported
    from jaxspreeze.cli import fastcheck

    if (code := fastcheck.check(command, rest)) is not None:
        return code
    # imported when chosen: a command pulls in jax and its library, `jaxspreeze --help` does not
    module = importlib.import_module(f"jaxspreeze.cli.{command}")
    try:
        return module.main(rest)
    except SystemExit as e:  # tyro: --help (0) or bad input (2, already reported)
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception as e:
        if debug:
            raise
        return report(e)
    except KeyboardInterrupt as e:  # jaxspreeze.run.stopping.StopRequested: stopped while starting
        name = getattr(e, "signal_name", None)
        if debug or name is None:
            raise
        fail(str(e), FAULT)
        return 128 + getattr(signal, name, signal.SIGINT)


def report(e: Exception) -> int:
    """One line for an error that reached the command line; returns its exit code."""
    if isinstance(e, ConfigError):
        return config_error(e)
    if isinstance(e, (CheckpointError, UnknownEnvError)):  # e.g. a saved run's env not here
        return fail(str(e))
    if isinstance(e, (NonFiniteError, ProcessError, HostEnvError)):
        return fail(str(e), FAULT)
    if isinstance(e, TimeoutError):  # an OSError, but no file's: a wait that ran out
        return fail(f"timed out: {e}", FAULT)
    if isinstance(e, OSError):
        return os_error(e)
    return fail(
        f"unexpected {type(e).__name__}: {e} (run again with --debug for the traceback)", FAULT
    )
