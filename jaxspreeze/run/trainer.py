"""The host side: ``train(config)`` drives the jitted chunks and everything that waits.

The main thread only dispatches chunks. It hands each chunk's metrics (device arrays,
not yet computed) to the metrics thread, which waits for them, builds the chunk's record
and feeds the sinks; every ``eval_every`` env steps it hands a copy of the actor to the
evaluator thread, whose results go back to the metrics thread. The main thread waits for
chunk c-1 once chunk c is queued, so at most two chunks are in flight.

The threads hand over through queues (``MetricsThread.submit``, ``Evaluator.submit``)
and one event: a non-finite chunk seen by the metrics thread trips a
:class:`~jaxspreeze.run.guards.Tripwire`, which the main thread checks at every chunk
boundary. This module only orchestrates: the threads are wired in
:mod:`jaxspreeze.run.threads`, the start in :mod:`jaxspreeze.run.starting`, checkpoints at chunk
boundaries in :mod:`jaxspreeze.run.checkpointing`, failures become one line in
:mod:`jaxspreeze.run.faults`, the summary is :mod:`jaxspreeze.run.summary`'s, the console lines
:mod:`jaxspreeze.run.lines`'s and the caches :mod:`jaxspreeze.run.caches`'; the run directory is
:mod:`jaxspreeze.store.rundir`'s, resuming :mod:`jaxspreeze.store.resume`'s.

Before the first chunk a run is *starting*: it validates its config, claims (locks) its
run directory, builds and compiles its programs, then warms up or restores a checkpoint
(and sets a resumed run's changed hyperparameters). A signal during the start stops it
at once (:meth:`~jaxspreeze.run.stopping.GracefulStop.starting`); a resumed run's directory
is only updated once the restore has succeeded, a new run's is marked ``NOT_STARTED``
until its first checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax

from jaxspreeze import schedules
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.core import clock, terminal
from jaxspreeze.core.compiles import CompileLog
from jaxspreeze.envs import rebuild_env_record, register_env
from jaxspreeze.run import lines as console
from jaxspreeze.run import pbt
from jaxspreeze.run.checkpointing import save_checkpoint
from jaxspreeze.run.evalwatch import (
    BestPolicies,
    EvalWatch,
    OnEval,
    policy_writer,
    stop_reason,
    stopped_line,
    units,
)
from jaxspreeze.run.faults import explained
from jaxspreeze.run.records import Work
from jaxspreeze.run.starting import BEFORE_SETUP, Setup, Started, budget_warnings, set_up, start
from jaxspreeze.run.stopping import GracefulStop
from jaxspreeze.run.summary import Ran, compiles, run_summary, with_members
from jaxspreeze.run.threads import HostThreads, start_threads
from jaxspreeze.run.threads import sinks as run_sinks
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import distributed
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.sinks import Sink, metrics


@dataclass
class RunResult:
    """What :func:`train` returns: the run directory, the summary, the final state.

    ``result.final_return`` (``± result.final_return_se``) is the final evaluation's mean
    return; ``summary`` is what ``summary.json`` holds; ``schedule`` ran the chunks (its
    ``algo`` acts with ``state.agent.actor``).
    """

    run_dir: Path
    summary: dict[str, Any]
    state: TrainState | None = field(default=None, repr=False)
    schedule: schedules.Schedule | None = field(default=None, repr=False)

    @property
    def final_return(self) -> float | None:
        """The final evaluation's mean return (over seeds; a population's: over every
        member's seeds, ``summary["members"]`` has each member's); None when there was none
        (a stopped run, a failed evaluation, a process other than 0)."""
        return self.summary.get("final_eval_return")

    @property
    def final_return_se(self) -> float | None:
        """The standard error of :attr:`final_return` (None with it)."""
        return self.summary.get("final_eval_return_se")


def train(
    cfg: RunConfig,
    *,
    quiet: bool = False,
    sinks: list[Sink] | None = None,
    save: bool = True,
    resume: str | Path | None = None,
    signals: Literal["raise", "kill"] | None = "raise",
    overwrite: bool = False,
    on_eval: OnEval | None = None,
    env: Any = None,
) -> RunResult:
    """Train an agent as configured; returns the run directory and summary.

    ``env``: your own gymnasium env (instance, factory or vector env), trained as the host
    env ``user/<ClassName>`` (:func:`jaxspreeze.host.hostenvs.register_user_env`); or your
    own JAX env (a gymnax-style or Jumanji-style object, or ``(object, params)``), trained
    on the device as ``jax/<ClassName>`` (:mod:`jaxspreeze.envs.jaxenv`).

    Resolves ``cfg`` (run-level sizes left unset come from the algorithm's defaults),
    validates it and checks its memory estimate first (raising
    :class:`~jaxspreeze.core.errors.ConfigError` before anything is compiled or allocated),
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
    see :mod:`jaxspreeze.store.rundir`); a directory that already holds a run is refused unless
    it is resumed or ``overwrite`` is given.

    Checkpoints (the whole run state) are written every ``cfg.checkpoint_every`` env
    steps at chunk boundaries and at the end. ``resume=RUN_DIR`` continues that run from
    its newest intact checkpoint (bitwise as if never interrupted, for the same config;
    what a changed config does is :mod:`jaxspreeze.store.resume`'s rule: every change is listed,
    and applied from the first resumed update or refused). The metrics files continue
    from the checkpoint's step. ``signals``: SIGINT/SIGTERM stop at the next chunk
    boundary with a checkpoint (``summary["stopped"]`` names the signal); during the
    start (compile, warm-up, restore) and for a second SIGINT they stop at once: raising
    :class:`~jaxspreeze.run.stopping.StopRequested` / ``KeyboardInterrupt`` (``"raise"``) or
    ending the process with one line (``"kill"``, the CLI's choice, prompt even inside an
    XLA call); ``None`` leaves the signal handlers alone. A NaN/inf in a loss, gradient
    or parameter stops training with :class:`~jaxspreeze.core.errors.NonFiniteError` naming
    the step, the quantity and the newest checkpoint, if any.

    Evaluations draw fresh starts and report a standard error; the best so far is kept in
    ``policy-best.msgpack`` and restored by a resume (:mod:`jaxspreeze.run.evalwatch`). An
    evaluation at or above ``cfg.stop_at_return`` (mean over seeds), or ``on_eval(record)``
    (metrics thread) returning True, stops the run with a checkpoint at the evaluation
    point after it (one process: no evaluation is skipped, so the same env step each time).

    Several processes (after :func:`jaxspreeze.setup.distributed.initialize`; the placement is
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
    command = clock.take_command_start()  # the jaxspreeze command's start, if it is one
    wall_from = (command, "command") if command else (time.time(), "train()")  # the wall's 0
    before_train_s = time.time() - clock.process_started()  # the process's start to this call
    main = distributed.is_main()  # process 0 (of a multi-process run) owns the output
    quiet = quiet or not main
    say = (lambda text: None) if quiet else terminal.line
    terminal.quiet_third_party(cfg.env)  # MuJoCo's and brax's repeated notices, once
    stop = GracefulStop(second=signals) if signals else None
    setup: Setup | None = None
    if env is not None and isinstance(cfg, RunConfig):  # a user's env: jax/ or user/<Class>
        cfg = cfg.replace(env=register_env(env))
    elif env is None and resume is not None and Path(resume).is_dir():
        rebuild_env_record(resume)  # a user's JAX env the run recorded, if it can be rebuilt
    try:
        # every trace, lowering and compile of the run (memory estimate, init, warm-up,
        # chunk, evaluation), for the summary
        with stop or contextlib.nullcontext(), CompileLog() as compile_log:
            starting = stop.starting(BEFORE_SETUP) if stop else contextlib.nullcontext()
            # a line that says what is going on while the start takes its time (a live
            # one in a terminal; elsewhere a line every 30 s while it sets up)
            working = terminal.Working("setting up", enabled=not quiet)
            with starting, working:
                # config, devices, resume point, memory check, run directory (locked)
                setup = set_up(cfg, resume, overwrite)
                if stop is not None:
                    stop.run_dir = setup.run.path
                    stop.set_start_line(console.start_line(setup.run.path, setup.point is not None))
                say(console.header(setup.plan, setup.memory))
                k = setup.schedule.iterations_per_chunk
                notes = [*budget_warnings(setup.plan), *console.start_warnings(setup.plan, k)]
                for line in notes if main else []:
                    metrics.warn(line)
                # (start() says what it compiles, and in a log a line every few seconds)
                working.set(console.working_text(setup.point is not None), lines=False)
                with explained(setup.run.path, None):  # e.g. a host env stalled warming up
                    started = start(setup, say, stop)
            return _run(setup, started, t_start, say, quiet, sinks, save, stop,
                        compile_log, (before_train_s, wall_from), on_eval)  # fmt: skip
    finally:
        terminal.status(None, keep=True)  # a live line left by a failure: an error goes below
        if setup is not None:
            setup.schedule.close()  # the host schedule's workers and envs
            setup.run.release()


def crossed(every: int, steps_before: int, steps_after: int) -> bool:
    """True when a multiple of ``every`` (> 0) lies in ``(steps_before, steps_after]``."""
    return every > 0 and steps_after // every > steps_before // every


def _run(
    setup: Setup,
    started: Started,
    t_start: float,
    say: Callable[[str], None],
    quiet: bool,
    extra: list[Sink] | None,
    save: bool,
    stop: GracefulStop | None,
    compile_log: CompileLog | None = None,
    clocks: tuple[float, tuple[float, str]] | None = None,
    on_eval: OnEval | None = None,
) -> RunResult:
    """Run the chunks of a started run, then its final evaluation, summary and policy.

    ``clocks``: the seconds from the process's start to the call of ``train``, and where
    the run's wall time counts from (``summary.run_summary``'s ``wall_from``)."""
    before_train_s, wall_from = clocks or (None, None)
    cfg, schedule, run = setup.cfg, setup.schedule, setup.run
    main = distributed.is_main()  # the others run no sinks and no evaluator
    resumed_at = setup.point.env_steps if setup.point is not None else None
    all_sinks = run_sinks(cfg, run.path, quiet, started.history, resumed_at, extra) if main else []
    k = schedule.iterations_per_chunk
    spi = setup.plan.steps_per_iteration
    remaining = math.ceil(max(cfg.total_steps - started.steps, 0) / spi)
    n_chunks = math.ceil(remaining / k)
    say(console.ready_line(n_chunks, k))
    if "console" in cfg.sinks and n_chunks:
        say(console.COLUMNS)

    # the host threads: metrics -> sinks, snapshots -> evaluator -> metrics
    work = Work.per_chunk(setup.plan, schedule.algo, k)
    watch = _watch(setup, started, on_eval) if main else None
    host = start_threads(
        all_sinks, schedule, work, t_start, started.history, started.evaluate, main, watch
    )
    with explained(run.path, host.metrics, cfg.checkpoint_every):
        ran = _chunks(setup, started, host, n_chunks, stop, t_start, watch)
    sink_drops = host.metrics.close()
    if host.evaluator is None:  # not process 0: process 0 writes the summary and the policy
        index = {"process_index": distributed.process_index()}
        return RunResult(run.path, index, ran.state, schedule)
    host.evaluator.close()

    # finish: the summary, the final policy, the last lines on the console
    summary = run_summary(
        cfg, schedule, run.path, host, ran, t_start=t_start, compile_s=started.compile_s,
        sink_drops=sink_drops, estimate=setup.memory, point=setup.point, wall_from=wall_from,
        compiles=compiles(compile_log, ran.first_dispatch_s, before_train_s, schedule.programs),
        best=watch.bests.records() if watch is not None and watch.bests is not None else None,
    )  # fmt: skip
    if save:  # the actor trained (a PBT copy after the last chunk is the checkpoint's only)
        save_policy(run.path, distributed.local_copy(ran.trained_actor))
    if cfg.population:  # every member: its row in the summary and its own policy file
        rows = with_members(summary, setup, started.history, host, ran, save)
        summary = pbt.with_lineage(rows, setup, ran.steps)  # a PBT run: its values then and now
    run.write_summary(summary)
    hint = stop.resume_hint(run.path, ran.steps) if stop and ran.stopped else None
    stopped = stopped_line(ran.stopped, run.path) or hint
    for line in console.end_lines(cfg, summary, run.path, stopped):
        say(line)
    return RunResult(run.path, summary, ran.state, schedule)


SEEN_DEADLINE_S = 600.0  # _seen's longest wait for the metrics thread (a stuck sink)


def _seen(
    evaluating: futures.Future, host: HostThreads, watch: EvalWatch, stop: GracefulStop | None
) -> str | None:
    """Wait until ``watch`` has seen the evaluation ``evaluating`` (it finished and the
    metrics thread built its record: every record before this chunk's is through), then
    its reason to stop. A signal meanwhile ends the wait (None: the signal stops the run
    at this boundary); a metrics thread held past :data:`SEEN_DEADLINE_S` too."""
    signalled = lambda: stop is not None and stop.requested
    while not futures.wait([evaluating], timeout=0.25).done:
        if signalled():
            return None
    deadline = time.perf_counter() + SEEN_DEADLINE_S
    while not host.metrics.flush(timeout=1.0):  # behind a long chunk's record, or a sink
        if signalled() or time.perf_counter() > deadline:
            return None
    return watch.reason


def _chunks(
    setup: Setup,
    started: Started,
    host: HostThreads,
    n_chunks: int,
    stop: GracefulStop | None,
    t_start: float,
    watch: EvalWatch | None = None,
) -> Ran:
    """Dispatch ``n_chunks`` chunks, with evaluations, checkpoints and stops at their
    boundaries; then the last checkpoint and the final evaluation (unless stopped)."""
    cfg, schedule, evaluator = setup.cfg, setup.schedule, host.evaluator
    layout = distributed.layout(setup.placement)
    save = functools.partial(save_checkpoint, setup.run, cfg, host.tripwire, host.metrics, layout)
    population = pbt.PBT(setup)  # exploit and explore at its intervals (a no-op without --pbt)
    local = distributed.local_copy  # this process's copy of replicated arrays
    k, spi = schedule.iterations_per_chunk, setup.plan.steps_per_iteration
    state, steps, chunk = started.state, started.steps, started.first_chunk - 1
    trained = state.agent.actor  # the actor as trained, before a PBT step's copies
    stopped, result, in_flight = None, None, None
    first_dispatch_s = None
    # Where an evaluation may stop the run (--stop-at-return, on_eval; one process), none
    # is skipped and the stop does not depend on the evaluator's speed: at each evaluation
    # point the previous evaluation is awaited and seen by the watch before the next is
    # queued, and only then is the watch asked (so a run of a seed stops at the same env
    # step every time: the evaluation point after the one that reached the target).
    every_evaluation = bool(watch and watch.stops) and distributed.process_count() == 1
    evaluating: futures.Future | None = None
    # the hot loop: dispatch, hand over, snapshot. The only wait is for chunk c-1 once
    # chunk c is queued.
    for chunk in range(started.first_chunk, started.first_chunk + n_chunks):
        last = chunk == started.first_chunk + n_chunks - 1
        called = time.perf_counter()
        state, chunk_metrics = schedule.chunk(state)
        chunk_metrics = local(chunk_metrics)
        if first_dispatch_s is None:  # a host schedule's chunk runs in the call: its start
            first_dispatch_s = (called if schedule.host else time.perf_counter()) - t_start
        steps_before, steps = steps, steps + k * spi
        evaluate = (
            evaluator is not None and not last and crossed(cfg.eval_every, steps_before, steps)
        )
        reached = watch.reason if every_evaluation and chunk == started.first_chunk else None
        if evaluate and every_evaluation and evaluating is not None:
            reached = _seen(evaluating, host, watch, stop)
        host.chunk(chunk_metrics, chunk)
        # evaluations see the actor as trained: each member's own, before PBT's copies
        if evaluate and reached is None:
            evaluating = evaluator.submit(local(state.agent.actor), env_steps=steps, chunk=chunk)
        trained = state.agent.actor
        state = population.step(state, chunk_metrics, steps_before, steps)
        if in_flight is not None:
            jax.block_until_ready(in_flight)
        in_flight = chunk_metrics
        host.tripwire.raise_if_tripped()
        # a signal, or a target an evaluation reached; a stop at the last chunk changes
        # nothing: the run is complete and ends as any complete run does (its checkpoint,
        # the final evaluation)
        why = stop_reason(stop, None if every_evaluation else watch, chunk) or reached
        stopped = None if why and last else why
        if not last and (stopped or crossed(cfg.checkpoint_every, steps_before, steps)):
            save(state, steps, chunk, in_flight)
        if stopped:
            break
    jax.block_until_ready(state)
    train_s = time.perf_counter() - host.t_train
    if not stopped:  # (save refuses a non-finite state: the guard for the last chunk)
        save(state, steps, chunk, in_flight)
    if evaluator is not None and not stopped:
        # final evaluation: deterministic policy, vmapped envs, every seed (awaited)
        final = evaluator.submit(local(trained), env_steps=steps, chunk=chunk, final=True)
        try:
            _, result = final.result()
        except Exception:  # reported by the evaluator; the run still finishes
            result = None
    chunks = chunk - started.first_chunk + 1
    return Ran(state, steps, chunks, stopped, train_s, first_dispatch_s, result, trained)


def _watch(setup: Setup, started: Started, on_eval: OnEval | None) -> EvalWatch:
    """Process 0's watch of the run's evaluations: its best policies (a new run's start
    empty; a resumed run's are restored as they were at its checkpoint) and its stops."""
    cfg, run = setup.cfg, setup.run
    bests = BestPolicies(run.path, units(cfg), policy_writer(cfg, setup.schedule.algo))
    watch = EvalWatch(run.path, cfg.stop_at_return, on_eval, metrics.warn, bests)
    if setup.point is None:
        bests.start_new()
    else:
        watch.restore(setup.point.env_steps, started.history)
    return watch
