"""Graceful stop: SIGINT/SIGTERM ask the trainer to stop at the next chunk boundary.

Usage (host side)::

    with GracefulStop() as stop:
        for chunk in range(n):
            state, metrics = loop.chunk(state)
            ...
            if stop.requested:
                break   # checkpoint, flush the sinks, print how to resume, exit 0

The first SIGINT or SIGTERM only sets :attr:`GracefulStop.requested` (and
``signal_name``). A second SIGINT means "now": by default (``second="raise"``) the
handler raises :class:`KeyboardInterrupt` in the main thread, which unwinds ``finally``
blocks and keeps a notebook kernel alive; it takes effect as soon as the main thread runs
Python again, i.e. at once unless it is blocked waiting on the device (at most the rest
of that chunk). ``second="kill"`` (meant for the CLI) instead puts SIGINT back to the OS
default right after the first signal, so a second Ctrl-C ends the process immediately
even inside a device wait (no cleanup; a shell reports exit status 130). Further
SIGTERMs keep the request. Handlers are installed only in the main thread (elsewhere the
context manager is a no-op that never requests) and the previous ones are restored on
exit.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any, Literal


class GracefulStop:
    """Context manager that turns SIGINT/SIGTERM into a stop request at a chunk boundary."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self, second: Literal["raise", "kill"] = "raise") -> None:
        """``second``: what a second SIGINT does (see the module docstring)."""
        if second not in ("raise", "kill"):
            raise ValueError(f"second must be 'raise' or 'kill', got {second!r}")
        self.second = second
        self.requested = False
        self.signal_name: str | None = None
        self.installed = False
        self._previous: dict[int, Any] = {}

    def request(self, signal_name: str = "request") -> None:
        """Ask for a stop by hand (as a signal would)."""
        if not self.requested:
            self.requested = True
            self.signal_name = signal_name

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.requested:
            self.request(name)
            if self.second == "kill" and signum == signal.SIGINT:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt("second SIGINT: stopping at once")

    def __enter__(self) -> GracefulStop:
        """Install the handlers (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:  # pragma: no cover - e.g. SIGTERM on exotic platforms
                continue
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        self.installed = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Restore the handlers that were there before."""
        if not self.installed:
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        self.installed = False

    def resume_hint(self, run_dir: str) -> str:
        """The line the trainer prints after a graceful stop."""
        return (
            f"stopped by {self.signal_name}; checkpoint written. Resume with: "
            f"jaxspreeze train --resume {run_dir}"
        )
