"""A finished run's ``summary.json``: what :func:`jaxspreeze.records.summary` is given.

The final evaluation, the counts and times of the chunks, the host threads' counters, the
memory estimate, the resume and the stop, and the compile accounting of the whole run
(:func:`compiles`).
"""

from __future__ import annotations

import time
from pathlib import Path

from jaxspreeze import checkpoint, distributed, records, schedules
from jaxspreeze.compiles import CompileLog
from jaxspreeze.config import RunConfig
from jaxspreeze.evaluate import EvalResult
from jaxspreeze.iteration import TrainState
from jaxspreeze.programs import ProgramCache
from jaxspreeze.resume import ResumePoint
from jaxspreeze.threads import HostThreads
from jaxspreeze.types import Record


def run_summary(
    cfg: RunConfig,
    schedule: schedules.Schedule,
    run_dir: Path,
    host: HostThreads,
    *,
    state: TrainState,
    final: EvalResult | None,
    t_start: float,
    train_s: float,
    compile_s: float,
    chunks: int,
    sink_drops: int,
    estimate: dict[str, int],
    point: ResumePoint | None,
    stopped: str | None,
    compiles: Record | None,
) -> Record:
    """The summary of a run on process 0 (whose ``host`` threads hold the evaluator).

    ``wall_s`` counts from ``t_start`` (the call of ``train``) to this call; ``estimate``
    is the memory estimate, ``point`` where a resumed run continued from, ``compiles``
    :func:`compiles`' accounting.
    """
    evaluator = host.evaluator
    assert evaluator is not None, "process 0 writes the summary"
    latest = checkpoint.latest(run_dir)
    return records.summary(
        cfg,
        env_steps=distributed.local_copy(state.env_steps),
        final_eval=records.final_eval_fields(final, evaluator.errors),
        times={"wall_s": time.perf_counter() - t_start, "train_s": train_s, "compile_s": compile_s},
        compiles=compiles,
        work=host.work,
        chunks=chunks,
        schedule=schedule,
        host={**evaluator.stats(), "sink_drops": sink_drops, "sink_errors": host.metrics.errors},
        memory=estimate,
        resumed_from=str(point.checkpoint) if point is not None else None,
        stopped=stopped,
        checkpoint=str(latest) if latest else None,
        resume=point.record() if point is not None else None,
    )


def compiles(
    log: CompileLog | None,
    first_dispatch_s: float | None,
    before_train_s: float | None = None,
    kept: ProgramCache | None = None,
) -> Record | None:
    """The summary's compile accounting: all of it, per program, and the time to start.

    ``first_chunk_dispatched_s`` counts from the call of :func:`jaxspreeze.trainer.train`,
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
