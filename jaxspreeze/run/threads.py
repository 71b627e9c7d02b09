"""A run's host threads, wired: the metrics thread (records -> sinks) and the evaluator.

The main thread hands each chunk's metrics (device arrays, not yet computed) to the
metrics thread, which waits for them, builds the chunk's record and feeds the sinks; a
non-finite chunk trips the :class:`~jaxspreeze.run.guards.Tripwire` the main thread checks.
Snapshots of the actor go to the evaluator thread (process 0 only), whose results go back
to the metrics thread. The evaluation is made (and compiled ahead, on a thread beside the
start's compiles) here too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import (
    EvalResult,
    Evaluator,
    Snapshot,
    eval_seed,
    make_host_evaluate,
    make_seed_evaluate,
)
from jaxspreeze.core import exiting
from jaxspreeze.core.compiles import start_beside
from jaxspreeze.core.types import Record
from jaxspreeze.envs import make_env
from jaxspreeze.run.evalwatch import EvalWatch
from jaxspreeze.run.guards import Tripwire
from jaxspreeze.run.records import RecordBuilder, Work
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup import population
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.sinks import Sink, make_sinks, metrics
from jaxspreeze.sinks.metrics import MetricsThread, Report


@dataclass(frozen=True)
class HostThreads:
    """The host threads of a run: metrics -> sinks, snapshots -> evaluator -> metrics.

    ``evaluator`` is None on every process but process 0; ``t_train`` is when training
    started (the records' ``train_s`` and the summary's count from it).
    """

    metrics: MetricsThread
    builder: RecordBuilder
    tripwire: Tripwire
    evaluator: Evaluator | None
    work: Work
    t_train: float

    def chunk(self, chunk_metrics: Any, chunk: int) -> None:
        """Hand chunk ``chunk``'s metrics (device arrays) to the metrics thread."""
        self.metrics.submit(
            functools.partial(_chunk_record, self.builder, self.tripwire, chunk_metrics, chunk)
        )


def start_threads(
    all_sinks: list[Sink],
    schedule: schedules.Schedule,
    work: Work,
    t_start: float,
    history: list[Record],
    evaluate: Callable[[Any], EvalResult] | None,
    main: bool,
    watch: EvalWatch | None = None,
) -> HostThreads:
    """Start the metrics thread over ``all_sinks`` and, on process 0 (``main``), the
    evaluator running ``evaluate`` (made here if None); ``history``: the records kept from
    before a resume (their wall time goes on); ``watch`` sees every evaluation after its
    record (the best policy, a stop at a target)."""
    report = metrics.warn  # how the host threads report a problem (stderr)
    metrics_thread = MetricsThread(all_sinks, report=report)
    t_train = time.perf_counter()
    wall_offset = _last_wall(history)
    cfg = schedule.cfg
    builder = RecordBuilder(
        cfg.slots,
        work,
        t_start,
        t_train,
        wall_offset,
        cfg.num_seeds if cfg.population else 0,
        episodes=cfg.eval_episodes,
    )
    tripwire = Tripwire()
    evaluator = (
        _evaluator(schedule, evaluate, metrics_thread, builder, report, tripwire, watch)
        if main
        else None
    )
    return HostThreads(metrics_thread, builder, tripwire, evaluator, work, t_train)


def sinks(
    cfg: RunConfig,
    run_dir: Path,
    quiet: bool,
    history: list[Record],
    resumed_at: int | None,
    extra: list[Sink] | None = None,
) -> list[Sink]:
    """The sinks named in ``cfg.sinks`` that are available here, then ``extra``."""
    named = make_sinks(
        cfg.sinks,
        run_dir,
        total_steps=cfg.total_steps,
        config=config_lib.to_dict(cfg),
        num_seeds=cfg.slots,
        quiet=quiet,
        report=metrics.warn,
        history=history,
        resumed_at=resumed_at,
    )
    return named + list(extra or [])


def evaluate_ahead(schedule: schedules.Schedule, state: TrainState) -> Future:
    """The run's evaluation (:func:`make_evaluate`), compiling on a thread for actors
    shaped like ``state``'s (arrays or abstract) on the eval device; the future gives it.

    A failed compile is reported (the evaluation then compiles at its first call). On
    one CPU (:func:`~jaxspreeze.core.compiles.compiles_overlap` False) it compiles here,
    before this returns.
    """
    evaluate = make_evaluate(schedule)
    future: Future = Future()
    compile_ahead = getattr(evaluate, "compile", None)
    if compile_ahead is None:  # host envs: a loop of jitted policy calls
        future.set_result(evaluate)
        return future
    actor_like = abstract_on(state.agent.actor, schedule.placement.eval)

    def work() -> None:
        try:
            compile_ahead(actor_like, schedule.programs)
        except Exception as e:
            metrics.warn(
                f"evaluation not compiled ahead ({type(e).__name__}: {e}); it compiles when "
                "first called"
            )
        future.set_result(evaluate)

    thread = start_beside(work, "jaxspreeze-eval-compile")
    if thread is not None:
        exiting.finish_at_exit(thread)  # a compile in flight is not killed by the exit
    return future


def await_evaluate(
    evaluating: Future | None,
) -> tuple[Callable[[Any], EvalResult] | None, float]:
    """The evaluation compiled ahead (None if none) and the seconds waited for it."""
    if evaluating is None:
        return None, 0.0
    t0 = time.perf_counter()
    evaluate = evaluating.result()
    return evaluate, time.perf_counter() - t0


def make_evaluate(schedule: schedules.Schedule) -> Callable[[Any], EvalResult]:
    """``evaluate(actor, env_steps)`` of every seed of the schedule's plan, with its
    algorithm's policy, on the eval device (not compiled yet): ``eval_episodes`` episodes
    per seed from fresh starts (the run's evaluation key folded with ``env_steps``)."""
    cfg = schedule.plan.cfg
    if schedule.host:  # host envs: a loop over envs built for each evaluation
        return make_host_evaluate(schedule.algo, cfg.env, cfg.eval_episodes, eval_seed(cfg.seed))
    eval_env = make_env(cfg.env, cfg.eval_episodes, cfg.obs_keys)
    # a member's keys are its run's; each evaluation folds its env step into them
    keys = population.slot_keys(jax.random.key(eval_seed(cfg.seed)), cfg)
    device = schedule.placement.eval
    return make_seed_evaluate(schedule.algo, eval_env, jax.device_put(keys, device))


def _evaluator(
    schedule: schedules.Schedule,
    evaluate: Callable[[Any], EvalResult] | None,
    metrics_thread: MetricsThread,
    builder: RecordBuilder,
    report: Report,
    tripwire: Tripwire,
    watch: EvalWatch | None = None,
) -> Evaluator:
    """The evaluator thread, on the eval device, running ``evaluate`` (compiled ahead by
    :func:`jaxspreeze.run.starting.start`, else made here); its results, and a note of each
    snapshot queued, skipped or failed, go to the metrics thread."""
    if evaluate is None:
        evaluate = make_evaluate(schedule)
    return Evaluator(
        evaluate,
        device=schedule.placement.eval,
        on_result=functools.partial(_eval_record, metrics_thread, builder, watch, tripwire),
        report=report,
        on_note=metrics_thread.submit,  # in their place among the records (the console)
    )


def _eval_record(
    metrics_thread: MetricsThread,
    builder: RecordBuilder,
    watch: EvalWatch | None,
    tripwire: Tripwire,
    snap: Snapshot,
    result: EvalResult,
    eval_s: float,
) -> None:
    """On the evaluator thread: hand an evaluation to the metrics thread, where its record
    is built, then ``watch`` sees it.

    The record is built there, after the record of the chunk the snapshot was taken at
    (FIFO), whose ``wall_s`` it reuses; by then that chunk (and every earlier one) has
    passed the non-finite guard or tripped ``tripwire``: an evaluation of a snapshot taken
    at or after a non-finite chunk neither becomes the best nor stops the run.
    """
    actor = snap.actor  # (the evaluator frees the snapshot's copy once this returns)

    def build() -> Record:
        record = builder.eval(snap, result, eval_s)
        if watch is not None:
            watch.seen(snap, result, record, actor, tripped=tripwire.tripped_by(snap.chunk))
        return record

    metrics_thread.submit(build)


def _chunk_record(builder: RecordBuilder, tripwire: Tripwire, metrics: Any, chunk: int) -> Record:
    """On the metrics thread: chunk ``chunk``'s record; a non-finite one trips ``tripwire``."""
    return tripwire.check(builder.chunk(metrics, chunk))


def _last_wall(history: list[Record]) -> float:
    """The wall time of the newest record kept from before a resume (0 for a new run)."""
    walls = [r["wall_s"] for r in history if isinstance(r.get("wall_s"), (int, float))]
    return float(max(walls)) if walls else 0.0
