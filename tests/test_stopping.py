"""GracefulStop: signals become a stop request; a second SIGINT stops at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from jaxspreeze.run.stopping import GracefulStop, StopRequested


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
    hint = stop.resume_hint("runs/x", env_steps=12_000)
    assert hint.startswith(f"stopped by {sig.name} at 12,000 env steps;"), hint


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
from jaxspreeze.run.stopping import GracefulStop, StopRequested
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


def test_a_signal_while_starting_raises_stop_requested():
    """``"raise"`` mode: a signal inside ``starting`` raises StopRequested (a
    KeyboardInterrupt) at the next check, with the start's line."""
    with GracefulStop() as stop:
        with pytest.raises(StopRequested) as e, stop.starting("nothing was trained"):
            os.kill(os.getpid(), signal.SIGTERM)
            wait_for(stop)
            stop.set_start_line("compiling; the run is marked NOT_STARTED")
            stop.check()
            pytest.fail("check() did not raise")
        assert isinstance(e.value, KeyboardInterrupt) and e.value.signal_name == "SIGTERM"
        assert "NOT_STARTED" in str(e.value) and not stop.is_starting


BLOCKED_CHILD = """
import contextlib, os, signal, sys, threading, time
import jax, jax.numpy as jnp
from jaxspreeze.run.stopping import GracefulStop, StopRequested
loop = jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, x: x * 1.0000001 + 1e-9, x))
x = jnp.ones(())
loop(x, 10).block_until_ready()  # compiled

def signals(times):
    for t in times:
        time.sleep(t)
        os.kill(os.getpid(), signal.{sig})

with GracefulStop(second="kill") as stop:
    context = stop.starting("compiling; nothing was trained") if {starting} else (
        contextlib.nullcontext()
    )
    with context:
        print("blocking", flush=True)
        threading.Thread(target=signals, args=({times},), daemon=True).start()
        loop(x, 1_000_000_000).block_until_ready()  # ~20 s inside XLA: no Python handler runs
    print("finished", stop.requested, flush=True)
"""


@pytest.mark.parametrize(
    ("sig", "times", "starting", "line"),
    [
        # two quick Ctrl-Cs while the main thread waits on the device: the second one ends
        # the process at once (before, both reached the Python handler as one request)
        ("SIGINT", (0.5, 0.3), False, "second SIGINT: stopping at once"),
        # while starting (compiling, warming up) the first signal already stops
        ("SIGINT", (0.5,), True, "stopped by SIGINT: compiling; nothing was trained"),
        ("SIGTERM", (0.5,), True, "stopped by SIGTERM: compiling; nothing was trained"),
    ],
)
def test_kill_mode_acts_while_the_main_thread_is_inside_xla(sig, times, starting, line):
    """``second="kill"``: the watcher thread sees each signal although the main thread is
    blocked in an XLA call; one line on stderr, then death by the signal."""
    code = BLOCKED_CHILD.format(sig=sig, times=times, starting=starting)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.stdout.split() == ["blocking"], (out.stdout, out.stderr)
    assert out.returncode == -getattr(signal, sig), out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and line in lines[0], out.stderr


@pytest.mark.parametrize("at", ["middle", "last"])
def test_the_stop_line_matches_the_checkpoint_on_disk(at, tiny_cfg, monkeypatch, capsys):
    """A stop after a middle chunk writes the checkpoint its line names; a stop after the
    last chunk ends the run as a complete one (its checkpoint and final evaluation), never
    a line promising a checkpoint that is not there."""
    from jaxspreeze.run import evalwatch, trainer
    from jaxspreeze.store import checkpoint

    first = []

    def stop_at(stop, chunk):  # as if SIGINT arrived during this chunk
        first.append(chunk)
        if (at == "middle") != (chunk == first[0]):
            return None
        stop.request("SIGINT")
        return "SIGINT"

    monkeypatch.setattr(evalwatch, "stop_at", stop_at)
    result = trainer.train(tiny_cfg.replace(checkpoint_every=10**6), signals="raise")
    out = capsys.readouterr().out
    newest = checkpoint.read_manifest(checkpoint.latest(result.run_dir))["env_steps"]
    if at == "middle":
        assert result.summary["stopped"] == "SIGINT"
        assert f"stopped by SIGINT at {newest:,} env steps; checkpoint written" in out
        assert newest < 600 and result.summary.get("final_eval_return") is None
    else:
        assert result.summary.get("stopped") is None and "stopped by" not in out
        assert newest == result.summary["env_steps"] >= 600
        assert result.summary["final_eval_return"] is not None
