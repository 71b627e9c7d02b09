"""GracefulStop: signals become a stop request; a second SIGINT stops at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from jaxspreeze.stopping import GracefulStop


def wait_for(stop: GracefulStop) -> None:
    """Let the interpreter run the Python-level handler (it runs between bytecodes)."""
    for _ in range(500):
        if stop.requested:
            return
        time.sleep(0.01)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_requests_a_stop(sig):
    """SIGINT/SIGTERM set ``requested`` and ``signal_name``; nothing is raised."""
    before = signal.getsignal(sig)
    with GracefulStop() as stop:
        assert stop.installed and not stop.requested
        os.kill(os.getpid(), sig)
        wait_for(stop)
        assert stop.requested and stop.signal_name == sig.name
        if sig == signal.SIGTERM:  # more SIGTERMs keep the request, never raise
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
    assert signal.getsignal(sig) is before
    assert "jaxspreeze train --resume runs/x" in stop.resume_hint("runs/x")


def test_second_sigint_raises_keyboard_interrupt():
    """The default ``second="raise"``: the second SIGINT raises KeyboardInterrupt."""
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        wait_for(stop)
        assert stop.requested
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # interrupted long before this ends
        pytest.fail("second SIGINT did not interrupt")
    assert signal.getsignal(signal.SIGINT) is before


def test_no_op_outside_the_main_thread():
    """In another thread the context manager installs nothing (signal() would raise)."""
    result = {}

    def body():
        with GracefulStop() as stop:
            result["installed"] = stop.installed

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert result == {"installed": False}


KILL_CHILD = """
import os, signal, sys, time
from jaxspreeze.stopping import GracefulStop
with GracefulStop(second="kill") as stop:
    os.kill(os.getpid(), signal.SIGINT)
    while not stop.requested:
        time.sleep(0.01)
    print("requested", stop.signal_name, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
print("survived", flush=True)
"""


def test_second_sigint_kills_at_once_in_kill_mode():
    """``second="kill"``: the second SIGINT ends the process by the OS default action."""
    out = subprocess.run(
        [sys.executable, "-c", KILL_CHILD], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["requested", "SIGINT"], out.stderr
    assert out.returncode == -signal.SIGINT
