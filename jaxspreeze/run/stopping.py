"""Graceful stop: SIGINT/SIGTERM ask the trainer to stop at the next chunk boundary.

Usage (host side)::

    with GracefulStop() as stop:
        with stop.starting("interrupted while compiling; nothing was trained"):
            ...  # compile, warm up: a signal here stops the start at once
        for chunk in range(n):
            state, metrics = schedule.chunk(state)
            ...
            if stop.requested:
                break   # checkpoint, flush the sinks, print how to resume, exit 0

While training, the first SIGINT or SIGTERM only sets :attr:`GracefulStop.requested`
(and ``signal_name``); further SIGTERMs keep the request. A second SIGINT means "now".
During the start (inside :meth:`GracefulStop.starting`: compiling, warming up,
restoring) there is nothing to save, so the first signal already means "now".

What "now" does depends on ``second``:

- ``"kill"`` (meant for the CLI): a watcher thread learns of every signal from CPython's
  wakeup file descriptor, even while the main thread is blocked inside XLA (compiling, or
  waiting for a chunk) where Python signal handlers cannot run, and where two quick
  Ctrl-Cs would otherwise reach the handler as one. It prints one line to stderr and ends
  the process by the signal's default action (a shell reports 130 for SIGINT, 143 for
  SIGTERM). No cleanup: checkpoints are atomic, so the newest one stays resumable.
- ``"raise"`` (the default; keeps a notebook kernel alive): the Python handler raises
  :class:`KeyboardInterrupt` for a second SIGINT, and a signal during the start makes
  :meth:`GracefulStop.check` (called between the steps of the start, and when the start
  ends) raise :class:`StopRequested`. Both take effect as soon as the main thread runs
  Python again, i.e. after the XLA call it is blocked in.

Several processes stop together: :func:`stop_at` turns a signal on any of them into the
same chunk boundary for all.

Handlers are installed only in the main thread (elsewhere the context manager is a no-op
that never requests) and the previous ones (and wakeup fd) are restored on exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from jaxspreeze.setup import distributed


class StopRequested(KeyboardInterrupt):
    """A SIGINT/SIGTERM arrived while the run was starting (before the first chunk)."""

    def __init__(self, signal_name: str, message: str):
        super().__init__(message)
        self.signal_name = signal_name
        self.message = message


def _die(signum: int) -> None:
    """End the process at once by ``signum``'s default action (from any thread)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if (programs := sys.modules.get("jaxspreeze.core.programs")) is not None:
        programs.release_marks()  # a stop is no crash of a kept program running first
    try:  # reset the handler in C (signal.signal() works in the main thread only)
        ctypes.CDLL(None).signal(signum, 0)  # 0: SIG_DFL
        os.kill(os.getpid(), signum)
        threading.Event().wait(5.0)  # the signal ends the process meanwhile
    finally:
        os._exit(128 + signum)


class GracefulStop:
    """Context manager that turns SIGINT/SIGTERM into a stop request at a chunk boundary."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self, second: Literal["raise", "kill"] = "raise") -> None:
        """``second``: what "stop now" does (see the module docstring)."""
        if second not in ("raise", "kill"):
            raise ValueError(f"second must be 'raise' or 'kill', got {second!r}")
        self.second = second
        self.requested = False
        self.signal_name: str | None = None
        self.installed = False
        self.run_dir: Path | None = None  # named in the line printed by a second SIGINT
        self._start_line: str | None = None  # set while starting
        self._previous: dict[int, Any] = {}
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._old_wakeup_fd = -1
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def is_starting(self) -> bool:
        """True inside :meth:`starting`."""
        return self._start_line is not None

    def request(self, signal_name: str = "request") -> None:
        """Ask for a stop by hand (as a signal would)."""
        if not self.requested:
            self.requested = True
            self.signal_name = signal_name

    @contextlib.contextmanager
    def starting(self, line: str) -> Iterator[GracefulStop]:
        """The start of a run: a signal stops it at once; ``line`` says what that leaves.

        Change the line as the start goes on with :meth:`set_start_line`. In ``"raise"``
        mode a signal that arrived inside raises :class:`StopRequested` when the block
        ends (or at the next :meth:`check`).
        """
        self._start_line = line
        try:
            yield self
            self.check()
        finally:
            self._start_line = None

    def set_start_line(self, line: str) -> None:
        """What a signal during the rest of the start prints (the state it leaves)."""
        if self._start_line is not None:
            self._start_line = line

    def check(self) -> None:
        """Raise :class:`StopRequested` when a signal arrived during the start."""
        if self.requested and self._start_line is not None:
            raise StopRequested(
                self.signal_name or "request", f"stopped by {self.signal_name}: {self._start_line}"
            )

    # ---------------------------------------------------------------- signals
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler (main thread): ``"raise"`` mode acts here."""
        if self.second == "kill":
            return  # the watcher thread acts on every signal, counted at the C level
        name = signal.Signals(signum).name
        if not self.requested:
            self.request(name)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt("second SIGINT: stopping at once")

    def _on_signal_kill_mode(self, signum: int) -> None:
        """The watcher thread: one signal of ``"kill"`` mode."""
        name = signal.Signals(signum).name
        with self._lock:
            first = not self.requested
            self.request(name)
            line = self._start_line
        if line is not None:
            print(f"jaxspreeze: stopped by {name}: {line}", file=sys.stderr, flush=True)
            _die(signum)
        if first or signum != signal.SIGINT:
            return
        where = f"; resume with: jaxspreeze train --resume {self.run_dir}" if self.run_dir else ""
        print(
            f"jaxspreeze: second SIGINT: stopping at once (the newest checkpoint stays "
            f"resumable{where})",
            file=sys.stderr,
            flush=True,
        )
        _die(signum)

    def _watch(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._on_signal_kill_mode(signum)

    def __enter__(self) -> GracefulStop:
        """Install the handlers (main thread only); in ``"kill"`` mode start the watcher."""
        if threading.current_thread() is not threading.main_thread():
            return self
        if self.second == "kill":
            reader, writer = socket.socketpair()
            writer.setblocking(False)
            self._wakeup = (reader, writer)
            self._old_wakeup_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
            self._watcher = threading.Thread(
                target=self._watch, args=(reader,), name="jaxspreeze-signals", daemon=True
            )
            self._watcher.start()
        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:  # pragma: no cover - e.g. SIGTERM on exotic platforms
                continue
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        self.installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Restore the handlers (and wakeup fd) that were there before."""
        if not self.installed:
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            reader, writer = self._wakeup
            writer.close()  # the watcher reads EOF and ends
            if self._watcher is not None:
                self._watcher.join(1.0)
            reader.close()
            self._wakeup = None
        self.installed = False

    def resume_hint(self, run_dir: str | Path, env_steps: int | None = None) -> str:
        """The line the trainer prints after a graceful stop (at ``env_steps`` per seed)."""
        at = "" if env_steps is None else f" at {env_steps:,} env steps"
        return (
            f"stopped by {self.signal_name}{at}; checkpoint written. Resume with: "
            f"jaxspreeze train --resume {run_dir}"
        )


def stop_at(stop: GracefulStop | None, chunk: int) -> str | None:
    """Why the run stops after chunk ``chunk`` (a signal's name), or None to go on.

    One process: when a signal arrived. Several: a signal on any process stops every
    process at the same chunk, a little later (:func:`jaxspreeze.setup.distributed.propose_stop`).
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
