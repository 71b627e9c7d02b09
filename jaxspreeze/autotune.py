"""Autotune: measure sampling and update throughput on this machine and pick the parallelism.

``jaxspreeze autotune [--out DIR] [train flags]`` (and ``train --autotune``) runs two
probes for the configured algorithm, env and placement:

- **sampling**: ``rollout`` with the algorithm's policy in the loop, jitted, over a
  geometric grid of ``num_envs`` (1, 4, 16, ...) -> env steps/s;
- **update**: the critic phase then the actor phase on a filled replay buffer (or a
  rollout, for PPO) over a geometric grid of batch sizes (256, 512, ...) -> update
  samples/s (batch x gradient steps per second).

Each point is compiled first (compile time is reported apart), run once untimed, then
timed over several repetitions (``block_until_ready`` before each timer stops); the rate
is the median. A grid stops growing when the rate gained < 5% twice in a row, when the
next point's memory (estimated before allocating, from ``replay.nbytes`` and
``jax.eval_shape``; on GPU against the device's free memory) would not fit, or when the
next point's predicted cost would overrun its share of ``--autotune-budget-s`` (the
sampling grid gets sampling's share of an iteration's time, 15-50%, both grids 85%; the
rest times every point again, round-robin, against load drift). One point of each grid
is always measured: that is the minimum the choice needs.

The choice (``choose``) maximises the end-to-end rate of training at the target replay
ratio rho (update samples per env step; ``--replay-ratio`` or a per-algorithm default):
for every measured pair (num_envs n, batch B), G = max(1, round(rho n T / B)) gradient
steps per iteration and the time of an iteration is ``n T / S(n) + G B / U(B)``. Among
the pairs whose rate is within 5% of the best, it takes the smallest n, then the smallest
B. When updates are cheap this is the smallest n at the sampling knee; when updates
dominate (SAC on a small CPU) it is the smallest n that can feed a batch at the update
knee. G is a multiple of TD3's policy_delay; PPO's minibatch divides the rollout ``n T``
at least 4 times and its replay ratio is its epochs. The chunk length K makes one chunk
last about a second. Pinned fields keep their values and the rest is chosen around them.
The timed programs themselves live in :mod:`jaxspreeze.probes`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from jaxspreeze.cli import pop_option
from jaxspreeze.config import RunConfig
from jaxspreeze.errors import ConfigError
from jaxspreeze.probes import (
    MIN_REP_S,
    REPS,
    Point,
    RealProber,
    free_memory,
    grad_step_multiple,
)

TUNED = ("num_envs", "batch_size", "grad_steps", "chunk_iterations")
PPO_SIZES = {"num_envs", "batch_size"}
FORMAT = "jaxspreeze-autotune"
VERSION = 1

MIN_BUDGET_S = 2.0  # below this not even one compiled probe can fit
SAMPLING_SHARE = (0.15, 0.5)  # of the budget, for the sampling grid (see sampling_share)
WALK_SHARE = 0.85  # both grids (the rest: timing all points again, see _retime)
TOLERANCE = 0.05  # "within a few percent of the best"
MIN_GAIN = 0.05  # a grid point must gain this much over the best so far ...
PATIENCE = 2  # ... or the grid stops after this many such points in a row
RETIME_ROUNDS = 2  # then every point is timed again, round-robin, while budget is left
ENV_GRID = (1, 4, 2**16)  # start, factor, largest num_envs
BATCH_GRID = (256, 2, 2**16)  # start, factor, largest batch (off-policy)
PPO_BATCH_GRID = (64, 2, 2**16)  # PPO minibatch
PPO_MIN_MINIBATCHES = 4  # PPO: a rollout holds at least this many minibatches
MIN_ITERATIONS = 10  # num_envs is capped so a run has at least this many iterations
TARGET_CHUNK_S = 1.0  # one chunk should take about this long (0.5-2 s)
MAX_CHUNK_ITERATIONS = 10_000
MEMORY_FRACTION = 0.9  # of the free memory that a run may plan to use
DEFAULT_REPLAY_RATIO = {"sac": 256.0, "td3": 256.0, "ddpg": 256.0}


class ProfileWarning(UserWarning):
    """An autotune profile applied to a run it was not measured for (other hardware...)."""


@dataclass
class Grid:
    """The planned values of one grid, the measured points and why it stopped."""

    kind: str  # "sampling" or "update"
    values: list[int]
    points: list[Point] = field(default_factory=list)
    stop: str = ""  # plateau | memory | budget | end of grid | pinned


class Prober(Protocol):
    """Measures throughput at one grid point and estimates memory before allocating."""

    fixed_bytes: int  # replay buffer + agent state: allocated whatever n and B are

    def sampling_bytes(self, num_envs: int) -> int:
        """Memory a run with ``num_envs`` envs needs for sampling, before allocating."""
        ...

    def update_bytes(self, batch: int) -> int:
        """Memory one update with ``batch`` samples needs, before allocating."""
        ...

    def sampling(self, num_envs: int) -> Point | None:
        """Measure env steps/s with the policy in the loop (None: does not fit)."""
        ...

    def update(self, batch: int) -> Point | None:
        """Measure update samples/s at this batch size (None: does not fit)."""
        ...


# ------------------------------------------------------------------------- the rule
def geometric(start: int, factor: int, stop: int) -> list[int]:
    """``start, start*factor, ...`` up to ``stop`` inclusive (at least ``[start]``)."""
    values = [max(start, 1)]
    while values[-1] * factor <= stop:
        values.append(values[-1] * factor)
    return values


def target_replay_ratio(cfg: RunConfig) -> float:
    """Update samples per env step to aim for: ``cfg.replay_ratio`` or the algo default.

    Off-policy default: 256, one batch-256 gradient step per env step (the SAC/TD3
    papers' setting and RunConfig's defaults). PPO: its ``epochs`` (every sample of a
    rollout is seen once per epoch); ``--replay-ratio`` does not apply to PPO.
    """
    if cfg.algo == "ppo":
        if cfg.replay_ratio:
            raise ConfigError(
                "replay_ratio",
                f"PPO's replay ratio is its number of epochs (--ppo.epochs, now "
                f"{cfg.ppo.epochs}); drop --replay-ratio",
            )
        return float(cfg.ppo.epochs)
    return float(cfg.replay_ratio or DEFAULT_REPLAY_RATIO.get(cfg.algo, 256.0))


def _at(points: Sequence[Point], value: int) -> Point:
    """The point at ``value``, or one interpolated log-log between measured points."""
    for p in points:
        if p.value == value:
            return p
    pts = sorted(points, key=lambda p: p.value)
    lo = max((p for p in pts if p.value < value), key=lambda p: p.value, default=pts[0])
    hi = min((p for p in pts if p.value > value), key=lambda p: p.value, default=pts[-1])
    if lo.value == hi.value:
        rate = lo.rate * (value / lo.value if value < lo.value else 1.0)  # linear below
        scale = value / lo.value
        return Point(value, rate, 0.0, 0.0, 0, bytes_est=int(lo.bytes_est * scale))
    w = math.log(value / lo.value) / math.log(hi.value / lo.value)
    rate = math.exp((1 - w) * math.log(lo.rate) + w * math.log(hi.rate))
    nbytes = int((1 - w) * lo.bytes_est + w * hi.bytes_est)
    return Point(value, rate, 0.0, 0.0, 0, bytes_est=nbytes)


def choose(
    cfg: RunConfig,
    sampling: Sequence[Point],
    update: Sequence[Point],
    pinned: set[str] | frozenset[str] = frozenset(),
    memory_limit: int | None = None,
    fixed_bytes: int = 0,
    tolerance: float = TOLERANCE,
    overlap: bool = False,
) -> dict[str, Any]:
    """Pick num_envs, batch_size, grad_steps and chunk_iterations from measured rates.

    Every feasible pair (n, B) is scored by the env steps/s training would reach at the
    target replay ratio rho: ``n T / (n T / S(n) + max(G B, rho n T) / U(B))`` with
    ``G = max(1, round(rho n T / B))`` (a G rounded up counts its extra updates, one
    rounded down is charged as if it met rho). Among the pairs within ``tolerance`` of
    the best score the smallest n wins, then the replay ratio nearest rho, then the
    smallest B. ``overlap`` (split placement) models sampling and updates running
    concurrently (max instead of sum).
    Pinned fields keep ``cfg``'s values (rates there are interpolated if unmeasured).
    A pair needs ``fixed_bytes + S.bytes_est + U.bytes_est <= memory_limit``.
    """
    if not sampling or not update:
        raise ConfigError("autotune_budget_s", "no measurement to choose from")
    pinned = set(pinned) & set(TUNED)
    ppo = cfg.algo == "ppo"
    rho = target_replay_ratio(cfg)
    T = cfg.rollout_steps
    multiple = grad_step_multiple(cfg)
    s_points = [_at(sampling, cfg.num_envs)] if "num_envs" in pinned else list(sampling)
    u_points = [_at(update, cfg.batch_size)] if "batch_size" in pinned else list(update)
    if not ppo and "num_envs" not in pinned:
        cap = max(cfg.total_steps - cfg.learning_starts, 1) / (T * MIN_ITERATIONS)
        kept = [p for p in s_points if p.value * T <= cfg.buffer_size and p.value <= cap]
        s_points = kept or [min(s_points, key=lambda p: p.value)]

    candidates: list[dict[str, Any]] = []
    rejected: list[str] = []
    for s in s_points:
        for u in u_points:
            n, b = s.value, u.value
            nT = n * T
            need = fixed_bytes + s.bytes_est + u.bytes_est
            if memory_limit is not None and need > memory_limit:
                rejected.append(f"num_envs {n} x batch {b}: memory")
                continue
            if ppo:
                if nT % b or (nT < PPO_MIN_MINIBATCHES * b and len(pinned & PPO_SIZES) < 2):
                    continue  # the minibatch must divide the rollout, a few times over
                g = cfg.grad_steps  # unused by PPO: epochs x minibatches instead
                samples = rho * nT
                charged = samples
            else:
                if b > cfg.buffer_size:
                    continue
                if "grad_steps" in pinned:
                    g = cfg.grad_steps
                else:
                    g = max(multiple, multiple * round(rho * nT / b / multiple))
                samples = g * b
                if samples < rho * nT / 2:
                    rejected.append(f"num_envs {n} x batch {b}: replay ratio under rho/2")
                    continue
                charged = max(samples, rho * nT)
            t_sample, t_update = nT / s.rate, samples / u.rate
            t_charged = charged / u.rate
            t_iter = max(t_sample, t_update) if overlap else t_sample + t_update
            t_score = max(t_sample, t_charged) if overlap else t_sample + t_charged
            candidates.append(
                {
                    "num_envs": n,
                    "batch_size": b,
                    "grad_steps": g,
                    "replay_ratio": samples / nT,
                    "iteration_s": t_iter,
                    "env_steps_per_s": nT / t_iter,
                    "update_samples_per_s": samples / t_iter,
                    "score": nT / t_score,
                    "bytes": need,
                }
            )
    if not candidates:
        if rejected and all(r.endswith("memory") for r in rejected):
            raise ConfigError(
                "batch_size" if "batch_size" in pinned else "num_envs",
                f"no measured num_envs x batch size fits in {_mib(memory_limit)} "
                "(replay buffer + sampling + update); lower --buffer-size or the pinned sizes",
            )
        raise ConfigError(
            "batch_size",
            "no measured num_envs x batch size is feasible"
            + (" (PPO: the minibatch must divide num_envs x rollout_steps)" if ppo else "")
            + (f"; {rejected[0]}" if rejected else ""),
        )
    best = max(c["score"] for c in candidates)
    good = [c for c in candidates if c["score"] >= (1 - tolerance) * best]
    # smallest n; then the replay ratio closest to the target; then the smallest batch
    pick = min(
        good,
        key=lambda c: (c["num_envs"], abs(math.log(c["replay_ratio"] / rho)), c["batch_size"]),
    )
    if "chunk_iterations" in pinned:
        k = cfg.chunk_iterations
    else:
        k = int(min(max(round(TARGET_CHUNK_S / pick["iteration_s"]), 1), MAX_CHUNK_ITERATIONS))
    best_s = max(p.rate for p in s_points)
    best_u = max(p.rate for p in u_points)
    return {
        **{key: pick[key] for key in ("num_envs", "batch_size", "grad_steps")},
        "chunk_iterations": k,
        "replay_ratio": pick["replay_ratio"],
        "replay_ratio_target": rho,
        "tolerance": tolerance,
        "overlap": overlap,
        "pinned": sorted(pinned),
        "predicted": {
            "env_steps_per_s": pick["env_steps_per_s"],
            "update_samples_per_s": pick["update_samples_per_s"],
            "iteration_s": pick["iteration_s"],
            "chunk_s": k * pick["iteration_s"],
            "bytes": pick["bytes"],
        },
        # the plain per-axis knees, for reference: where each rate alone saturates
        "sampling_knee": min(p.value for p in s_points if p.rate >= (1 - tolerance) * best_s),
        "update_knee": min(p.value for p in u_points if p.rate >= (1 - tolerance) * best_u),
        "candidates": sorted(candidates, key=lambda c: (c["num_envs"], c["batch_size"])),
    }


# ------------------------------------------------------------------------- the grid walk
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
) -> Grid:
    """Measure ``grid.values`` in order, from where it stopped, until a stop rule fires.

    The first point is always measured (the minimum any choice needs).
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
            f"(compile {point.compile_s:.1f}s)"
        )
        stalls = 0 if point.rate > best * (1 + MIN_GAIN) else stalls + 1
        best = max(best, point.rate)
        if stalls >= PATIENCE:
            grid.stop = "plateau"
            break
    return grid


# ------------------------------------------------------------------------- tune
def _mib(nbytes: float | None) -> str:
    return "unknown memory" if nbytes is None else f"{nbytes / 2**20:,.1f} MiB"


def plan_grids(cfg: RunConfig, pinned: set[str]) -> tuple[list[int], list[int]]:
    """The num_envs grid and the batch grid for ``cfg`` (a pinned field is a 1-point grid).

    PPO's env grid starts where the rollout ``n T`` holds PPO_MIN_MINIBATCHES of the
    smallest minibatch (and is a multiple of it), so every num_envs has a feasible batch.
    """
    T = cfg.rollout_steps
    start, factor, top = ENV_GRID
    if cfg.algo == "ppo":
        b_start, b_factor, b_top = PPO_BATCH_GRID
        b0 = cfg.batch_size if "batch_size" in pinned else b_start
        unit = b0 // math.gcd(b0, T)  # n T is a multiple of b0 iff n is one of unit
        start = unit * max(1, math.ceil(PPO_MIN_MINIBATCHES * b0 / (unit * T)))
        top = max(top, start)
    else:
        cap = max(cfg.total_steps - cfg.learning_starts, 1) // (T * MIN_ITERATIONS)
        top = max(1, min(top, cfg.buffer_size // T, cap))
        b_start, b_factor, b_top = BATCH_GRID
        b_top = min(b_top, cfg.buffer_size)
    envs = [cfg.num_envs] if "num_envs" in pinned else geometric(start, factor, top)
    if cfg.algo == "ppo":
        b_top = min(b_top, max(envs) * T)
    b_start = min(b_start, b_top)
    batches = [cfg.batch_size] if "batch_size" in pinned else geometric(b_start, b_factor, b_top)
    return envs, batches


def _load_average() -> float | None:
    """The host's 1-minute load average (a busy machine makes every rate noisy)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for name in ("jaxspreeze", "jax", "jaxlib", "flax", "optax", "gymnax", "brax"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def tune(
    cfg: RunConfig,
    budget_s: float | None = None,
    out_dir: Path | None = None,
    pinned: set[str] | frozenset[str] = frozenset(),
    say: Callable[[str], None] = print,
    *,
    prober: Prober | None = None,
    memory_limit: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[RunConfig, dict[str, Any]]:
    """Probe this machine and return ``cfg`` with the chosen sizes, and the profile.

    ``pinned`` fields (set explicitly by the user) keep ``cfg``'s values. ``budget_s``
    (default ``cfg.autotune_budget_s``) bounds the probe; ``memory_limit`` (bytes,
    default: the free memory of the critic device) bounds what a run may allocate.
    ``prober`` replaces the real measurements (tests inject fake timings).
    Writes ``autotune.json``, ``autotune.png`` and ``autotune.md`` into ``out_dir``.
    """
    from jaxspreeze import config as config_lib
    from jaxspreeze import devices

    t_setup = clock()
    budget = cfg.autotune_budget_s if budget_s is None else float(budget_s)
    if not budget >= MIN_BUDGET_S:
        raise ConfigError(
            "autotune_budget_s",
            f"{budget:g} s is too small for even one probe (a compile and {REPS} timed "
            f"repetitions of each kind); give at least {MIN_BUDGET_S:g} s (default 30)",
        )
    pinned = set(pinned) & set(TUNED)
    config_lib.validate(_placeholders(cfg, pinned))
    rho = target_replay_ratio(cfg)
    placement = devices.resolve(cfg.placement)
    if memory_limit is None:
        memory_limit = int(free_memory(placement.critic) * MEMORY_FRACTION)
    if prober is None:
        from jaxspreeze.trainer import enable_compile_cache

        enable_compile_cache(cfg.compile_cache)
        prober = RealProber(cfg, placement, memory_limit)
    fixed = prober.fixed_bytes
    env_values, batch_values = plan_grids(cfg, pinned)
    _check_memory(cfg, prober, pinned, memory_limit, env_values[0], batch_values[0])
    t0 = clock()  # the budget covers the probes, not imports and setup
    load_before = _load_average()
    setup_s = t0 - t_setup

    say(
        f"autotune: {cfg.algo} on {cfg.env} | {placement.describe()} | budget "
        f"{budget:g}s | memory limit {_mib(memory_limit)} | target replay ratio {rho:g}"
    )
    sampling = Grid("sampling", env_values)
    update = Grid("update", batch_values)
    s_need = lambda n: fixed + prober.sampling_bytes(n) + prober.update_bytes(batch_values[0])
    u_need = lambda b: fixed + prober.sampling_bytes(env_values[0]) + prober.update_bytes(b)
    # the first point of each grid (a deadline in the past measures exactly one) ...
    walk(sampling, prober.sampling, s_need, memory_limit, t0, clock, say)
    walk(update, prober.update, u_need, memory_limit, t0, clock, say)
    for grid, name in ((sampling, "num_envs"), (update, "batch_size")):
        if not grid.points:
            raise ConfigError(
                name if name in pinned else "buffer_size",
                f"the smallest {grid.kind} probe ({name} {grid.values[0]}) compiled to more "
                f"than the {_mib(memory_limit)} free",
            )
    # ... then the sampling grid gets a share of the budget as large as sampling's share
    # of an iteration's time there (clamped to 15-50%): SAC on a CPU is update-bound
    share = sampling_share(cfg, sampling.points[0], update.points[0])
    walk(sampling, prober.sampling, s_need, memory_limit, t0 + share * budget, clock, say)
    walk(update, prober.update, u_need, memory_limit, t0 + WALK_SHARE * budget, clock, say)
    if sampling.stop == "budget":  # the update grid left time over: go on sampling
        walk(sampling, prober.sampling, s_need, memory_limit, t0 + WALK_SHARE * budget, clock, say)
    for grid, name in ((sampling, "num_envs"), (update, "batch_size")):
        if name in pinned:
            grid.stop = "pinned"
    retimed = _retime(prober, (sampling, update), t0 + budget, clock)
    elapsed = clock() - t0

    choice = choose(
        cfg, sampling.points, update.points, pinned, memory_limit, fixed, TOLERANCE, placement.split
    )
    chosen = cfg.replace(**{k: choice[k] for k in TUNED if k not in pinned})
    config_lib.validate(chosen)
    profile: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "algo": cfg.algo,
        "env": cfg.env,
        "placement": placement.describe(),
        "rollout_steps": cfg.rollout_steps,
        "hidden": list(cfg.algo_config.hidden),
        "hardware": devices.describe_hardware(),
        "versions": _versions(),
        "budget_s": budget,
        "elapsed_s": elapsed,
        "setup_s": setup_s,
        "over_budget": elapsed > budget,
        "retime_rounds": retimed,
        "load_average": {"before": load_before, "after": _load_average()},
        "memory": {"limit_bytes": memory_limit, "fixed_bytes": fixed},
        "rules": {
            "tolerance": TOLERANCE,
            "min_gain": MIN_GAIN,
            "patience": PATIENCE,
            "reps": REPS,
            "target_chunk_s": TARGET_CHUNK_S,
        },
        "sampling": _grid_dict(sampling),
        "update": _grid_dict(update),
        "choice": choice,
    }
    if elapsed > budget:
        say(
            f"autotune: the probe took {elapsed:.1f}s, over the {budget:g}s budget "
            "(one point per grid is the minimum; compiles are slow on a busy machine)"
        )
    say(table(profile))
    if out_dir is not None:
        write(profile, Path(out_dir), say)
    return chosen, profile


def _placeholders(cfg: RunConfig, pinned: set[str]) -> RunConfig:
    """``cfg`` with valid stand-ins for the fields autotune will choose, for validation.

    The values the user left to autotune need not fit together yet (e.g. PPO's default
    minibatch larger than a small rollout); everything else is checked as usual.
    """
    changes: dict[str, int] = {}
    if "grad_steps" not in pinned:
        changes["grad_steps"] = grad_step_multiple(cfg)
    if "batch_size" not in pinned:
        if cfg.algo == "ppo":
            changes["batch_size"] = cfg.num_envs * cfg.rollout_steps
        else:
            changes["batch_size"] = min(cfg.batch_size, cfg.buffer_size)
    if "num_envs" not in pinned and cfg.algo != "ppo":
        changes["num_envs"] = max(1, min(cfg.num_envs, cfg.buffer_size // cfg.rollout_steps))
    return cfg.replace(**changes) if changes else cfg


def sampling_share(cfg: RunConfig, s0: Point, u0: Point) -> float:
    """The sampling grid's share of the budget (within the grids' WALK_SHARE).

    It is sampling's share of an iteration's time at the first points (n0, B0) and the
    target replay ratio, clamped to SAMPLING_SHARE: an update-bound run (SAC on a CPU)
    spends its budget on batch sizes, a sampling-bound one on num_envs.
    """
    t_sample, t_update = 1 / s0.rate, target_replay_ratio(cfg) / u0.rate
    lo, hi = SAMPLING_SHARE
    return WALK_SHARE * min(max(t_sample / (t_sample + t_update), lo), hi)


def _retime(prober: Any, grids: Sequence[Grid], deadline: float, clock: Callable) -> int:
    """Time every measured point again, round-robin, while the budget allows.

    Rates on a shared machine drift with its load; timing all points close together
    (compiled programs are kept) and taking the median of all repetitions evens that out.
    """
    retime = getattr(prober, "retime", None)
    points = [(g.kind, p) for g in grids for p in g.points]
    if retime is None or len(points) < 2:
        return 0
    for done in range(RETIME_ROUNDS):
        cost = 1.2 * sum(REPS * max(MIN_REP_S, p.call_s) for _, p in points)
        if clock() + cost > deadline:
            return done
        for kind, p in points:
            p.rates += retime(kind, p.value)
            p.rate = statistics.median(p.rates)
    return RETIME_ROUNDS


def _check_memory(
    cfg: RunConfig, prober: Prober, pinned: set[str], limit: int, n0: int, b0: int
) -> None:
    """Fail before any probe when even the smallest (or the pinned) sizes cannot fit."""
    fixed = prober.fixed_bytes
    if fixed > limit:
        raise ConfigError(
            "buffer_size",
            f"the replay buffer and agent need {_mib(fixed)} but only {_mib(limit)} are "
            "free; lower --buffer-size",
        )
    s_bytes, u_bytes = prober.sampling_bytes(n0), prober.update_bytes(b0)
    need = fixed + s_bytes + u_bytes
    if need <= limit:
        return
    detail = (
        f"needs about {_mib(need)} (buffer + agent {_mib(fixed)}, sampling {_mib(s_bytes)}, "
        f"update {_mib(u_bytes)}) but only {_mib(limit)} are free"
    )
    if "batch_size" in pinned and fixed + u_bytes > limit - s_bytes:
        raise ConfigError("batch_size", f"pinned batch size {cfg.batch_size} {detail}")
    if "num_envs" in pinned:
        raise ConfigError("num_envs", f"pinned num_envs {cfg.num_envs} {detail}")
    raise ConfigError("buffer_size", f"the smallest probe {detail}; lower --buffer-size")


def _grid_dict(grid: Grid) -> dict[str, Any]:
    return {
        "values": grid.values,
        "stop": grid.stop,
        "points": [dataclasses.asdict(p) for p in grid.points],
    }


def _points(profile: dict[str, Any], kind: str) -> list[Point]:
    return [Point(**p) for p in profile[kind]["points"]]


# ------------------------------------------------------------------------- output
def table(profile: dict[str, Any]) -> str:
    """The measurements and the choice as a Markdown table (also printed)."""
    c = profile["choice"]
    lines = [
        f"### autotune: {profile['algo']} on {profile['env']} ({profile['placement']})",
        "",
        f"hardware: {profile['hardware'].get('backend')} {profile['hardware'].get('devices')}, "
        f"{profile['hardware'].get('cpu_count')} CPUs | probe {profile['elapsed_s']:.1f}s "
        f"of a {profile['budget_s']:g}s budget | load average {_load(profile)}",
        "",
        "| probe | size | rate | compile s | reps | est. MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, name, unit, key in (
        ("sampling", "num_envs", "env steps/s", "num_envs"),
        ("update", "batch", "update samples/s", "batch_size"),
    ):
        for p in profile[kind]["points"]:
            mark = " **(chosen)**" if p["value"] == c[key] else ""
            lines.append(
                f"| {kind} | {name} {p['value']}{mark} | {p['rate']:,.0f} {unit} | "
                f"{p['compile_s']:.1f} | {len(p['rates'])} | {p['bytes_est'] / 2**20:.1f} |"
            )
        lines.append(f"| {kind} | stopped: {profile[kind]['stop']} | | | | |")
    pred = c["predicted"]
    pinned = set(c["pinned"])
    tag = lambda k: " (pinned)" if k in pinned else ""
    lines += [
        "",
        f"choice: num_envs {c['num_envs']}{tag('num_envs')}, batch_size "
        f"{c['batch_size']}{tag('batch_size')}, grad_steps {c['grad_steps']}"
        f"{tag('grad_steps')}, chunk_iterations {c['chunk_iterations']}"
        f"{tag('chunk_iterations')}",
        f"replay ratio {c['replay_ratio']:.1f} (target {c['replay_ratio_target']:g}); "
        f"predicted {pred['env_steps_per_s']:,.0f} env steps/s, "
        f"{pred['update_samples_per_s']:,.0f} update samples/s, "
        f"{pred['chunk_s']:.2f}s per chunk",
        f"(per-axis knees: sampling saturates at num_envs {c['sampling_knee']}, "
        f"updates at batch {c['update_knee']})",
    ]
    return "\n".join(lines)


def _load(profile: dict[str, Any]) -> str:
    value = (profile.get("load_average") or {}).get("before")
    return "unknown" if value is None else f"{value:.1f}"


def plot(profile: dict[str, Any], path: Path) -> None:
    """Throughput vs num_envs, vs batch size, and the end-to-end model, chosen points marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = profile["choice"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, kind, key, xlabel, ylabel in (
        (axes[0], "sampling", "num_envs", "num_envs", "env steps/s (policy in the loop)"),
        (axes[1], "update", "batch_size", "batch size", "update samples/s"),
    ):
        pts = profile[kind]["points"]
        xs = [p["value"] for p in pts]
        ax.plot(xs, [p["rate"] for p in pts], "o-", color="C0", label="median")
        for p in pts:
            ax.plot([p["value"]] * len(p["rates"]), p["rates"], ".", color="C0", alpha=0.3)
        chosen = [p for p in pts if p["value"] == c[key]]
        if chosen:
            ax.plot(chosen[0]["value"], chosen[0]["rate"], "*", ms=18, color="C3", label="chosen")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{kind} (stopped: {profile[kind]['stop']})")
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="lower right")
    ax = axes[2]
    cands = c["candidates"]
    batches = sorted({x["batch_size"] for x in cands})
    cmap = plt.get_cmap("viridis")
    for i, b in enumerate(batches):
        row = [x for x in cands if x["batch_size"] == b]
        ax.plot(
            [x["num_envs"] for x in row],
            [x["env_steps_per_s"] for x in row],
            "o-",
            ms=3,
            color=cmap(i / max(len(batches) - 1, 1)),
            label=f"B={b}",
        )
    ax.plot(c["num_envs"], c["predicted"]["env_steps_per_s"], "*", ms=18, color="C3")
    best = max(x["score"] for x in cands)
    ax.axhline((1 - c["tolerance"]) * best, ls="--", color="gray", lw=1, label="best - tol")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.15 * max(x["env_steps_per_s"] for x in cands))
    ax.set_xlabel("num_envs")
    ax.set_ylabel("predicted training env steps/s")
    ax.set_title(f"at replay ratio {c['replay_ratio_target']:g}: G = round(rho n T / B)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"autotune {profile['algo']} on {profile['env']} ({profile['hardware'].get('backend')}): "
        f"num_envs {c['num_envs']}, batch {c['batch_size']}, G {c['grad_steps']}, "
        f"K {c['chunk_iterations']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(profile: dict[str, Any], out_dir: Path, say: Callable[[str], None] = print) -> None:
    """Write ``autotune.json``, ``autotune.md`` and ``autotune.png`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "autotune.json").write_text(json.dumps(profile, indent=2))
    (out_dir / "autotune.md").write_text(table(profile) + "\n")
    plot(profile, out_dir / "autotune.png")
    say(f"autotune: wrote {out_dir / 'autotune.json'}, autotune.md and autotune.png")


# ------------------------------------------------------------------------- profiles
def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and check an ``autotune.json`` (ConfigError("profile", ...) if it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("profile", f"no such file {str(path)!r}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("profile", f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError("profile", f"{path} is not a jaxspreeze autotune profile")
    if data.get("version") != VERSION:
        raise ConfigError(
            "profile",
            f"{path} has profile version {data.get('version')!r}, this jaxspreeze reads "
            f"{VERSION}; rerun `jaxspreeze autotune`",
        )
    try:
        choice = data["choice"]
        for key in TUNED:
            value = choice[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError("profile", f"{path}: choice.{key} must be a positive integer")
        for kind in ("sampling", "update"):
            _points(data, kind)
    except (KeyError, TypeError) as e:
        raise ConfigError("profile", f"{path} is incomplete or damaged ({e!r})") from None
    return data


def apply_profile(
    cfg: RunConfig, path: str | Path, pinned: set[str] | frozenset[str] = frozenset()
) -> RunConfig:
    """``cfg`` with the sizes of the autotune profile at ``path`` (pinned fields kept).

    A profile made for another algorithm or env is an error (its rates and replay ratio
    do not transfer). Other hardware, network widths, rollout length or placement only
    warn (:class:`ProfileWarning`): the profile is still a valid, if maybe slower, choice.
    With nothing pinned and the same replay-ratio target the stored choice is used as is;
    otherwise the choice rule is re-run on the stored measurements around the pinned
    values (e.g. a pinned batch gets the grad_steps that keeps the replay ratio).
    """
    from jaxspreeze import config as config_lib
    from jaxspreeze import devices

    profile = load_profile(path)
    if (profile["algo"], profile["env"]) != (cfg.algo, cfg.env):
        raise ConfigError(
            "profile",
            f"{path} was measured for {profile['algo']} on {profile['env']}, this run is "
            f"{cfg.algo} on {cfg.env}; rerun `jaxspreeze autotune --algo {cfg.algo} "
            f"--env {cfg.env}`",
        )
    hw, here = profile.get("hardware", {}), devices.describe_hardware()
    for key, what in (
        ("backend", "backend"),
        ("devices", "devices"),
        ("cpu_count", "CPU count"),
    ):
        if hw.get(key) != here.get(key):
            _warn(f"{path}: measured on {what} {hw.get(key)}, this machine has {here.get(key)}")
    if list(profile.get("hidden", [])) != list(cfg.algo_config.hidden):
        _warn(
            f"{path}: measured with hidden {profile.get('hidden')}, this run uses "
            f"{list(cfg.algo_config.hidden)}; its rates do not apply exactly"
        )
    if profile.get("rollout_steps") != cfg.rollout_steps:
        _warn(f"{path}: measured with rollout_steps {profile.get('rollout_steps')}")
    pinned = set(pinned) & set(TUNED)
    stored = profile["choice"]
    if not pinned and math.isclose(stored["replay_ratio_target"], target_replay_ratio(cfg)):
        choice = stored
    else:
        choice = choose(
            cfg,
            _points(profile, "sampling"),
            _points(profile, "update"),
            pinned,
            profile["memory"]["limit_bytes"],
            profile["memory"]["fixed_bytes"],
            stored.get("tolerance", TOLERANCE),
            stored.get("overlap", False),
        )
    new = cfg.replace(**{k: int(choice[k]) for k in TUNED if k not in pinned})
    try:
        config_lib.validate(new)
    except ConfigError as e:
        raise ConfigError(
            "profile", f"applying {path} gives an invalid config: --{e.field}: {e}"
        ) from None
    return new


def _warn(message: str) -> None:
    warnings.warn(message, ProfileWarning, stacklevel=3)


# ------------------------------------------------------------------------- CLI
def pinned_fields(argv: Sequence[str]) -> set[str]:
    """The tuned fields a ``train``-style argv sets explicitly (a flag, or a key of its --config)."""
    args = list(argv)
    preset = pop_option(args, "--config")
    pinned: set[str] = set()
    for name in TUNED:
        flags = {"--" + name.replace("_", "-"), "--" + name}
        if any(a.split("=", 1)[0] in flags for a in args):
            pinned.add(name)
    if preset and Path(preset).is_file():
        text = Path(preset).read_text()
        if preset.endswith(".json"):
            data = json.loads(text)
        else:
            from jaxspreeze.config import tomllib  # tomllib, or tomli on Python 3.10

            data = tomllib.loads(text)
        pinned |= {k.replace("-", "_") for k in data} & set(TUNED)
    return pinned


USAGE = """usage: jaxspreeze autotune [--out DIR] [train flags]

Measure env steps/s over num_envs and update samples/s over batch sizes on this machine
for the configured algo/env, pick num_envs, batch_size, grad_steps and chunk_iterations,
and write DIR/autotune.json (reuse it with `jaxspreeze train --profile DIR/autotune.json`),
autotune.md and autotune.png. Flags you set (e.g. --batch-size 512) are pinned; the
probe's time is bounded by --autotune-budget-s (default 30).
"""


def main(argv: Sequence[str]) -> int:
    """``jaxspreeze autotune [--out DIR] [train flags]``: probe, choose, write the profile."""
    from jaxspreeze.cli import fail, flag, parse_train_args

    args = list(argv)
    if "-h" in args or "--help" in args:
        print(USAGE)
    out = pop_option(args, "--out") or "."
    try:
        cfg = parse_train_args(args)
        pinned = pinned_fields(args)
        tune(cfg, out_dir=Path(out), pinned=pinned)
    except SystemExit as e:  # tyro: --help or a bad flag
        return int(e.code or 0) if isinstance(e.code, int) else 2
    except ConfigError as e:
        return fail(f"{flag(e.field)}: {str(e).split(': ', 1)[1]}")
    print(f"train with it: jaxspreeze train --profile {Path(out) / 'autotune.json'}")
    return 0
