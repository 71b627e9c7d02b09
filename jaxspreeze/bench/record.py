"""Timing and the throughput record: one definition shared by pytest and ``jaxspreeze bench``.

A :class:`Workload` is a compiled unit of work (compiled outside any timer) whose
``run()`` blocks until its results are ready; it says how much work one call does. A
timer (pytest-benchmark's, or :func:`time_workload` here) gives seconds per call, and
:func:`throughput_record` turns the two into the record of DESIGN.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze.setup import devices

Record = dict[str, Any]

PACKAGES = ("jax", "jaxlib", "flax", "optax", "gymnax", "brax", "numpy", "jaxspreeze")


@dataclass(eq=False)
class Workload:
    """A compiled unit of work; each ``run()`` call does the stated work and blocks."""

    name: str
    run: Callable[[], None]
    env_steps: int = 0
    """Env steps (summed over envs) per call, policy in the loop."""
    update_samples: int = 0
    """Batch size x critic gradient steps per call (Spreeze's update frame count)."""
    grad_steps: dict[str, int] = field(default_factory=dict)
    """Gradient steps per call by side: ``{"critic": n, "actor": m}``."""
    compile_s: float = 0.0
    """Seconds spent compiling (never folded into a rate)."""
    flops: float | None = None
    """FLOPs per call (XLA cost analysis), when known."""
    policy_lag: float | None = None
    """Updates between the parameters that acted and the newest ones, where it applies."""
    params: dict[str, Any] = field(default_factory=dict)
    """The case's parameters (env, num_envs, batch size, ...)."""


def compile_timed(fn: Callable, *args: Any, donate: tuple[int, ...] = ()) -> tuple[Any, float]:
    """``fn`` jitted and compiled ahead of time for ``args``, and the seconds that took."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def chained(call: Callable[..., tuple], *carry: Any) -> Callable[[], None]:
    """A workload's ``run``: ``call(*carry)``, whose outputs but the last are the next carry.

    Each call consumes the previous one's (donated) outputs and blocks until all of its
    outputs, the last one (a trajectory, metrics) too, are ready.
    """
    state = list(carry)

    def run() -> None:
        *state[:], out = call(*state)
        jax.block_until_ready((state, out))

    return run


@dataclass
class EvaluatedChunk:
    """One training chunk, timed, and the evaluation after it, timed apart."""

    state: Any
    chunk_s: float
    result: Any
    eval_s: float


def evaluated_chunks(
    schedule: Any, state: Any, evaluate: Callable[[Any], Any]
) -> Iterator[EvaluatedChunk]:
    """``schedule``'s chunks from ``state``, each followed by ``evaluate(state)``.

    The chunk is timed until its state is ready; ``evaluate`` (which returns host values)
    is timed apart. The caller may stop early (a threshold reached).
    """
    for _ in range(schedule.num_chunks):
        t = time.perf_counter()
        state, _ = schedule.chunk(state)
        jax.block_until_ready(state)
        chunk_s = time.perf_counter() - t
        t = time.perf_counter()
        result = evaluate(state)
        yield EvaluatedChunk(state, chunk_s, result, time.perf_counter() - t)


def time_workload(w: Workload, rounds: int = 5, warmup: int = 1) -> list[float]:
    """Seconds per call of ``w.run`` over ``rounds`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        w.run()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        w.run()
        times.append(time.perf_counter() - t0)
    return times


def time_pair(
    a: Workload, b: Workload, rounds: int = 5, warmup: int = 1
) -> tuple[list[float], list[float]]:
    """Time two workloads with interleaved rounds, so machine noise hits both alike."""
    for _ in range(warmup):
        a.run()
        b.run()
    ta, tb = [], []
    for _ in range(rounds):
        ta += time_workload(a, 1, 0)
        tb += time_workload(b, 1, 0)
    return ta, tb


def versions() -> dict[str, str]:
    """Installed versions of the packages that decide the numbers."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


_PEAK: dict[tuple[str, int], float] = {}


def matmul_peak_flops(n: int | None = None, fresh: bool = False) -> float:
    """Measured dense float32 ``n x n`` matmul FLOP/s of the default device.

    Measured once per process and remembered (the best seen); ``fresh=True`` measures
    again now and returns that, so an update case is judged against the machine as it
    is at that moment (on a shared machine the peak moves with the load).
    """
    backend = jax.default_backend()
    n = n or (1024 if backend == "cpu" else 8192)
    key = (backend, n)
    if key in _PEAK and not fresh:
        return _PEAK[key]
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul).lower(a, a).compile()
    for _ in range(2):
        mm(a, a).block_until_ready()
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        mm(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    now = 2.0 * n**3 / best
    _PEAK[key] = max(now, _PEAK.get(key, 0.0))
    return now


def best_matmul_peak_flops() -> float | None:
    """The best dense-matmul FLOP/s measured in this process (None before any)."""
    return max(_PEAK.values()) if _PEAK else None


def _flops(program: Any) -> float | None:
    try:
        cost = program.cost_analysis()
    except Exception:  # some backends do not implement it
        return None
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    flops = (cost or {}).get("flops")
    return float(flops) if flops and flops > 0 else None


def flops_of(lowered: Any) -> float | None:
    """FLOPs of a lowered (or compiled) program from XLA's cost analysis, None if unknown.

    A ``jax.stages.Lowered`` is analysed as lowered (no compile needed; dots dominate and
    fusion does not change them); if that is unavailable it is compiled and analysed.
    XLA counts a loop body once whatever its trip count: callers analyse a one-step
    program and scale it.
    """
    flops = _flops(lowered)
    if flops is None and hasattr(lowered, "compile"):
        flops = _flops(lowered.compile())
    return flops


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if count else None


def throughput_record(
    w: Workload, seconds: float, peak_flops: float | None = None, times: list[float] | None = None
) -> Record:
    """The throughput record of DESIGN.md for ``w`` at ``seconds`` per call."""
    env_rate = _rate(w.env_steps, seconds)
    update_rate = _rate(w.update_samples, seconds)
    flops_rate = w.flops / seconds if w.flops else None
    record: Record = {
        "name": w.name,
        **w.params,
        "seconds_per_call": seconds,
        "env_steps_per_s": env_rate,
        "update_samples_per_s": update_rate,
        "grad_steps_per_s": {k: v / seconds for k, v in w.grad_steps.items()} or None,
        "replay_ratio": update_rate / env_rate if env_rate and update_rate else None,
        "policy_lag": w.policy_lag,
        "compile_s": w.compile_s,
        "flops_per_call": w.flops,
        "flops_per_s": flops_rate,
        "matmul_peak_flops_per_s": peak_flops,
        "fraction_of_matmul_peak": flops_rate / peak_flops if flops_rate and peak_flops else None,
        "hardware": devices.describe_hardware(),
        "versions": versions(),
    }
    if times:
        record["rounds"] = len(times)
        record["seconds_stdev"] = statistics.stdev(times) if len(times) > 1 else 0.0
    return record


def headline(record: Record) -> tuple[str, float | None]:
    """The rate a case is judged by: update samples/s for updates, else env steps/s."""
    if record.get("kind") == "update":
        return "update_samples_per_s", record.get("update_samples_per_s")
    if record.get("kind") in ("end_to_end", "learning"):
        return "wall_to_threshold_s", record.get("wall_to_threshold_s")
    if record.get("kind") == "cold":  # a whole process (bench/cold.py)
        return "wall_s", record.get("wall_s")
    return "env_steps_per_s", record.get("env_steps_per_s")


def with_reference(record: Record, reference: Record | None) -> Record:
    """Attach a reference's record and the jaxspreeze / reference ratio of the headline rate."""
    if reference is None:
        return record
    key, ours = headline(record)
    theirs = reference.get(key)
    ratio = ours / theirs if ours and theirs else None
    if key == "wall_to_threshold_s" and ratio:
        ratio = 1.0 / ratio  # > 1 means jaxspreeze is faster
    slim = {k: v for k, v in reference.items() if k not in ("hardware", "versions")}
    return {**record, "reference": slim, "ratio_metric": key, "ratio_vs_reference": ratio}
