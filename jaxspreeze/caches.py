"""The run's caches: JAX's persistent compilation cache and the program cache's policy.

:func:`enable_compile_cache` turns on JAX's cache (the trainer, autotune and bench call
it first); :func:`program_cache` is the run's :class:`~jaxspreeze.programs.ProgramCache`,
keyed by :func:`program_run`: the config's fields that reach a program (all but
:data:`PROGRAM_FREE_FIELDS`), the schedule, the placement and the env's classes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jax

from jaxspreeze import cachedir, distributed, schedules
from jaxspreeze import config as config_lib
from jaxspreeze.config import RunConfig
from jaxspreeze.programs import ProgramCache, object_fingerprint


def enable_compile_cache(setting: str) -> str | None:
    """Turn on JAX's persistent compilation cache; returns the directory (None if off).
    JAX keeps each entry's last use and evicts the least recently used above the size cap
    (:func:`jaxspreeze.cachedir.max_size`)."""
    path = cachedir.directory(setting)
    if path is None:
        return None
    if why := cachedir.unwritable(path):  # JAX would warn twice per program, every run
        print(
            f"jaxspreeze: warning: compile cache not used: {why} (give --compile-cache a "
            "writable directory, or off)",
            file=sys.stderr,
            flush=True,
        )
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", cachedir.max_size() or -1)
    return str(path)


# config fields that reach no program: a run differing only in these loads the same ones
# (the seeds reach them as arguments, the keys, never as constants: a test checks it)
PROGRAM_FREE_FIELDS = (
    "seed",
    "eval_every",
    "logdir",
    "run_name",
    "sinks",
    "checkpoint_every",
    "keep_checkpoints",
    "compile_cache",
    "autotune_budget_s",
    "host_stall_timeout_s",
)


def program_cache(
    directory: str | None, cfg: RunConfig, schedule: schedules.Schedule
) -> ProgramCache:
    """The run's :class:`~jaxspreeze.programs.ProgramCache`, in ``<directory>/programs``
    (off without a compile cache, and for runs of several processes).

    Its key holds the config's fields that reach a program, the schedule and placement,
    and the classes of the env object the family built (:mod:`jaxspreeze.programs`).
    """
    if directory is None or distributed.process_count() > 1:
        return ProgramCache.off()
    label = f"{cfg.algo} {cfg.env} {type(schedule).__name__}"
    return ProgramCache(Path(directory) / "programs", program_run(cfg, schedule), label)


def program_run(cfg: RunConfig, schedule: schedules.Schedule) -> tuple[Any, ...]:
    """What a run's programs are made of beyond the code (the program cache's ``run``)."""
    fields = config_lib.to_dict(cfg)
    fields = {k: v for k, v in fields.items() if k not in PROGRAM_FREE_FIELDS}
    env = schedule.env.render_state
    env_objects = env if isinstance(env, (tuple, list)) else (env,)
    return (
        fields,
        type(schedule).__name__,
        repr(schedule.placement),
        object_fingerprint(env_objects),
    )
