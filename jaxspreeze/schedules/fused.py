"""The fused one-device chunk: ``scan(vmap(iteration))``, compiled ahead of time.

Collect, the critic side and the actor side of :class:`~jaxspreeze.schedules.iteration.Iteration`
are composed into one function, vmapped over seeds and fused over K iterations into one
``lax.scan`` program; the state is donated to it, so a chunk updates it in place.
Compile logs and profiles name the program ``fused_chunk`` (and ``warmup``).

One layout differs (:func:`unbatched`): a one-seed run of an algorithm whose network has
LayerNorms, on a CPU, scans its seed's iteration without the seed axis (the state keeps its
``[1, ...]`` shapes outside the program). XLA's CPU backend lays out a LayerNorm MLP's
gradients under a size-1 batch axis with transposes and copies the plain program has not:
PQN's chunk runs 1.6-1.7x faster without it, DQN's with ``--dqn.layer-norm`` 1.5x, while
the other algorithms' chunks run 0.9-1.0x as fast (so they keep the axis; interleaved
A/B on one core: ``experiments/seed_axis_ab.py``, ``experiments/results/seed_axis_cpu.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze.algos.base import Algorithm
from jaxspreeze.schedules.base import DeviceSchedule
from jaxspreeze.schedules.iteration import Metrics, TrainState


def unbatched(algo: Algorithm, slots: int, platform: str) -> bool:
    """Whether the fused chunk runs without the seed axis: one slot (one seed, no
    population), an algorithm whose network has LayerNorms (:attr:`Algorithm.layer_norm`),
    on XLA's CPU backend (``platform``: the device's). Measured there only; elsewhere the
    chunk keeps the axis."""
    return slots == 1 and algo.layer_norm and platform == "cpu"


@dataclass(eq=False)
class Fused(DeviceSchedule):
    """All of a run on one device: one compiled program per chunk of K iterations."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._chunk: Any = None

    def fused_chunk(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations of all seeds as one traceable function: ``scan(vmap(iteration))``,
        or for the one seed of :func:`unbatched` ``scan(iteration)`` on ``s[0]`` (the same
        shapes in and out: ``[1, ...]`` states, ``[K, 1]`` metrics)."""
        if unbatched(self.algo, self.cfg.slots, self.placement.actor.platform):
            one = jax.tree.map(lambda x: x[0], s)
            step = lambda c, _: self.per_seed(c)
            last, metrics = jax.lax.scan(step, one, None, length=self.iterations_per_chunk)
            seed_axis = lambda tree, at: jax.tree.map(lambda x: jnp.expand_dims(x, at), tree)
            return seed_axis(last, 0), seed_axis(metrics, 1)
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
