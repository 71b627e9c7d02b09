"""How many CPUs this process may run on: the work a run starts beside its training
(compiles on threads, imports ahead of use) only pays where a second CPU takes it."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (``taskset -c 0``, a one-CPU
    container or job slot gives 1), else the machine's count where the platform has no
    affinity (macOS, Windows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def spare_cpu() -> bool:
    """True when work started on a thread beside the run's training can run on a CPU of
    its own (more than one usable CPU); on one CPU it only takes turns with training."""
    return usable_cpus() > 1
