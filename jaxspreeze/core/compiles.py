"""Every compile a run does, timed: tracing, lowering and XLA compilation of each program.

JAX reports each step of making a program as a monitoring event naming the program
(``jit_chunk``, ``jit_warmup``, an evaluation, an init, a memory estimate...). While a
:class:`CompileLog` is open it keeps them all, whichever thread compiles. Traces nest (a
jitted function traced inside another program's trace), so the total is the wall time
covered by at least one event (the union of their intervals), not their sum.

:class:`Progress` says a start's compile as it goes: what is compiled, each program as it
is ready, and a heartbeat line while a long compile runs. :func:`compiles_overlap` says
whether a start's compiles run beside each other on threads or one after another, and
:func:`start_beside` starts one that way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jax

from jaxspreeze.core.cpus import spare_cpu

TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
BACKEND = "/jax/core/compile/backend_compile_duration"  # XLA, or a persistent-cache read
EVENTS = (TRACE, LOWER, BACKEND)


class CompileLog:
    """The compile events of the process between ``__enter__`` and ``__exit__``.

    ``spans`` holds ``(event, program, start, end)`` in ``time.time()`` seconds.
    """

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()

    def _listen(self, event: str, duration: float, **kwargs: object) -> None:
        if event in EVENTS:
            end = time.time()  # the event is reported as it ends
            with self._lock:
                self.spans.append((event, str(kwargs.get("fun_name", "?")), end - duration, end))

    def __enter__(self) -> CompileLog:
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(self, *exc_info: object) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)

    def total_s(self, until: float | None = None) -> float:
        """Wall seconds spent tracing, lowering or compiling (up to ``until``, a
        ``time.time()``): the union of the events' intervals."""
        with self._lock:
            spans = sorted((s, e) for _, _, s, e in self.spans)
        total, reach = 0.0, float("-inf")
        for start, end in spans:
            if until is not None:
                end = min(end, until)
            if end <= reach:
                continue
            total += end - max(start, reach)
            reach = end
        return total

    def programs(self) -> dict[str, float]:
        """XLA compile seconds per compiled program (``jit_chunk``: 12.3), largest first."""
        out: dict[str, float] = {}
        with self._lock:
            for event, name, start, end in self.spans:
                if event == BACKEND:
                    out[name] = out.get(name, 0.0) + end - start
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def compiles_overlap() -> bool:
    """Whether the compiles a start runs "beside" each other (the chunk's, the warm-up's,
    the evaluation's, beside the init's) go on threads (True) or run one after another,
    each where it is started (False): False when this process may run on one CPU only
    (``taskset -c 0``, a one-CPU container or job slot).

    XLA's CPU compiler is multithreaded and tracing holds the GIL: on one CPU, compiles
    on threads only take turns, and the turns cost. A cold start of the yardstick's
    gymnax rows on one pinned core compiled 0.8-1.2 s longer beside each other than in
    turn (``experiments/results/compile_order_cpu.md``). The programs are the same.
    """
    return spare_cpu()


def start_beside(work: Callable[[], None], name: str) -> threading.Thread | None:
    """Start ``work`` (a compile) on a daemon thread named ``name`` and return the thread;
    where compiles do not overlap (:func:`compiles_overlap`) run it here, before this
    returns, and return None."""
    if not compiles_overlap():
        work()
        return None
    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return thread


HEARTBEAT_S = 5.0  # a line this often while a start's compile runs


class Progress:
    """The start's compile said as it goes, through ``say`` (plain lines, any thread).

    :meth:`begin` says ``compiling N programs: ...``; :meth:`ready` says a line per
    program as it is compiled (or loaded from the program cache); while any is still
    compiling, a heartbeat line comes every ``every_s`` seconds (None: none). :meth:`end` stops both
    (nothing is said after it, so the training's own lines are left alone).
    """

    def __init__(self, say: Callable[[str], None], every_s: float | None = HEARTBEAT_S) -> None:
        self._say = say
        self._every = every_s
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ready: list[str] = []
        self._start = time.perf_counter()
        self._thread: threading.Thread | None = None

    def begin(self, names: list[str], how: str = "") -> None:
        """Say what will be compiled (``how``: for what, if not the default) and start the
        heartbeat."""
        self._start = time.perf_counter()
        self._say(f"  compiling {len(names)} programs{how}: {', '.join(names)}")
        if self._every is None:  # no heartbeat
            return
        self._thread = threading.Thread(target=self._beat, name="jaxspreeze-heartbeat", daemon=True)
        self._thread.start()

    def ready(self, name: str, how: str, seconds: float) -> None:
        """Say that the program ``name`` is ready (``how``: compiled, loaded)."""
        with self._lock:
            if self._done.is_set():
                return
            self._ready.append(name)
            self._say(f"    {name} {how} in {seconds:.1f}s")

    def _beat(self) -> None:
        while not self._done.wait(self._every):
            with self._lock:
                if self._done.is_set():
                    return
                ready = f"; ready: {', '.join(self._ready)}" if self._ready else ""
                waited = time.perf_counter() - self._start
                self._say(f"    still compiling ({waited:.0f}s so far{ready})")

    def end(self) -> None:
        """Stop the heartbeat; later :meth:`ready` calls say nothing."""
        with self._lock:
            self._done.set()
        if self._thread is not None:
            self._thread.join()
