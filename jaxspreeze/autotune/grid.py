"""The grids autotune measures and the walk along them, with its stop rules.

A grid is a geometric series from the configured value: num_envs n0, 4 n0, 16 n0, ... up
to what the learning guards allow (and 65,536), batch sizes B0, 2 B0, 4 B0, ... up to
65,536 and the buffer (an on-policy minibatch is kept at B0: a one-point grid). The walk
measures its points in order and stops when the rate gained < 5% twice in a row
(plateau), when a batch's step time exceeded B0's by more than the batch tolerance twice
in a row (step time: larger batches would not be free either), when the next point's
memory (estimated before allocating) would not fit, or when the next point's predicted
cost would overrun the deadline (budget). The first point of a grid is always measured:
that is the minimum the choice needs.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jaxspreeze import algos
from jaxspreeze.autotune.choose import (
    BATCH_TOLERANCE,
    Point,
    max_num_envs,
    step_time,
    target_replay_ratio,
)
from jaxspreeze.autotune.probes import MIN_REP_S, REPS
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig

SAMPLING_SHARE = (0.15, 0.5)  # of the budget, for the sampling grid (see sampling_share)
WALK_SHARE = 0.85  # both grids (the rest: timing all points again, see retime)
MIN_GAIN = 0.05  # a grid point must gain this much over the best so far ...
PATIENCE = 2  # ... or the grid stops after this many such points in a row
RETIME_ROUNDS = 2  # then every point is timed again, round-robin, while budget is left
ENV_GRID = (4, 2**16)  # factor, largest num_envs
BATCH_GRID = (2, 2**16)  # factor, largest batch (off-policy)


@dataclass
class Grid:
    """The planned values of one grid, the measured points and why it stopped."""

    kind: str  # "sampling" or "update"
    values: list[int]
    points: list[Point] = field(default_factory=list)
    stop: str = ""  # plateau | step time | memory | budget | end of grid | pinned | kept

    def as_dict(self) -> dict[str, Any]:
        """The grid as the profile stores it (values, stop rule, points)."""
        return {
            "values": self.values,
            "stop": self.stop,
            "points": [dataclasses.asdict(p) for p in self.points],
        }


def geometric(start: int, factor: int, stop: int) -> list[int]:
    """``start, start*factor, ...`` up to ``stop`` inclusive (at least ``[start]``)."""
    values = [max(start, 1)]
    while values[-1] * factor <= stop:
        values.append(values[-1] * factor)
    return values


def plan_grids(cfg: RunConfig, pinned: set[str]) -> tuple[list[int], list[int]]:
    """The num_envs grid and the batch grid for ``cfg`` (a pinned field is a 1-point grid).

    num_envs: n0, 4 n0, ... up to :func:`~.choose.max_num_envs` (the learning guards) and
    65,536; off-policy, the largest power of two under that bound is the last point.
    Batch: B0, 2 B0, ... up to 65,536 and the buffer; on-policy only B0 (a larger
    minibatch at the same epochs would take fewer gradient steps per env step).
    """
    cfg = config.resolve(cfg)
    on_policy = algos.get(cfg.algo).on_policy
    factor, top = ENV_GRID
    top = min(top, max_num_envs(cfg))
    n0 = cfg.num_envs
    if "num_envs" in pinned:
        envs = [n0]
    else:
        envs = geometric(n0, factor, max(top, n0))
        last = 1 << (top.bit_length() - 1)  # the largest power of two the guards allow
        if not on_policy and last > envs[-1]:
            envs.append(last)
    b_factor, b_top = BATCH_GRID
    if "batch_size" in pinned or on_policy:
        batches = [cfg.batch_size]
    else:
        batches = geometric(cfg.batch_size, b_factor, min(b_top, cfg.buffer_size))
    return envs, batches


def batch_stop(points: Sequence[Point]) -> str | None:
    """``"step time"`` once the last PATIENCE batches each took longer per gradient step
    than ``1 + BATCH_TOLERANCE`` times the first (base) batch: none of them is free."""
    if len(points) <= PATIENCE:
        return None
    limit = (1 + BATCH_TOLERANCE) * step_time(points[0])
    if all(step_time(p) > limit for p in points[-PATIENCE:]):
        return "step time"
    return None


def _predict_cost(last: Point, factor: float) -> float:
    """Seconds the next grid point will likely take: the last one's, calls scaled up."""
    timed = (REPS + 1) * max(MIN_REP_S, last.call_s)
    grown = (REPS + 1) * max(MIN_REP_S, last.call_s * factor)
    return 1.1 * max(last.wall_s, last.compile_s + timed) + (grown - timed)


def walk(
    grid: Grid,
    measure: Callable[[int], Point | None],
    bytes_needed: Callable[[int], int],
    memory_limit: int,
    deadline: float,
    clock: Callable[[], float] = time.perf_counter,
    say: Callable[[str], None] = print,
    stop_rule: Callable[[Sequence[Point]], str | None] | None = None,
    label: str = "",
) -> Grid:
    """Measure ``grid.values`` in order, from where it stopped, until a stop rule fires.

    The first point is always measured (the minimum any choice needs). ``stop_rule``
    (points so far -> a reason or None) adds a stop rule of the grid's own; ``label``
    is added to each point's line (e.g. the worker count of a host sampling grid).
    """
    done = {p.value for p in grid.points}
    best = max((p.rate for p in grid.points), default=0.0)
    stalls = 0
    grid.stop = "end of grid"
    for value in grid.values:
        if value in done:
            continue
        if bytes_needed(value) > memory_limit:
            grid.stop = "memory"
            break
        if grid.points:
            last = grid.points[-1]
            if clock() + _predict_cost(last, value / last.value) > deadline:
                grid.stop = "budget"
                break
        started = clock()
        point = measure(value)
        if point is not None and not point.wall_s:
            point.wall_s = clock() - started
        if point is None:  # compiled, but XLA's own memory count does not fit
            grid.stop = "memory"
            break
        grid.points.append(point)
        unit = "env steps/s" if grid.kind == "sampling" else "update samples/s"
        name = "num_envs" if grid.kind == "sampling" else "batch"
        say(
            f"  {grid.kind:8s} {name}={value:<6d} {point.rate:>12,.0f} {unit} "
            f"(compile {point.compile_s:.1f}s){label}"
        )
        stalls = 0 if point.rate > best * (1 + MIN_GAIN) else stalls + 1
        best = max(best, point.rate)
        if stalls >= PATIENCE:
            grid.stop = "plateau"
            break
        reason = stop_rule(grid.points) if stop_rule is not None else None
        if reason:
            grid.stop = reason
            break
    return grid


def sampling_share(cfg: RunConfig, s0: Point, u0: Point) -> float:
    """The sampling grid's share of the budget (within the grids' WALK_SHARE).

    It is sampling's share of an iteration's time at the first points (n0, B0) and the
    target replay ratio, clamped to SAMPLING_SHARE: an update-bound run (SAC on a CPU)
    spends its budget on batch sizes, a sampling-bound one on num_envs.
    """
    t_sample, t_update = 1 / s0.rate, target_replay_ratio(cfg) / u0.rate
    lo, hi = SAMPLING_SHARE
    return WALK_SHARE * min(max(t_sample / (t_sample + t_update), lo), hi)


def retime(prober: Any, grids: Sequence[Grid], deadline: float, clock: Callable) -> int:
    """Time every measured point again, round-robin, while the budget allows.

    Rates on a shared machine drift with its load; timing all points close together
    (compiled programs are kept) and taking the median of all repetitions evens that out.
    Returns the rounds done (0 when the prober cannot re-time).
    """
    again = getattr(prober, "retime", None)
    points = [(g.kind, p) for g in grids for p in g.points]
    if again is None or len(points) < 2:
        return 0
    for done in range(RETIME_ROUNDS):
        cost = 1.2 * sum(REPS * max(MIN_REP_S, p.call_s) for _, p in points)
        if clock() + cost > deadline:
            return done
        for kind, p in points:
            p.rates += again(kind, p.value)
            p.rate = statistics.median(p.rates)
    return RETIME_ROUNDS
