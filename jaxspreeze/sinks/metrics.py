"""The metrics thread: builds records off the main thread and fans them out to the sinks.

:class:`MetricsThread` builds each record on a host thread (that is where a chunk's
device arrays are fetched) and hands it to every sink through the sink's own bounded
queue and thread: a slow sink only falls behind (and drops records when its queue is
full), a failing sink is reported once by name; neither ever blocks or stops training.
The sinks themselves (console, files, TensorBoard, ...) live in :mod:`jaxspreeze.sinks`.
:meth:`MetricsThread.flush` waits until the ``durable`` sinks (the metrics files) hold
every record submitted so far: the trainer calls it before a checkpoint, so that a resume
from that checkpoint finds the records of every chunk it includes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jaxspreeze.core import exiting, terminal
from jaxspreeze.core.types import Record, Sink

Report = Callable[[str], None]
_STOP = object()  # ends a queue: its consumer reads `for item in iter(queue.get, _STOP)`


class _Barrier:
    """Passed along the queues: set once every sink worker it waits for has reached it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._pending = 0

    def expect(self, n: int) -> None:
        """Wait for ``n`` arrivals (none: done at once)."""
        with self._lock:
            self._pending = n
            if n == 0:
                self.done.set()

    def arrive(self) -> None:
        """One worker has written every record before the barrier."""
        with self._lock:
            self._pending -= 1
            if self._pending <= 0:
                self.done.set()


def warn(message: str) -> None:
    """Report a host-side problem on stderr without stopping anything."""
    terminal.line(f"jaxspreeze: warning: {message}", err=True)


@dataclass(frozen=True)
class Note:
    """What happened to an evaluation besides its record, for the console (a sink with a
    ``note`` method): ``kind`` is ``"queued"`` (a snapshot at ``env_steps`` waits for the
    evaluator; its record or another note follows), ``"skipped"`` or ``"failed"``
    (``why`` says why). Notes keep their place among the records; no file holds them."""

    kind: str
    env_steps: int
    why: str = ""


class _SinkWorker:
    """One sink behind its own bounded queue and thread."""

    def __init__(self, sink: Sink, maxsize: int, report: Report):
        self.sink = sink
        self.name = getattr(sink, "name", type(sink).__name__)
        self.durable = bool(getattr(sink, "durable", False))
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

    def offer_note(self, note: Note) -> None:
        """Queue ``note`` behind the records, if the sink takes notes (a full queue drops
        it, counted as a record)."""
        if callable(getattr(self.sink, "note", None)):
            self.offer(note)  # type: ignore[arg-type]

    def offer_barrier(self, barrier: _Barrier) -> None:
        """Queue ``barrier`` behind the records; a full queue lets it pass at once."""
        try:
            self._queue.put_nowait(barrier)
        except queue.Full:
            barrier.arrive()

    def _fail(self, what: str, e: BaseException) -> None:
        if self.error is None:
            self.error = f"{type(e).__name__}: {e}"
            self._report(f"sink {self.name!r} failed in {what}: {self.error} (training goes on)")

    def _run(self) -> None:
        for record in iter(self._queue.get, _STOP):
            if isinstance(record, _Barrier):
                record.arrive()
                continue
            try:
                if isinstance(record, Note):
                    self.sink.note(record)  # type: ignore[attr-defined]
                else:
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
        left = sum(isinstance(r, dict) for r in list(self._queue.queue))
        self._drop(left)
        if self._thread.is_alive():
            self._report(
                f"sink {self.name!r} did not finish in time; {left} queued record(s) dropped"
            )


class MetricsThread:
    """Builds records on a host thread and fans them out to the sinks.

    ``submit(item)`` never waits: ``item`` is a finished record, a :class:`Note` (handed
    in its place among the records to the sinks that take notes) or a zero-argument
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

    def submit(self, item: Record | Note | Callable[[], Record | None]) -> None:
        """Hand over a record (or a callable building one); never blocks."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._lost += 1

    def _run(self) -> None:
        for item in iter(self._queue.get, _STOP):
            if isinstance(item, _Barrier):
                durable = [w for w in self._workers if w.durable]
                item.expect(len(durable))
                for worker in durable:
                    worker.offer_barrier(item)
                continue
            if isinstance(item, Note):
                for worker in self._workers:
                    worker.offer_note(item)
                continue
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

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until the durable sinks have written every record submitted so far.

        Returns False when that did not happen within ``timeout`` seconds (the queue was
        full or a sink is stuck); training goes on either way.
        """
        barrier = _Barrier()
        try:
            self._queue.put(barrier, timeout=timeout)
        except queue.Full:
            return False
        return barrier.done.wait(timeout)

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
            exiting.finish_at_exit(self._thread)  # it ends after its queue: not killed in it
        for worker in self._workers:
            worker.close(deadline)
        return self.drops
