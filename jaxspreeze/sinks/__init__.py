"""Metric sinks: where a run's records go. One module per family.

A sink is any object with ``name``, ``write(record)`` and ``close()``
(:class:`~jaxspreeze.core.types.Sink`); the metrics thread
(:class:`~jaxspreeze.sinks.metrics.MetricsThread`) gives each sink its own queue and thread.
The built-in sinks, named in ``RunConfig.sinks``:

- ``console``: a live progress line in a terminal, plain lines in a log, a pipe or a
  notebook (:mod:`.console`);
- ``jsonl``, ``csv``: ``metrics.jsonl`` and ``metrics.csv`` in the run directory (:mod:`.files`);
- ``tensorboard``: event files under ``<run>/tb/`` (:mod:`.tensorboard`);
- ``wandb``: Weights & Biases, when installed (:mod:`.wandb`);
- ``plots``: ``learning_curve.png`` and ``throughput.png`` at the end (:mod:`.plots`).

:class:`NotebookPlotSink` is for ``train(cfg, sinks=[NotebookPlotSink()])`` in a notebook.
To add a sink family, write a module here and name it in :func:`make_sinks`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.core.types import Record, Sink
from jaxspreeze.sinks.base import scalars
from jaxspreeze.sinks.console import ConsoleSink
from jaxspreeze.sinks.files import CsvSink, JsonlSink, csv_row, eval_columns, keep_until
from jaxspreeze.sinks.metrics import Report, warn
from jaxspreeze.sinks.plots import NotebookPlotSink, PlotsSink, in_notebook
from jaxspreeze.sinks.tensorboard import TensorBoardSink
from jaxspreeze.sinks.wandb import WandbSink

__all__ = [
    "ConsoleSink",
    "CsvSink",
    "JsonlSink",
    "NotebookPlotSink",
    "PlotsSink",
    "Sink",
    "TensorBoardSink",
    "WandbSink",
    "csv_row",
    "in_notebook",
    "keep_until",
    "make_sinks",
    "scalars",
]


def make_sinks(
    names: Sequence[str],
    run_dir: str | Path,
    *,
    total_steps: int,
    config: dict[str, Any] | None = None,
    num_seeds: int = 1,
    quiet: bool = False,
    report: Report | None = None,
    history: Sequence[Record] = (),
    resumed_at: int | None = None,
) -> list[Sink]:
    """The sinks named in ``names`` that can run here (a missing package is noted, skipped).

    ``quiet`` leaves out the console sink; ``config`` is what wandb records. A resumed
    run passes the records kept from before (``history``, for the end-of-run pictures)
    and the checkpoint's step (``resumed_at``: TensorBoard hides what came after it).
    """
    report = report or warn
    sinks: list[Sink] = []
    for name in names:
        if name == "console":
            if not quiet:
                sinks.append(ConsoleSink(total_steps, slots=num_seeds))
        elif name == "jsonl":
            sinks.append(JsonlSink(run_dir))
        elif name == "csv":
            sinks.append(CsvSink(run_dir, eval_columns(num_seeds)))
        elif name == "tensorboard":
            purge = None if resumed_at is None else resumed_at + 1
            sinks.append(TensorBoardSink(run_dir, purge_step=purge))
        elif name == "wandb":
            if importlib.util.find_spec("wandb") is None:
                report("wandb sink skipped: wandb is not installed (pip install wandb)")
                continue
            try:
                sinks.append(WandbSink(run_dir, config or {}, Path(run_dir).name))
            except Exception as e:
                report(f"wandb sink skipped: {type(e).__name__}: {e}")
        elif name == "plots":
            sinks.append(PlotsSink(run_dir, history))
    return sinks
