"""When the command started: the clock a run's wall time counts from.

The ``jaxspreeze`` command marks itself (:func:`mark_command`) as it starts; the first
:func:`jaxspreeze.train` of that process then counts its wall time from the process's
start (the interpreter and the imports included, as ``time`` would count the command).
``train`` called from Python (``jaxspreeze.cli.main([...])`` too) counts from its call. Imports nothing (no JAX), so the
command line can mark the start before anything heavy is loaded.
"""

from __future__ import annotations

import os
import time

_IMPORTED = time.time()  # the fallback for process_started()
_command: float | None = None  # the marked command's start, until a run takes it


def process_started() -> float:
    """When this process started (``time.time()`` seconds): the command's own start.

    Linux: the process's start time from ``/proc/self/stat`` against ``/proc/uptime``
    (10 ms resolution). Elsewhere: when this module was imported (after the interpreter
    and jaxspreeze's imports started, so a little late).
    """
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return _IMPORTED


def mark_command() -> None:
    """The ``jaxspreeze`` command starts (the CLI's ``main()`` called by the console script
    or ``python -m jaxspreeze``, not from Python): its run counts from the process's start."""
    global _command
    _command = process_started()


def take_command_start() -> float | None:
    """The marked command's start (``time.time()`` seconds), once: the first run of the
    command takes it, later runs of the same process (and unmarked ones) get None."""
    global _command
    started, _command = _command, None
    return started
