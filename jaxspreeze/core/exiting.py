"""Threads the interpreter's exit waits for, so that none is killed inside native code.

At exit, CPython stops a daemon thread when it next takes the interpreter lock; a thread
coming back from an XLA call (an evaluation, a compile, a device-to-host copy) at that
moment is unwound through C++ frames and the process aborts ("FATAL: exception not
rethrown", exit 134), after a fault too. A thread that will end by itself once its
current work is done is handed to :func:`finish_at_exit`; the exit then lets it finish
(each one's ``stop`` first, then a join, up to :data:`EXIT_WAIT_S` in all), and says so
in one line when one is still working.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from collections.abc import Callable

EXIT_WAIT_S = 120.0  # the longest the exit waits for all of them together

_lock = threading.Lock()
_finishing: dict[threading.Thread, tuple[Callable[[], None] | None, Callable[[], bool]]] = {}


def finish_at_exit(
    thread: threading.Thread,
    stop: Callable[[], None] | None = None,
    busy: Callable[[], bool] | None = None,
) -> None:
    """Let ``thread`` finish before the interpreter exits: ``stop()`` is called at exit
    (tell it to end after its current work), then it is joined. ``busy()`` says whether it
    is in the middle of work (for the line; default: alive)."""
    with _lock:
        _finishing[thread] = (stop, busy or thread.is_alive)


@atexit.register
def _finish() -> None:
    with _lock:
        live = [(t, s, b) for t, (s, b) in _finishing.items() if t.is_alive()]
        _finishing.clear()
    if not live:
        return
    for _, stop, _ in live:
        if stop is not None:
            try:
                stop()
            except Exception:
                pass
    if any(busy() for _, _, busy in live):
        names = ", ".join(sorted({t.name for t, _, busy in live if busy()}))
        print(
            f"jaxspreeze: letting work in flight finish before exiting ({names})", file=sys.stderr
        )
    deadline = time.monotonic() + EXIT_WAIT_S
    for thread, _, _ in live:
        thread.join(max(deadline - time.monotonic(), 0.0))
