"""Metric sinks and the host thread that feeds them.

A record is a flat dict of JSON-ready values (numbers, strings, lists for per-seed
values) with a ``kind``: ``"chunk"`` (one per jitted chunk) or ``"eval"`` (one per
evaluation). Sinks are plain objects with ``name``, ``write(record)`` and ``close()``.

:class:`MetricsThread` builds each record on a host thread (that is where the device
arrays are fetched) and hands it to every sink through the sink's own bounded queue and
thread: a slow sink only falls behind (and drops records when its queue is full), a
failing sink is reported once by name; neither ever blocks or stops training.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

Record = dict[str, Any]
Report = Callable[[str], None]

# columns that eval records add; declared up front so the CSV header rarely changes
EVAL_COLUMNS = (
    "eval_return",
    "eval_return_std",
    "eval_length",
    "eval_s",
    "final",
)
_STOP = object()


class Sink(Protocol):
    """Receives one record per chunk (and eval records); ``close`` flushes."""

    name: str

    def write(self, record: Record) -> None:
        """Consume one record."""

    def close(self) -> None:
        """Flush and release resources."""


def clean(value: Any) -> Any:
    """JSON-ready: NaN/inf become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist"):
        return clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def warn(message: str) -> None:
    """Report a host-side problem on stderr without stopping anything."""
    print(f"jaxspreeze: warning: {message}", file=sys.stderr, flush=True)


def scalars(record: Record) -> Iterable[tuple[str, float]]:
    """The finite numeric values of a record, per-seed lists as ``<name>/seed<i>``."""
    for key, value in record.items():
        if key in ("kind", "env_steps", "chunk"):
            continue
        if isinstance(value, (list, tuple)):
            base = key.removesuffix("_per_seed")
            for i, v in enumerate(value):
                if _finite_number(v):
                    yield f"{base}/seed{i}", float(v)
        elif _finite_number(value):
            yield key, float(value)


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


# ------------------------------------------------------------------------------- files
class JsonlSink:
    """Appends one JSON object per record to ``metrics.jsonl``."""

    name = "jsonl"

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._f = self.path.open("a")

    def write(self, record: Record) -> None:
        """Append ``record`` as one line."""
        self._f.write(json.dumps(clean(record)) + "\n")
        self._f.flush()

    def close(self) -> None:
        """Close the file."""
        self._f.close()


def csv_row(record: Record) -> dict[str, Any]:
    """A record as CSV cells: per-seed lists become ``<name>_seed<i>`` columns, NaN empty."""
    row: dict[str, Any] = {}
    for key, value in clean(record).items():
        if isinstance(value, list):
            base = key.removesuffix("_per_seed")
            for i, v in enumerate(value):
                row[f"{base}_seed{i}"] = v
        else:
            row[key] = value
    return {k: ("" if v is None else v) for k, v in row.items()}


class CsvSink:
    """``metrics.csv``: one row per record (chunk and eval rows share one header).

    The header is the first record's columns plus the eval columns; a column that
    first appears later rewrites the file once with the wider header.
    """

    name = "csv"

    def __init__(self, run_dir: Path, extra_columns: Sequence[str] = EVAL_COLUMNS):
        self.path = Path(run_dir) / "metrics.csv"
        self._extra = list(extra_columns)
        self._columns: list[str] = []
        self._f: Any = None

    def write(self, record: Record) -> None:
        """Append ``record`` as one row."""
        row = csv_row(record)
        if self._f is None:
            columns = list(row) + [c for c in self._extra if c not in row]
            self._open(columns, rows=[])
        elif any(k not in self._columns for k in row):
            self._widen([k for k in row if k not in self._columns])
        self._writer.writerow(row)
        self._f.flush()

    def _open(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        self._columns = columns
        self._f = self.path.open("w", newline="")
        self._writer = csv.DictWriter(self._f, fieldnames=columns, restval="")
        self._writer.writeheader()
        self._writer.writerows(rows)

    def _widen(self, new: list[str]) -> None:
        self._f.close()
        with self.path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        self._open(self._columns + new, rows)

    def close(self) -> None:
        """Close the file."""
        if self._f is not None:
            self._f.close()


def read_tensorboard(logdir: str | Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the scalars in the event files under ``logdir``.

    Reads the TFRecord framing directly and parses events with tensorboardX's protobuf
    classes (the ``tensorboard`` package is not needed).
    """
    import struct

    from tensorboardX.proto import event_pb2

    out: dict[str, dict[int, float]] = {}
    for path in sorted(Path(logdir).glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4  # length, its crc, the event, its crc
            for value in event.summary.value:
                out.setdefault(value.tag, {})[int(event.step)] = float(value.simple_value)
    return out


def read_csv(path: str | Path) -> list[dict[str, str]]:
    """The rows of a ``metrics.csv`` (cells as strings, missing values as '')."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


class TensorBoardSink:
    """TensorBoard event files under ``<run>/tb/`` (tensorboardX, imported on first use).

    Chunk values are logged as ``train/<name>``, eval values as ``eval/<name>``, per-seed
    values as ``<prefix>/<name>/seed<i>``; the step is the record's ``env_steps``.
    """

    name = "tensorboard"

    def __init__(self, run_dir: Path):
        self.logdir = Path(run_dir) / "tb"
        self._writer: Any = None

    def write(self, record: Record) -> None:
        """Add every finite scalar of ``record`` at step ``env_steps``."""
        if self._writer is None:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(logdir=str(self.logdir), flush_secs=10)
        prefix = "eval" if record.get("kind") == "eval" else "train"
        step = int(record["env_steps"])
        for key, value in scalars(record):
            self._writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()


class WandbSink:
    """Weights & Biases (imported on use); ``WANDB_MODE=offline`` works without network."""

    name = "wandb"

    def __init__(self, run_dir: Path, config: dict[str, Any], run_name: str = ""):
        import wandb

        self._run = wandb.init(
            project="jaxspreeze", dir=str(run_dir), config=config, name=run_name or None
        )

    def write(self, record: Record) -> None:
        """Log every finite scalar of ``record`` at step ``env_steps``."""
        prefix = "eval" if record.get("kind") == "eval" else "train"
        data = {f"{prefix}/{k}": v for k, v in scalars(record)}
        data["env_steps"] = record["env_steps"]
        self._run.log(data)

    def close(self) -> None:
        """Finish the wandb run."""
        self._run.finish()


# ----------------------------------------------------------------------------- console
def _fmt(value: Any, spec: str = ",.0f") -> str:
    return format(value, spec) if _finite_number(value) else "n/a"


def _si(value: Any) -> str:
    """Compact count: 950, 12.3k, 4.56M."""
    if not _finite_number(value):
        return "n/a"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.0f}"


class ConsoleSink:
    """Live progress on the terminal: a rich progress bar, plain lines when not a TTY.

    The bar shows env steps, env steps/s, update samples/s (``upd/s``), the latest
    training and eval return, elapsed time and ETA; eval results are also printed as
    lines above it.
    """

    name = "console"

    def __init__(self, total_steps: int, *, live: bool | None = None, file: Any = None):
        self.total_steps = total_steps
        self._file = file
        self._live = sys.stdout.isatty() if live is None else live
        self._progress: Any = None
        self._task: Any = None
        self._eval = math.nan
        self._ret = math.nan  # the latest chunk in which episodes finished

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        console = Console(file=self._file)
        self._progress = Progress(
            BarColumn(bar_width=12),
            TextColumn("{task.fields[steps]} {task.fields[sps]} steps/s {task.fields[ups]} upd/s"),
            TextColumn("ret {task.fields[ret]} eval {task.fields[ev]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(compact=True),
            console=console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            "train", total=self.total_steps, steps="", sps="", ups="", ret="n/a", ev="n/a"
        )

    def write(self, record: Record) -> None:
        """Advance the bar (or print a line) for a chunk or eval record."""
        if record.get("kind") == "eval":
            self._eval = record.get("eval_return", math.nan)
        elif _finite_number(record.get("episode_return")):
            self._ret = record["episode_return"]
        if not self._live:
            self._write_line(record)
            return
        if self._progress is None:
            self._start()
        steps = record.get("env_steps", 0)
        if record.get("kind") == "eval":
            self._progress.console.print(self._eval_line(record))
            self._progress.update(self._task, ev=_fmt(self._eval, ".0f"))
            return
        self._progress.update(
            self._task,
            completed=min(steps, self.total_steps),
            steps=f"{_si(steps)}/{_si(self.total_steps)}",
            sps=_si(record.get("env_steps_per_s")),
            ups=_si(record.get("update_samples_per_s")),
        )
        self._progress.update(self._task, ret=_fmt(self._ret, ".0f"))

    @staticmethod
    def _eval_line(record: Record) -> str:
        std = record.get("eval_return_std")
        label = "final eval" if record.get("final") else "eval"
        return (
            f"  {label} @ {record['env_steps']:>9,} steps: return "
            f"{_fmt(record.get('eval_return'), '.1f')} ± {_fmt(std, '.1f')} "
            f"(length {_fmt(record.get('eval_length'), '.0f')})"
        )

    def _write_line(self, record: Record) -> None:
        out = self._file or sys.stdout
        if record.get("kind") == "eval":
            print(self._eval_line(record), file=out, flush=True)
            return
        print(
            f"  {record['env_steps']:>9,}/{self.total_steps:,} steps | return "
            f"{_fmt(self._ret, '8.1f'):>8} | "
            f"{_fmt(record.get('env_steps_per_s')):>9} steps/s | "
            f"{_fmt(record.get('update_samples_per_s')):>10} samples/s | "
            f"eval {_fmt(self._eval, '.1f')}",
            file=out,
            flush=True,
        )

    def close(self) -> None:
        """Stop the live bar (it stays on screen)."""
        if self._progress is not None:
            self._progress.stop()


# ------------------------------------------------------------------------------ thread
class _SinkWorker:
    """One sink behind its own bounded queue and thread."""

    def __init__(self, sink: Sink, maxsize: int, report: Report):
        self.sink = sink
        self.name = getattr(sink, "name", type(sink).__name__)
        self.error: str | None = None
        self._report = report
        self._queue: queue.Queue = queue.Queue(maxsize)
        self._lock = threading.Lock()
        self._dropped = 0
        self._thread = threading.Thread(target=self._run, name=f"sink-{self.name}", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Records this sink did not take (queue full, write failed, not finished)."""
        return self._dropped

    def _drop(self, n: int = 1) -> None:
        with self._lock:
            self._dropped += n

    def offer(self, record: Record) -> None:
        """Queue ``record`` without waiting; a full queue drops it."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._drop()

    def _fail(self, what: str, e: BaseException) -> None:
        if self.error is None:
            self.error = f"{type(e).__name__}: {e}"
            self._report(f"sink {self.name!r} failed in {what}: {self.error} (training goes on)")

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            if record is _STOP:
                break
            try:
                self.sink.write(record)
            except Exception as e:
                self._drop()
                self._fail("write", e)
        try:
            self.sink.close()
        except Exception as e:
            self._fail("close", e)

    def close(self, deadline: float) -> None:
        """Let the sink drain and close, until ``deadline`` (perf_counter seconds)."""
        try:
            self._queue.put(_STOP, timeout=max(deadline - time.perf_counter(), 0.01))
        except queue.Full:
            pass
        self._thread.join(max(deadline - time.perf_counter(), 0.01))
        left = sum(r is not _STOP for r in list(self._queue.queue))
        self._drop(left)
        if self._thread.is_alive():
            self._report(
                f"sink {self.name!r} did not finish in time; {left} queued record(s) dropped"
            )


class MetricsThread:
    """Builds records on a host thread and fans them out to the sinks.

    ``submit(item)`` never waits: ``item`` is a finished record or a zero-argument
    callable that builds one (e.g. fetching a chunk's device metrics with
    ``jax.device_get``, which blocks this thread, not the caller). Each sink has its own
    bounded queue (``sink.queue_size`` if it has one, else ``sink_maxsize``) and thread;
    records it cannot take are counted in :attr:`drops`.
    """

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        maxsize: int = 1024,
        sink_maxsize: int = 1024,
        report: Report | None = None,
    ):
        self._report = report or warn
        self._queue: queue.Queue = queue.Queue(maxsize)
        self._workers = [
            _SinkWorker(s, getattr(s, "queue_size", sink_maxsize), self._report) for s in sinks
        ]
        self.records = 0
        self.build_errors = 0
        self._lost = 0
        self._thread = threading.Thread(target=self._run, name="jaxspreeze-metrics", daemon=True)
        self._thread.start()

    def submit(self, item: Record | Callable[[], Record | None]) -> None:
        """Hand over a record (or a callable building one); never blocks."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._lost += 1

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                record = item() if callable(item) else item
            except Exception as e:
                self.build_errors += 1
                if self.build_errors == 1:
                    self._report(f"building a metrics record failed: {type(e).__name__}: {e}")
                continue
            if record is None:
                continue
            self.records += 1
            for worker in self._workers:
                worker.offer(record)

    @property
    def drops(self) -> dict[str, int]:
        """Dropped records per sink name (a record lost before the fan-out counts for all)."""
        return {w.name: w.dropped + self._lost for w in self._workers}

    @property
    def errors(self) -> dict[str, str]:
        """The first error of each sink that failed, by sink name."""
        return {w.name: w.error for w in self._workers if w.error is not None}

    def close(self, timeout: float = 120.0) -> dict[str, int]:
        """Build the queued records, let every sink drain and close; returns :attr:`drops`."""
        deadline = time.perf_counter() + timeout
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(max(deadline - time.perf_counter(), 0.01))
        if self._thread.is_alive():
            self._report("the metrics thread did not finish in time")
        for worker in self._workers:
            worker.close(deadline)
        return self.drops


# ----------------------------------------------------------------------------- factory
def make_sinks(
    names: Sequence[str],
    run_dir: Path,
    *,
    total_steps: int,
    config: dict[str, Any] | None = None,
    num_seeds: int = 1,
    quiet: bool = False,
    report: Report | None = None,
) -> list[Sink]:
    """The sinks named in ``names`` that can run here (a missing package is noted, skipped).

    ``quiet`` leaves out the console sink.
    """
    report = report or warn
    eval_columns = list(EVAL_COLUMNS)
    if num_seeds > 1:
        per_seed = ("eval_return", "eval_return_std", "eval_length")
        eval_columns += [f"{c}_seed{i}" for c in per_seed for i in range(num_seeds)]
    sinks: list[Sink] = []
    for name in names:
        if name == "console":
            if not quiet:
                sinks.append(ConsoleSink(total_steps))
        elif name == "jsonl":
            sinks.append(JsonlSink(run_dir))
        elif name == "csv":
            sinks.append(CsvSink(run_dir, eval_columns))
        elif name == "tensorboard":
            if importlib.util.find_spec("tensorboardX") is None:
                report("tensorboard sink skipped: tensorboardX is not installed")
            else:
                sinks.append(TensorBoardSink(run_dir))
        elif name == "wandb":
            if importlib.util.find_spec("wandb") is None:
                report("wandb sink skipped: wandb is not installed (pip install wandb)")
                continue
            try:
                sinks.append(WandbSink(run_dir, config or {}, Path(run_dir).name))
            except Exception as e:
                report(f"wandb sink skipped: {type(e).__name__}: {e}")
        elif name == "plots":
            from jaxspreeze.plots import PlotsSink

            sinks.append(PlotsSink(run_dir))
    return sinks
