"""``jaxspreeze launch --processes N [options] -- [train] <train args>``: N local processes, one run.

Starts ``jaxspreeze train <train args>`` N times on this machine, each told (through the
``JAXSPREEZE_*`` environment, :mod:`jaxspreeze.setup.distributed`) the coordinator address
(a free local port), the process count and its index, so the N processes join one
data-parallel run. ``--exec`` runs the command after ``--`` as it is instead (any
program that calls :func:`jaxspreeze.setup.distributed.initialize`).

Ctrl-C and SIGTERM are forwarded to every process (a training run stops at a chunk
boundary with a checkpoint). When a process fails (exits non-zero or is killed), the
launcher names it, sends the others SIGTERM, kills what is left after ``--grace-s``
seconds and exits non-zero: a dead process never leaves the others hanging.

The processes' standard error passes through the launcher, so that a fault reads as one
line: a process's own error line is held and joined to the launcher's line naming the
process; what the others say after the first failure (they only report that a peer died)
and the collective libraries' start-up and log lines (Gloo's, absl's ``I1204 ...`` lines)
are left out. ``--debug`` (or ``JAXSPREEZE_DEBUG=1``) passes everything through.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import BAD_INPUT, FAULT, fail

POLL_S = 0.1
ERROR_PREFIX = "jaxspreeze: error: "
# lines of the collective and logging libraries: Gloo's start-up and its transport's
# errors when a peer dies ("[external/...gloo/transport/tcp/pair.cc:547] Connection closed
# by peer"), printed by a survivor before the launcher sees the death; absl's (glog-style)
# logs
NOISE = re.compile(
    r"^\[Gloo\]|^\[[^\]]*gloo[^\]]*:\d+\]|^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]"
)
PR_SET_PDEATHSIG = 1  # Linux prctl: a signal the child gets when the launcher dies

DESCRIPTION = (
    "Start N local processes of one data-parallel run: `jaxspreeze launch --processes 2 -- "
    "train --total-steps 20000` runs `jaxspreeze train --total-steps 20000` in 2 processes joined "
    "with jax.distributed (a free local port). For several GPUs of one machine, one process "
    "(`jaxspreeze train --placement data`) already uses them all."
)


@dataclass
class LaunchArgs:
    """The options of ``jaxspreeze launch`` (the train arguments follow ``--``)."""

    processes: int
    """Number of processes to start."""
    exec_command: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """Run the command after `--` as it is (e.g. `python worker.py`) instead of `jaxspreeze train`."""
    host: str = "127.0.0.1"
    """Address of the coordinator (process 0)."""
    port: int = 0
    """Coordinator port (0: a free one)."""
    devices_per_process: int = 0
    """GPUs per process (process i gets local devices i*K .. i*K+K-1); 0: every process sees all."""
    grace_s: float = 10.0
    """After a process fails: seconds the others get to exit after SIGTERM before SIGKILL."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child (Linux): SIGTERM when the launcher dies, so no process is orphaned."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def describe_exit(code: int) -> str:
    """``exited with code 3`` or ``was killed by SIGKILL`` for a Popen return code."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def launch(
    command: Sequence[str],
    processes: int,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    devices_per_process: int = 0,
    grace_s: float = 10.0,
    env: dict[str, str] | None = None,
    debug: bool = False,
) -> int:
    """Run ``command`` in ``processes`` local processes of one run; return the exit code.

    0 when every process exits 0. When one fails, one line names it (with its own error
    line, and any other that had already failed), the others are stopped (SIGTERM,
    SIGKILL after ``grace_s``) and the failed process's exit code is returned (1 if it
    was killed). ``debug``: every line of the processes' standard error passes through.
    """
    # the launcher itself starts no JAX: only the names of the variables it sets
    from jaxspreeze.setup.distributed import (
        ENV_COORDINATOR,
        ENV_LOCAL_DEVICE_IDS,
        ENV_NUM_PROCESSES,
        ENV_PROCESS_ID,
    )

    port = port or free_port(host)
    base = dict(os.environ if env is None else env)
    base.setdefault("PYTHONUNBUFFERED", "1")
    children: list[subprocess.Popen] = []
    for i in range(processes):
        child_env = {
            **base,
            ENV_COORDINATOR: f"{host}:{port}",
            ENV_NUM_PROCESSES: str(processes),
            ENV_PROCESS_ID: str(i),
        }
        if devices_per_process:
            ids = range(i * devices_per_process, (i + 1) * devices_per_process)
            child_env[ENV_LOCAL_DEVICE_IDS] = ",".join(map(str, ids))
        children.append(
            subprocess.Popen(
                list(command),
                env=child_env,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,  # the terminal's Ctrl-C reaches the launcher only
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        )
    relay = Relay(children, debug=debug)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _watch(children, grace_s, relay)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop(children, grace_s=0.0)


class Relay:
    """Passes the processes' standard error to the launcher's, a thread per process: a
    process's ``jaxspreeze: error:`` line is held for the launcher's one line; noise, and
    every line after the first failure, are dropped (unless ``debug``)."""

    def __init__(self, children: list[subprocess.Popen], debug: bool = False) -> None:
        self.debug = debug
        self.errors: dict[int, str] = {}
        self.failed = threading.Event()
        self._threads = {
            i: threading.Thread(target=self._pump, args=(i, c.stderr), daemon=True)
            for i, c in enumerate(children)
            if getattr(c, "stderr", None) is not None
        }
        for t in self._threads.values():
            t.start()

    def _pump(self, index: int, stream) -> None:
        for line in stream:
            if self.debug:
                sys.stderr.write(line)
            elif line.startswith(ERROR_PREFIX):
                self.errors.setdefault(index, line[len(ERROR_PREFIX) :].strip())
            elif not self.failed.is_set() and not NOISE.match(line):
                sys.stderr.write(line)
            sys.stderr.flush()

    def error_of(self, index: int, wait_s: float = 2.0) -> str | None:
        """The error line process ``index`` printed (waiting for its stream to end)."""
        if index in self._threads:
            self._threads[index].join(timeout=wait_s)
        return self.errors.get(index)


def _watch(children: list[subprocess.Popen], grace_s: float, relay: Relay | None = None) -> int:
    """Wait for every process; on the first failure name it in one line and stop the others."""
    n = len(children)
    while True:
        codes = [c.poll() for c in children]
        exits = {i: code for i, code in enumerate(codes) if code is not None}
        failed = [i for i, code in exits.items() if code != 0]
        if failed:
            if relay is not None:
                relay.failed.set()
            # a process killed by a signal is the likelier first cause (its peers then
            # fail in their collectives), so it is named first
            failed.sort(key=lambda i: (exits[i] >= 0, i))
            first, code = failed[0], exits[failed[0]]
            message = f"process {first} of {n} (pid {children[first].pid}) {describe_exit(code)}"
            said = relay.error_of(first) if relay is not None else None
            if said:
                message += f": {said}"
            also = [f"process {i} {describe_exit(exits[i])}" for i in failed[1:]]
            running = n - len(exits)
            if also:
                message += f"; {', '.join(also)}"
            if running:
                message += f"; stopping the other {running} process(es)"
            fail(message, FAULT)
            sys.stderr.flush()
            _stop(children, grace_s)
            return code if code > 0 else FAULT
        if len(exits) == n:
            return 0
        time.sleep(POLL_S)


def _stop(children: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every live process, SIGKILL those still alive after ``grace_s``."""
    live = [c for c in children if c.poll() is None]
    for c in live:
        with contextlib.suppress(ProcessLookupError):
            c.terminate()
    deadline = time.monotonic() + grace_s
    for c in live:
        try:
            c.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                c.kill()
            c.wait()


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``[launch options] -- [command]`` -> (launch options, command)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: Sequence[str]) -> int:
    """Start the processes and wait for them; returns the exit code."""
    own, rest = split_argv(argv)
    args = parse(LaunchArgs, own, "jaxspreeze launch", description=DESCRIPTION)
    if args.processes < 1:
        return fail(f"--processes must be at least 1, got {args.processes}", BAD_INPUT)
    if args.exec_command and not rest:
        return fail("--exec-command needs a command after `--`", BAD_INPUT)
    if not args.exec_command and rest[:1] == ["train"]:
        rest = rest[1:]  # `launch --processes 2 -- train --total-steps ...` reads naturally
    command = rest if args.exec_command else [sys.executable, "-m", "jaxspreeze", "train", *rest]
    return launch(
        command,
        args.processes,
        host=args.host,
        port=args.port,
        devices_per_process=args.devices_per_process,
        grace_s=args.grace_s,
        debug="--debug" in rest or os.environ.get("JAXSPREEZE_DEBUG", "") not in ("", "0"),
    )
