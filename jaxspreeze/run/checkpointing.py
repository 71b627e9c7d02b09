"""A run's checkpoint at a chunk boundary: after the records, never over a good one with a
broken state, written once for every process."""

from __future__ import annotations

from typing import Any

import jax

from jaxspreeze.core.errors import NonFiniteError
from jaxspreeze.core.types import Record
from jaxspreeze.run import records
from jaxspreeze.run.faults import agree
from jaxspreeze.run.guards import Tripwire, nonfinite_message
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import distributed
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.sinks.metrics import MetricsThread
from jaxspreeze.store import checkpoint, rundir


def save_checkpoint(
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
            record = records.chunk_record(jax.device_get(metrics), cfg.slots)
            message = nonfinite_message(record | {"chunk": chunk})
            error = NonFiniteError(f"{message} ({e})" if message else str(e))
        except Exception as e:
            error = e
    agree(error, f"write the checkpoint at env step {steps:,}")
    if distributed.is_main():
        run.mark_started()
