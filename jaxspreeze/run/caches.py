"""The run's caches: JAX's persistent compilation cache and the program cache's policy.

:func:`enable_compile_cache` turns on JAX's cache (the trainer, autotune and bench call
it first); :func:`program_cache` is the run's :class:`~jaxspreeze.core.programs.ProgramCache`,
keyed by :func:`program_run`: the config's fields that reach a program (all but
the ``program_free`` fields), the schedule, the placement and the env's classes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jax

from jaxspreeze import schedules
from jaxspreeze.core import cachedir
from jaxspreeze.core.programs import ProgramCache, object_fingerprint
from jaxspreeze.envs import jaxenv
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup import distributed


def enable_compile_cache(setting: str) -> str | None:
    """Turn on JAX's persistent compilation cache; returns the directory (None if off).
    JAX keeps each entry's last use and evicts the least recently used above the size cap
    (:func:`jaxspreeze.core.cachedir.max_size`)."""
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
    cap = cachedir.max_size()
    if cap:  # JAX's eviction reads every entry's use time
        cachedir.time_untimed(path)
    jax.config.update("jax_compilation_cache_max_size", cap or -1)
    return str(path)


def program_cache(directory: str | None, schedule: schedules.Schedule) -> ProgramCache:
    """The run's :class:`~jaxspreeze.core.programs.ProgramCache`, in ``<directory>/programs``
    (off without a compile cache, for runs of several processes, and for a JAX env object
    passed from Python: its code, maybe a notebook's cell, is beyond what the key sees).

    Its key holds the config's fields that reach a program, the schedule and placement,
    and the classes of the env object the family built (:mod:`jaxspreeze.core.programs`).
    """
    options = schedule.programs.options  # the XLA options of the run's compile mode
    if directory is None or distributed.process_count() > 1 or jaxenv.is_jax_env(schedule.cfg.env):
        return ProgramCache.off(options)
    cfg = schedule.cfg
    label = f"{cfg.algo} {cfg.env} {type(schedule).__name__}"
    return ProgramCache(Path(directory) / "programs", program_run(schedule), label, options=options)


def program_run(schedule: schedules.Schedule) -> tuple[Any, ...]:
    """What a run's programs are made of beyond the code (the program cache's ``run``).

    The fields of the schedule's config that reach a program: all but the
    ``program_free`` ones (:func:`jaxspreeze.setup.config.fields_of`; the seeds reach the
    programs as arguments, the keys, never as constants: a test checks it).
    """
    free = config_lib.fields_of("program_free")
    fields = {k: v for k, v in config_lib.to_dict(schedule.cfg).items() if k not in free}
    env = schedule.env.render_state
    env_objects = env if isinstance(env, (tuple, list)) else (env,)
    return (
        fields,
        type(schedule).__name__,
        repr(schedule.placement),
        object_fingerprint(env_objects),
    )
