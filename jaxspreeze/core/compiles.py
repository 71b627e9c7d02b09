"""Every compile a run does, timed: tracing, lowering and XLA compilation of each program.

JAX reports each step of making a program as a monitoring event naming the program
(``jit_chunk``, ``jit_warmup``, an evaluation, an init, a memory estimate...). While a
:class:`CompileLog` is open it keeps them all, whichever thread compiles. Traces nest (a
jitted function traced inside another program's trace), so the total is the wall time
covered by at least one event (the union of their intervals), not their sum.
"""

from __future__ import annotations

import threading
import time

import jax

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
