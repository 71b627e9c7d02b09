"""The fused one-device chunk: ``scan(vmap(iteration))``, compiled ahead of time.

Collect, the critic side and the actor side of :class:`~jaxspreeze.schedules.iteration.Iteration`
are composed into one function, vmapped over seeds and fused over K iterations into one
``lax.scan`` program; the state is donated to it, so a chunk updates it in place.
Compile logs and profiles name the program ``fused_chunk`` (and ``warmup``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax

from jaxspreeze.schedules.base import DeviceSchedule
from jaxspreeze.schedules.iteration import Metrics, TrainState


@dataclass(eq=False)
class Fused(DeviceSchedule):
    """All of a run on one device: one compiled program per chunk of K iterations."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._chunk: Any = None

    def fused_chunk(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations of all seeds as one traceable function: ``scan(vmap(iteration))``."""
        step = lambda s, _: jax.vmap(self.per_seed)(s)
        return jax.lax.scan(step, s, None, length=self.iterations_per_chunk)

    def _compile_warmup(self, state: TrainState) -> None:
        fn = self.programs.jit("warmup", jax.vmap(self.per_seed.warmup), donate=(0,))
        self._warmup = self.programs.compile("warmup", fn, state)

    def _compile_chunk(self, state: TrainState) -> None:
        fn = self.programs.jit("fused_chunk", self.fused_chunk, donate=(0,))
        self._chunk = self.programs.compile("fused_chunk", fn, state)

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """Run one chunk of K iterations; returns the new state and the metrics ``[K, S]``.

        Dispatch is asynchronous: nothing here waits for the device.
        """
        if self._chunk is None:
            self.compile(state)
        return self._chunk(state)
