"""The host side: ``train(config)`` drives the jitted chunks and everything that waits.

The main thread only dispatches chunks. It hands each chunk's metrics (device arrays,
not yet computed) to the metrics thread, which waits for them, builds the chunk's record
and feeds the sinks; every ``eval_every`` env steps it hands a copy of the actor to the
evaluator thread, whose results go back to the metrics thread. The main thread waits for
chunk c-1 once chunk c is queued, so at most two chunks are in flight.

The threads hand over through queues (``MetricsThread.submit``, ``Evaluator.submit``)
and one event: a non-finite chunk seen by the metrics thread trips a
:class:`~jaxspreeze.guards.Tripwire`, which the main thread checks at every chunk
boundary. Records and the summary are built in :mod:`jaxspreeze.records`, the run
directory is :mod:`jaxspreeze.rundir`'s, resuming :mod:`jaxspreeze.resume`'s.

Before the first chunk a run is *starting*: it validates its config, claims (locks) its
run directory, builds and compiles its programs, then warms up or restores a checkpoint
(and sets a resumed run's changed hyperparameters). A signal during the start stops it
at once (:meth:`~jaxspreeze.stopping.GracefulStop.starting`); a resumed run's directory
is only updated once the restore has succeeded, a new run's is marked ``NOT_STARTED``
until its first checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax

from jaxspreeze import (
    algos,
    cachedir,
    checkpoint,
    devices,
    distributed,
    memory,
    metrics,
    records,
    rundir,
    schedules,
)
from jaxspreeze import config as config_lib
from jaxspreeze import resume as resume_lib
from jaxspreeze.compiles import CompileLog, process_started
from jaxspreeze.config import RunConfig
from jaxspreeze.envs import make_env
from jaxspreeze.errors import HostEnvError, NonFiniteError, ProcessError
from jaxspreeze.evaluate import (
    EvalResult,
    Evaluator,
    Snapshot,
    make_host_evaluate,
    make_seed_evaluate,
)
from jaxspreeze.guards import Tripwire, checkpoint_note, nonfinite_message
from jaxspreeze.iteration import TrainState
from jaxspreeze.metrics import MetricsThread, Report
from jaxspreeze.policy import save_policy
from jaxspreeze.programs import ProgramCache, object_fingerprint
from jaxspreeze.records import RecordBuilder, Work
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.sinks import Sink, make_sinks
from jaxspreeze.stopping import GracefulStop
from jaxspreeze.types import EnvSpec, Placement, Record
from jaxspreeze.workers import WorkerStalledError


@dataclass
class RunResult:
    """What :func:`train` returns: the run directory, the summary, the final state.

    ``summary`` is what ``summary.json`` holds; ``schedule`` ran the chunks (its
    ``algo`` acts with ``state.agent.actor``).
    """

    run_dir: Path
    summary: dict[str, Any]
    state: TrainState | None = field(default=None, repr=False)
    schedule: schedules.Schedule | None = field(default=None, repr=False)


def enable_compile_cache(setting: str) -> str | None:
    """Turn on JAX's persistent compilation cache; returns the directory (None if off).
    JAX keeps each entry's last use and evicts the least recently used above the size cap
    (:func:`jaxspreeze.cachedir.max_size`)."""
    path = cachedir.directory(setting)
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", cachedir.max_size() or -1)
    return str(path)


def crossed(every: int, steps_before: int, steps_after: int) -> bool:
    """True when a multiple of ``every`` (> 0) lies in ``(steps_before, steps_after]``."""
    return every > 0 and steps_after // every > steps_before // every


def train(
    cfg: RunConfig,
    *,
    quiet: bool = False,
    sinks: list[Sink] | None = None,
    save: bool = True,
    resume: str | Path | None = None,
    signals: Literal["raise", "kill"] | None = "raise",
    overwrite: bool = False,
) -> RunResult:
    """Train an agent as configured; returns the run directory and summary.

    Resolves ``cfg`` (run-level sizes left unset come from the algorithm's defaults),
    validates it and checks its memory estimate first (raising
    :class:`~jaxspreeze.errors.ConfigError` before anything is compiled or allocated),
    then compiles, warms up and runs the chunks. A host thread turns each chunk's metrics
    into a record for the sinks named in ``cfg.sinks``; ``sinks`` are *added* to those
    (e.g. ``train(cfg, sinks=[jaxspreeze.sinks.NotebookPlotSink()])`` in a notebook; pass
    ``cfg.replace(sinks=())`` to use only your own). Every ``cfg.eval_every`` env steps a
    copy of the actor goes to the evaluator thread; the final evaluation is awaited and
    written to ``summary.json``. ``env_steps`` in the records and the summary counts one
    seed's env steps; the summary's ``env_steps_total`` is the sum over seeds. ``quiet``
    silences the console; ``save`` writes ``policy.msgpack`` (the final actor of every
    seed). The run directory's ``config.json`` holds the resolved config.

    The run directory is this process's while it trains (a second run in it is refused,
    see :mod:`jaxspreeze.rundir`); a directory that already holds a run is refused unless
    it is resumed or ``overwrite`` is given.

    Checkpoints (the whole run state) are written every ``cfg.checkpoint_every`` env
    steps at chunk boundaries and at the end. ``resume=RUN_DIR`` continues that run from
    its newest intact checkpoint (bitwise as if never interrupted, for the same config;
    what a changed config does is :mod:`jaxspreeze.resume`'s rule: every change is listed,
    and applied from the first resumed update or refused). The metrics files continue
    from the checkpoint's step. ``signals``: SIGINT/SIGTERM stop at the next chunk
    boundary with a checkpoint (``summary["stopped"]`` names the signal); during the
    start (compile, warm-up, restore) and for a second SIGINT they stop at once: raising
    :class:`~jaxspreeze.stopping.StopRequested` / ``KeyboardInterrupt`` (``"raise"``) or
    ending the process with one line (``"kill"``, the CLI's choice, prompt even inside an
    XLA call); ``None`` leaves the signal handlers alone. A NaN/inf in a loss, gradient
    or parameter stops training with :class:`~jaxspreeze.errors.NonFiniteError` naming
    the step, the quantity and the newest checkpoint, if any.

    Several processes (after :func:`jaxspreeze.distributed.initialize`; the placement is
    then data-parallel): every process calls ``train`` with the same config (checked at
    the start: a difference is refused with a ConfigError on every process). Process 0
    alone owns the run directory (lock, console, sinks, evaluator, plots, summary, policy
    file) and writes the checkpoints, gathered from every process, with the layout
    (processes, data-parallel devices) a resume must match. A signal to any process
    stops all of them at the same chunk boundary (a couple of chunks later) with a
    checkpoint. When a collective fails because a peer died, the process prints which one
    and exits at once (code 1). The other processes return a ``RunResult`` whose
    ``summary`` only holds ``process_index``.
    """
    t_start = time.perf_counter()
    before_train_s = time.time() - process_started()  # the command's start to this call
    main = distributed.is_main()  # process 0 (of a multi-process run) owns the output
    quiet = quiet or not main
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    stop = GracefulStop(second=signals) if signals else None
    setup: _Setup | None = None
    try:
        # every trace, lowering and compile of the run (memory estimate, init, warm-up,
        # chunk, evaluation), for the summary
        with stop or contextlib.nullcontext(), CompileLog() as compile_log:
            starting = stop.starting(_BEFORE_SETUP) if stop else contextlib.nullcontext()
            with starting:
                # config, devices, resume point, memory check, run directory (locked)
                setup = _set_up(cfg, resume, overwrite)
                if stop is not None:
                    stop.run_dir = setup.run.path
                    stop.set_start_line(_start_line(setup))
                say(_header(setup))
                for line in budget_warnings(setup.cfg, setup.schedule.env.spec) if main else []:
                    metrics.warn(line)
                start = _start(setup, say, stop)
            return _run(
                setup, start, t_start, say, quiet, sinks, save, stop, compile_log, before_train_s
            )
    finally:
        if setup is not None:
            setup.schedule.close()  # the host schedule's workers and envs
            setup.run.release()


_BEFORE_SETUP = "the run had not started; nothing was trained"


@dataclass(frozen=True)
class _Started:
    """A run ready for its first chunk: the state and where the history stands."""

    state: TrainState
    first_chunk: int
    steps: int  # env steps per seed so far
    compile_s: float
    history: list[Record]  # the records kept from before (a resumed run)
    evaluate: Callable[[Any], EvalResult] | None = None  # compiled ahead (process 0)


def _run(
    setup: _Setup,
    start: _Started,
    t_start: float,
    say: Callable[[str], None],
    quiet: bool,
    extra_sinks: list[Sink] | None,
    save: bool,
    stop: GracefulStop | None,
    compile_log: CompileLog | None = None,
    before_train_s: float | None = None,
) -> RunResult:
    """Run the chunks of a started run, then its final evaluation, summary and policy."""
    cfg, schedule, run = setup.cfg, setup.schedule, setup.run
    state, first_chunk, steps = start.state, start.first_chunk, start.steps
    report = metrics.warn  # how the host threads report a problem (stderr)
    resumed_at = setup.point.env_steps if setup.point is not None else None
    main = distributed.is_main()  # the others run no sinks and no evaluator
    all_sinks = _sinks(cfg, run.path, quiet, report, start.history, resumed_at) if main else []
    all_sinks += list(extra_sinks or []) if main else []
    k = schedule.iterations_per_chunk
    remaining = math.ceil(max(cfg.total_steps - steps, 0) / cfg.steps_per_iteration)
    n_chunks = math.ceil(remaining / k)
    say(f"  compiled in {start.compile_s:.1f}s ({n_chunks} chunks x {k} iterations to run)")

    # the host threads: metrics -> sinks, snapshots -> evaluator -> metrics
    work = Work.per_chunk(cfg, schedule.algo, k)
    metrics_thread = MetricsThread(all_sinks, report=report)
    t_train = time.perf_counter()
    wall_offset = _last_wall(start.history)
    builder = RecordBuilder(cfg.num_seeds, work, t_start, t_train, wall_offset=wall_offset)
    tripwire = Tripwire()
    evaluator = (
        _evaluator(schedule, start.evaluate, metrics_thread, builder, report) if main else None
    )
    save_checkpoint = functools.partial(
        _save_checkpoint, run, cfg, tripwire, metrics_thread, distributed.layout(setup.placement)
    )
    local = distributed.local_copy  # this process's copy of replicated arrays
    stopped: str | None = None
    result = None
    chunks_run = 0
    first_dispatch_s = None  # seconds from the call of train() to the first chunk dispatched
    try:
        # the hot loop: dispatch, hand over, snapshot. The only wait is for chunk c-1 once
        # chunk c is queued.
        in_flight = None
        chunk = first_chunk - 1
        for chunk in range(first_chunk, first_chunk + n_chunks):
            last = chunk == first_chunk + n_chunks - 1
            state, chunk_metrics = schedule.chunk(state)
            chunk_metrics = local(chunk_metrics)
            chunks_run += 1
            if first_dispatch_s is None:
                first_dispatch_s = time.perf_counter() - t_start
            metrics_thread.submit(
                functools.partial(_chunk_record, builder, tripwire, chunk_metrics, chunk)
            )
            steps_before, steps = steps, steps + k * cfg.steps_per_iteration
            if evaluator is not None and not last and crossed(cfg.eval_every, steps_before, steps):
                evaluator.submit(local(state.agent.actor), env_steps=steps, chunk=chunk)
            if in_flight is not None:
                jax.block_until_ready(in_flight)
            in_flight = chunk_metrics
            tripwire.raise_if_tripped()
            stopped = _stop_at(stop, chunk)
            if not last and (stopped or crossed(cfg.checkpoint_every, steps_before, steps)):
                save_checkpoint(state, steps, chunk, in_flight)
            if stopped:
                break
        jax.block_until_ready(state)
        train_s = time.perf_counter() - t_train
        if not stopped:  # (save refuses a non-finite state: the guard for the last chunk)
            save_checkpoint(state, steps, chunk, in_flight)
        if evaluator is not None and not stopped:
            # final evaluation: deterministic policy, vmapped envs, every seed (awaited)
            actor = local(state.agent.actor)
            final = evaluator.submit(actor, env_steps=steps, chunk=chunk, final=True)
            try:
                _, result = final.result()
            except Exception:  # reported by the evaluator; the run still finishes
                result = None
    except jax.errors.JaxRuntimeError as e:
        if distributed.process_count() == 1:
            metrics_thread.close(timeout=10.0)
            raise
        # a collective failed: a peer died (or the coordinator went away). End at once,
        # naming it, rather than wait in the next collective or the shutdown barrier
        distributed.abort(distributed.peer_failure_message(e, wait_s=PEER_WAIT_S))
        raise
    except NonFiniteError as e:
        metrics_thread.close(timeout=10.0)
        note = checkpoint_note(checkpoint.latest(run.path), run.path)
        raise NonFiniteError(f"{e} {note}") from None
    except HostEnvError as e:
        # a host env's worker failed or stalled: the message names them; add what is kept
        metrics_thread.close(timeout=10.0)
        slow = " (an env that is only slow: raise --host-stall-timeout-s)"
        note = _host_env_note(checkpoint.latest(run.path), run.path)
        e.args = (f"{e}{slow if isinstance(e, WorkerStalledError) else ''}; {note}",)
        raise
    except BaseException:
        # an error or Ctrl-C: flush what the sinks have and stop the live console (the
        # evaluator is a daemon thread and is left to the interpreter's exit)
        metrics_thread.close(timeout=10.0)
        raise
    sink_drops = metrics_thread.close()
    if evaluator is None:  # not process 0: process 0 writes the summary and the policy
        return RunResult(run.path, {"process_index": distributed.process_index()}, state, schedule)
    evaluator.close()

    # finish: the summary, the final policy, the last lines on the console
    latest = checkpoint.latest(run.path)
    summary = records.summary(
        cfg,
        env_steps=local(state.env_steps),
        final_eval=records.final_eval_fields(result, evaluator.errors),
        times={
            "wall_s": time.perf_counter() - t_start,
            "train_s": train_s,
            "compile_s": start.compile_s,
        },
        compiles=_compiles(compile_log, first_dispatch_s, before_train_s, schedule.programs),
        work=work,
        chunks=chunks_run,
        schedule=schedule,
        host={**evaluator.stats(), "sink_drops": sink_drops, "sink_errors": metrics_thread.errors},
        memory=setup.memory,
        resumed_from=str(setup.point.checkpoint) if setup.point is not None else None,
        stopped=stopped,
        checkpoint=str(latest) if latest else None,
        resume=setup.point.record() if setup.point is not None else None,
    )
    if save:
        save_policy(run.path, local(state.agent.actor))
    run.write_summary(summary)
    say(_start_times_line(summary))
    say(f"run directory: {run.path}")
    say(stop.resume_hint(run.path, steps) if stop and stopped else _final_line(cfg, summary))
    return RunResult(run.path, summary, state, schedule)


PEER_WAIT_S = 30.0  # how long a process whose collective failed asks who died


def _host_env_note(latest: Path | None, run_dir: Path) -> str:
    """What a host env's failure leaves: the newest checkpoint (or none) and how to go on."""
    if latest is None:
        return "no checkpoint was written before it (set --checkpoint-every to keep one)"
    return (
        f"the last checkpoint, {latest}, is kept: once the env is fixed, resume it with "
        f"jaxspreeze train --resume {run_dir}"
    )


def _compiles(
    log: CompileLog | None,
    first_dispatch_s: float | None,
    before_train_s: float | None = None,
    kept: ProgramCache | None = None,
) -> Record | None:
    """The summary's compile accounting: all of it, per program, and the time to start.

    ``first_chunk_dispatched_s`` counts from the call of :func:`train`,
    ``command_to_first_chunk_s`` from the start of the process (the command: interpreter,
    imports and argument parsing included), ``command_to_train_s`` the difference;
    ``programs_loaded`` / ``programs_compiled`` name the programs the program cache gave
    and those traced and compiled (:mod:`jaxspreeze.programs`).
    """
    if log is None:
        return None
    from_command = None
    if first_dispatch_s is not None and before_train_s is not None:
        from_command = before_train_s + first_dispatch_s
    return {
        "compile_all_s": log.total_s(),
        "compile_programs_s": log.programs(),
        "first_chunk_dispatched_s": first_dispatch_s,
        "command_to_first_chunk_s": from_command,
        "command_to_train_s": before_train_s,
        **(kept or ProgramCache.off()).report(),
    }


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


def _start_times_line(summary: Record) -> str:
    """One console line: the command's start to the first chunk, and compiling in all."""
    first = summary.get("command_to_first_chunk_s")
    loaded = len(summary.get("programs_loaded") or ())
    kept = f"; {loaded} programs loaded from the program cache" if loaded else ""
    if first is None:
        return f"  compiling in all {summary.get('compile_all_s') or 0:.1f}s{kept}"
    return (
        f"  first chunk dispatched {first:.1f}s after the command started "
        f"({summary['command_to_train_s']:.1f}s before train()); compiling in all "
        f"{summary['compile_all_s']:.1f}s{kept} (every program: see summary.json)"
    )


def _stop_at(stop: GracefulStop | None, chunk: int) -> str | None:
    """Why the run stops after chunk ``chunk`` (a signal's name), or None to go on.

    One process: when a signal arrived. Several: a signal on any process stops every
    process at the same chunk, a little later (:func:`jaxspreeze.distributed.propose_stop`).
    """
    requested = stop.signal_name if stop is not None and stop.requested else None
    if distributed.process_count() == 1:
        return requested
    agreed = distributed.agreed_stop()
    if agreed is None and requested is not None:
        distributed.propose_stop(chunk, requested)  # the first proposal holds
        agreed = distributed.agreed_stop()
    if agreed is None or chunk < agreed[0]:
        return None
    if stop is not None and not stop.requested:
        stop.request(agreed[1])  # for the resume hint
    return agreed[1]


def _last_wall(history: list[Record]) -> float:
    """The wall time of the newest record kept from before a resume (0 for a new run)."""
    walls = [r["wall_s"] for r in history if isinstance(r.get("wall_s"), (int, float))]
    return float(max(walls)) if walls else 0.0


@dataclass(frozen=True)
class _Setup:
    """A run set up: its resolved config, devices, programs and (locked) run directory."""

    cfg: RunConfig
    placement: Placement
    point: resume_lib.ResumePoint | None  # where a resumed run continues from
    memory: dict[str, int]  # the memory estimate, checked against the devices
    schedule: schedules.Schedule
    run: rundir.RunDir
    abstract: TrainState | None = None  # the state's shapes (the init trace), if known


def _set_up(cfg: RunConfig, resume: str | Path | None, overwrite: bool) -> _Setup:
    """Resolve and check ``cfg`` (and the run it resumes), own its directory, build its
    programs.

    Raises ConfigError before anything is compiled or allocated. The run directory is
    locked on return (the caller releases it); a new run's directory holds ``config.json``
    and the ``NOT_STARTED`` marker, a resumed run's is unchanged.

    Several processes: they must hold the same config (else ConfigError on every one);
    process 0 claims the directory and tells the others its path (theirs is not locked);
    every step is agreed, so that when one process fails its setup all of them stop (the
    others with a ProcessError naming it).
    """
    # first: a brax env built by the validation reuses the cache's directory
    cache_dir = enable_compile_cache(cfg.compile_cache)
    cfg = config_lib.validate(cfg)
    if distributed.process_count() > 1:  # refuse processes started with different flags
        request = {
            "config": config_lib.to_dict(cfg),
            "resume": str(resume or ""),
            "overwrite": overwrite,
        }
        distributed.check_same_config(request)
    placement = devices.resolve(cfg.placement)
    main = distributed.is_main()  # process 0 owns (claims, locks, writes) the run directory
    run, error = None, None
    if main:
        try:
            run = rundir.claim(cfg, resume=resume)
        except Exception as e:
            error = e
    _agree(error, "claim the run directory")
    path = distributed.broadcast_text(str(run.path) if run is not None else "")
    run = run if run is not None else rundir.RunDir(path)  # the others: not locked
    try:
        try:
            point = None
            if resume is not None:
                point, cfg = resume_lib.find(run.path, cfg, placement)
            else:
                if main:
                    rundir.check_new(run, overwrite)
                cfg = dataclasses.replace(cfg, run_name=run.path.name)
            cfg = config_lib.resolve(cfg)
            schedule = schedules.make(cfg, placement)
            schedule.programs = program_cache(cache_dir, cfg, schedule)
            # the memory estimate reads the shapes of the init program's own trace (which
            # init reuses); a data-parallel estimate is a shard's, traced apart
            abstract = None if placement.data_parallel else schedule.init_abstract()
            estimate = memory.check_memory(cfg, placement, state=abstract)
            if point is None and main:
                run.start_new(cfg)
        except Exception as e:
            error = e
        _agree(error, "set up the run")
    except BaseException:
        if not main:
            pass
        elif resume is None:
            rundir.release_new(run)
        else:
            run.release()
        raise
    return _Setup(cfg, placement, point, estimate, schedule, run, abstract)


def _start_line(setup: _Setup) -> str:
    """What stopping during the start leaves, in one line."""
    if setup.point is not None:
        return (
            f"the resumed run had not started; {setup.run.path} is unchanged: resume it "
            f"again with --resume {setup.run.path}"
        )
    return (
        f"the run had not started; {setup.run.path} is marked {rundir.NOT_STARTED} (no "
        "checkpoint): start it again with the same --run-name"
    )


def budget_warnings(cfg: RunConfig, spec: EnvSpec) -> list[str]:
    """Setup choices worth a line on stderr: a replay buffer far larger than the run."""
    if algos.get(cfg.algo).on_policy or cfg.buffer_size <= cfg.total_steps:
        return []
    nbytes = memory.buffer_nbytes(cfg, spec)
    unused = nbytes * (cfg.buffer_size - cfg.total_steps) / cfg.buffer_size
    if unused < UNUSED_BUFFER_WARNING:
        return []
    return [
        f"buffer_size {cfg.buffer_size:,} holds more transitions than the run takes "
        f"(total_steps {cfg.total_steps:,} per seed): {unused / 2**30:.1f} GiB of the replay "
        "buffer is never filled; lower --buffer-size (a resumed run must keep it)"
    ]


UNUSED_BUFFER_WARNING = 2**30  # bytes of replay buffer never filled that earn a warning


def _start(setup: _Setup, say: Callable[[str], None], stop: GracefulStop | None) -> _Started:
    """Compile, then warm up (a new run) or restore the checkpoint (a resumed one).

    A resumed run's changed hyperparameters are set in the restored state, and only then
    is its run directory updated (records past the checkpoint dropped, config.json,
    resumes.jsonl). Returns the state (ready on the devices), the first chunk to run, the
    env steps per seed so far, the seconds spent compiling and the records kept.

    Process 0's evaluation is compiled ahead of time on a thread beside the init, the
    chunk's compile and the warm-up, and awaited before the first chunk: ``compile_s``
    counts the chunk's compile and that wait; the first evaluation compiles nothing.
    """
    schedule, point, run = setup.schedule, setup.point, setup.run
    check = stop.check if stop is not None else (lambda: None)
    main = distributed.is_main()
    evaluating = _evaluate_ahead(setup, setup.abstract) if main and setup.abstract else None
    state = schedule.init()
    if main and evaluating is None:
        evaluating = _evaluate_ahead(setup, state)
    t_compile = time.perf_counter()
    schedule.compile(state)
    compile_s = time.perf_counter() - t_compile
    check()
    if point is None:
        state = jax.block_until_ready(schedule.warmup(state))
        check()
        evaluate, waited = _await(evaluating)
        return _Started(state, 0, setup.cfg.warmup_steps, compile_s + waited, [], evaluate)
    template = state
    state = resume_lib.restore(point, template)
    if point.hyperparameters_changed:
        state = resume_lib.apply_hyperparameters(state, template)
    state = jax.block_until_ready(state)
    check()
    damaged = [p for p, _ in point.damaged]
    history = []  # process 0 updates the run directory (and keeps its records)
    if distributed.is_main():
        history = run.commit_resume(setup.cfg, point.env_steps, _resume_entry(point), damaged)
    for line in _resumed(point):
        say(line)
    evaluate, waited = _await(evaluating)
    return _Started(
        state, point.first_chunk, point.env_steps, compile_s + waited, history, evaluate
    )


def _evaluate_ahead(setup: _Setup, state: TrainState) -> Future:
    """The run's evaluation (:func:`_make_evaluate`), compiling on a thread for actors
    shaped like ``state``'s (arrays or abstract) on the eval device; the future gives it.

    A failed compile is reported (the evaluation then compiles at its first call).
    """
    evaluate = _make_evaluate(setup.cfg, setup.schedule)
    future: Future = Future()
    compile_ahead = getattr(evaluate, "compile", None)
    if compile_ahead is None:  # host envs: a loop of jitted policy calls
        future.set_result(evaluate)
        return future
    actor_like = abstract_on(state.agent.actor, setup.schedule.placement.eval)

    def work() -> None:
        try:
            compile_ahead(actor_like, setup.schedule.programs)
        except Exception as e:
            metrics.warn(
                f"evaluation not compiled ahead ({type(e).__name__}: {e}); it compiles when "
                "first called"
            )
        future.set_result(evaluate)

    threading.Thread(target=work, name="jaxspreeze-eval-compile", daemon=True).start()
    return future


def _await(evaluating: Future | None) -> tuple[Callable[[Any], EvalResult] | None, float]:
    """The evaluation compiled ahead (None if none) and the seconds waited for it."""
    if evaluating is None:
        return None, 0.0
    t0 = time.perf_counter()
    evaluate = evaluating.result()
    return evaluate, time.perf_counter() - t0


def _resume_entry(point: resume_lib.ResumePoint) -> Record:
    """The line ``resumes.jsonl`` gets for this resume."""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **point.record()}


def _sinks(
    cfg: RunConfig,
    run_dir: Path,
    quiet: bool,
    report: Report,
    history: list[Record],
    resumed_at: int | None,
) -> list[Sink]:
    """The sinks named in ``cfg.sinks`` that are available here."""
    return make_sinks(
        cfg.sinks,
        run_dir,
        total_steps=cfg.total_steps,
        config=config_lib.to_dict(cfg),
        num_seeds=cfg.num_seeds,
        quiet=quiet,
        report=report,
        history=history,
        resumed_at=resumed_at,
    )


def _make_evaluate(cfg: RunConfig, schedule: schedules.Schedule) -> Callable[[Any], EvalResult]:
    """``evaluate(actor)`` of every seed on the eval device (not compiled yet)."""
    if schedule.host:  # host envs: a loop over envs built for each evaluation
        return make_host_evaluate(
            schedule.algo.act, cfg.env, cfg.eval_episodes, seed=cfg.seed + 10_000
        )
    eval_env = make_env(cfg.env, cfg.eval_episodes, cfg.obs_keys)
    keys = jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds)
    device = schedule.placement.eval
    return make_seed_evaluate(schedule.algo.act, eval_env, jax.device_put(keys, device))


def _evaluator(
    schedule: schedules.Schedule,
    evaluate: Callable[[Any], EvalResult] | None,
    metrics_thread: MetricsThread,
    builder: RecordBuilder,
    report: Report,
) -> Evaluator:
    """The evaluator thread, on the eval device, running ``evaluate`` (compiled ahead by
    :func:`_start`, else made here); its results go to the metrics thread."""
    if evaluate is None:
        evaluate = _make_evaluate(schedule.cfg, schedule)
    return Evaluator(
        evaluate,
        device=schedule.placement.eval,
        on_result=functools.partial(_eval_record, metrics_thread, builder),
        report=report,
    )


def _eval_record(
    metrics_thread: MetricsThread,
    builder: RecordBuilder,
    snap: Snapshot,
    result: EvalResult,
    eval_s: float,
) -> None:
    """On the evaluator thread: hand an evaluation to the metrics thread.

    The record is built there, after the record of the chunk the snapshot was taken at
    (FIFO), whose ``wall_s`` it reuses.
    """
    metrics_thread.submit(functools.partial(builder.eval, snap, result, eval_s))


def _chunk_record(builder: RecordBuilder, tripwire: Tripwire, metrics: Any, chunk: int) -> Record:
    """On the metrics thread: chunk ``chunk``'s record; a non-finite one trips ``tripwire``."""
    return tripwire.check(builder.chunk(metrics, chunk))


def _save_checkpoint(
    run: rundir.RunDir,
    cfg: RunConfig,
    tripwire: Tripwire,
    metrics_thread: MetricsThread,
    layout: Record,
    state: TrainState,
    steps: int,
    chunk: int,
    metrics: Any,
) -> None:
    """Write a checkpoint of ``state``, never over the last good one with a broken state.

    ``metrics`` are chunk ``chunk``'s (device arrays). The metrics files get the records
    of every chunk up to ``chunk`` first (so a resume from this checkpoint finds them);
    the chunk's metrics name the quantity when the state turns out non-finite. The first
    checkpoint of a new run lifts its ``NOT_STARTED`` mark.

    Several processes: every process gathers the state (the replay rows and envs of all
    of them), process 0 writes it, and all agree that it was written before they go on;
    ``layout`` (processes, data-parallel devices) is recorded for the resume's check.
    """
    jax.block_until_ready(metrics)
    metrics_thread.flush()
    tripwire.raise_if_tripped()
    whole = distributed.gather(state)  # as it is in one process
    error: BaseException | None = None
    if distributed.is_main():
        try:
            checkpoint.save(
                run.path,
                whole,
                env_steps=steps,
                chunk=chunk,
                keep=cfg.keep_checkpoints,
                config=cfg,
                extra={"layout": layout},
            )
        except NonFiniteError as e:
            # name the quantity from this chunk's guard flags (the metrics thread may lag)
            record = records.chunk_record(jax.device_get(metrics), cfg.num_seeds)
            message = nonfinite_message(record | {"chunk": chunk})
            error = NonFiniteError(f"{message} ({e})" if message else str(e))
        except Exception as e:
            error = e
    _agree(error, f"write the checkpoint at env step {steps:,}")
    if distributed.is_main():
        run.mark_started()


def _agree(error: BaseException | None, what: str) -> None:
    """Raise ``error`` if this process failed ``what``; ProcessError if another did.

    Every process of a multi-process run calls it at the same point (a collective), so
    that all of them stop when one fails a step they took on their own. In one process it
    only raises ``error``.
    """
    failed = distributed.failed_processes(error is None)
    if error is not None:
        raise error
    if failed:
        raise ProcessError(
            f"process {failed[0]} of {distributed.process_count()} could not {what} (its "
            "own message says why); stopping"
        )


def _header(setup: _Setup) -> str:
    """The first console line of a run."""
    cfg, total = setup.cfg, setup.memory["total"]
    each = " per device" if setup.placement.data_parallel else ""  # one shard's share
    buffer = memory.buffer_nbytes(cfg, setup.schedule.env.spec) // setup.placement.data_devices
    return (
        f"jaxspreeze: {cfg.algo} on {cfg.env} | {cfg.num_seeds} seed(s) x {cfg.num_envs} envs | "
        f"{setup.placement.describe()} | memory estimate {total / 2**20:.1f} MiB{each} "
        f"(replay buffer {buffer / 2**20:.1f} MiB)"
    )


def _resumed(point: resume_lib.ResumePoint) -> list[str]:
    """The console lines of a resumed run: damaged checkpoints skipped, what changed."""
    lines = [
        f"  checkpoint {path} is damaged ({why}); set aside as damaged-{path.name}"
        for path, why in point.damaged
    ]
    lines.append(f"  resumed from {point.checkpoint} at {point.env_steps:,} env steps")
    if point.applied:
        listing = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in point.applied.items())
        lines.append(f"  changed since the checkpoint (applied from the first update): {listing}")
    if point.unused:
        listing = ", ".join(
            f"{k} {point.changes[k][0]!r} -> {point.changes[k][1]!r}" for k in point.unused
        )
        lines.append(f"  changed but not used by this run ({point.saved.algo}): {listing}")
    return lines


def _final_line(cfg: RunConfig, summary: Record) -> str:
    """The last console line of a finished run."""
    ret = summary["final_eval_return"]
    return (
        f"final eval return: {'n/a' if ret is None else f'{ret:.1f}'} (mean over "
        f"{cfg.num_seeds} seed(s), {cfg.eval_episodes} episodes each) | "
        f"{summary['env_steps_per_s']:,.0f} env steps/s | wall {summary['wall_s']:.1f}s"
    )
