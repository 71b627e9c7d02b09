"""Autotune: measure sampling and update throughput on this machine and pick the parallelism.

``autotune.tune(cfg)`` (``jaxspreeze autotune``, ``jaxspreeze train --autotune``) runs two
probes for the configured algorithm, env and placement:

- **sampling**: ``rollout`` with the algorithm's policy in the loop, jitted, over a
  geometric grid of ``num_envs`` (1, 4, 16, ...) -> env steps/s;
- **update**: the critic-then-actor step on a filled replay buffer (or a rollout, for an
  on-policy algorithm) over a geometric grid of batch sizes (B0, 2 B0, ...) -> update
  samples/s (batch x gradient steps per second), i.e. seconds per gradient step.

Each point is compiled first (compile time is reported apart), run once untimed, then
timed over several repetitions; the rate is the median. A grid stops growing when the
rate gained < 5% twice in a row, when the next point's memory would not fit, or when the
next point's predicted cost would overrun its share of ``--autotune-budget-s`` (the
sampling grid gets sampling's share of an iteration's time, 15-50%, both grids 85%; the
rest times every point again, round-robin, against load drift). The choice rule
(:mod:`.choose`) then picks num_envs, batch_size, grad_steps and chunk_iterations at the
configured run's gradient steps per env step: the batch grows only while a gradient step
costs no more time, num_envs by predicted wall time; fields the user pinned keep their
values. ``autotune.apply_profile(cfg, "autotune.json")`` reuses a stored choice.

The parts: :mod:`.probes` (the timed programs), :mod:`.grid` (the grids and the walk),
:mod:`.choose` (the choice rule), :mod:`.profile` (``autotune.json`` written, read and
applied), :mod:`.report` (the table and the figure).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from jaxspreeze import algos, config, devices
from jaxspreeze.autotune import choose, probes
from jaxspreeze.autotune.choose import (
    BATCH_TOLERANCE,
    MIN_ITERATIONS,
    ON_POLICY_MAX_MINIBATCHES,
    TARGET_CHUNK_S,
    TOLERANCE,
    TUNED,
    mib,
    update_ratio,
)
from jaxspreeze.autotune.grid import (
    MIN_GAIN,
    PATIENCE,
    WALK_SHARE,
    Grid,
    batch_stop,
    plan_grids,
    retime,
    sampling_share,
    walk,
)
from jaxspreeze.autotune.probes import REPS, Prober, free_memory
from jaxspreeze.autotune.profile import (
    FORMAT,
    VERSION,
    ProfileWarning,
    apply_profile,
    load_profile,
)
from jaxspreeze.autotune.profile import write as write_profile
from jaxspreeze.autotune.report import table
from jaxspreeze.config import RunConfig
from jaxspreeze.errors import ConfigError
from jaxspreeze.trainer import enable_compile_cache

__all__ = ["TUNED", "ProfileWarning", "apply_profile", "load_profile", "tune", "write_profile"]

MIN_BUDGET_S = 2.0  # below this not even one compiled probe can fit
MEMORY_FRACTION = 0.9  # of the free memory that a run may plan to use


def _load_average() -> float | None:
    """The host's 1-minute load average (a busy machine makes every rate noisy)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in ("jaxspreeze", "jax", "jaxlib", "flax", "optax", "gymnax", "brax"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _placeholders(cfg: RunConfig, pinned: set[str]) -> RunConfig:
    """``cfg`` with valid stand-ins for the fields autotune will choose, for validation.

    The values the user left to autotune need not fit together yet (e.g. PPO's default
    minibatch larger than a small rollout); everything else is checked as usual.
    """
    spec = algos.get(cfg.algo)
    changes: dict[str, int] = {}
    if "grad_steps" not in pinned:
        changes["grad_steps"] = spec.grad_step_multiple(cfg.algo_config)
    if "batch_size" not in pinned:
        if spec.on_policy:
            changes["batch_size"] = cfg.num_envs * cfg.rollout_steps
        else:
            changes["batch_size"] = min(cfg.batch_size, cfg.buffer_size)
    if "num_envs" not in pinned and not spec.on_policy:
        changes["num_envs"] = max(1, min(cfg.num_envs, cfg.buffer_size // cfg.rollout_steps))
    return cfg.replace(**changes) if changes else cfg


def _check_memory(
    cfg: RunConfig, prober: Prober, pinned: set[str], limit: int, n0: int, b0: int
) -> None:
    """Fail before any probe when even the smallest (or the pinned) sizes cannot fit."""
    fixed = prober.fixed_bytes
    if fixed > limit:
        raise ConfigError(
            "buffer_size",
            f"the replay buffer and agent need {mib(fixed)} but only {mib(limit)} are "
            "free; lower --buffer-size",
        )
    s_bytes, u_bytes = prober.sampling_bytes(n0), prober.update_bytes(b0)
    need = fixed + s_bytes + u_bytes
    if need <= limit:
        return
    detail = (
        f"needs about {mib(need)} (buffer + agent {mib(fixed)}, sampling {mib(s_bytes)}, "
        f"update {mib(u_bytes)}) but only {mib(limit)} are free"
    )
    if "batch_size" in pinned and fixed + u_bytes > limit - s_bytes:
        raise ConfigError("batch_size", f"pinned batch size {cfg.batch_size} {detail}")
    if "num_envs" in pinned:
        raise ConfigError("num_envs", f"pinned num_envs {cfg.num_envs} {detail}")
    raise ConfigError("buffer_size", f"the smallest probe {detail}; lower --buffer-size")


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
    t_setup = clock()
    cfg = config.resolve(cfg)
    budget = cfg.autotune_budget_s if budget_s is None else float(budget_s)
    if not budget >= MIN_BUDGET_S:
        raise ConfigError(
            "autotune_budget_s",
            f"{budget:g} s is too small for even one probe (a compile and {REPS} timed "
            f"repetitions of each kind); give at least {MIN_BUDGET_S:g} s (default 30)",
        )
    pinned = set(pinned) & set(TUNED)
    config.validate(_placeholders(cfg, pinned))
    u = update_ratio(cfg, pinned)
    on_policy = algos.get(cfg.algo).on_policy
    placement = devices.resolve(cfg.placement)
    if memory_limit is None:
        memory_limit = int(free_memory(placement.critic) * MEMORY_FRACTION)
    if prober is None:
        enable_compile_cache(cfg.compile_cache)
        prober = probes.RealProber(cfg, placement, memory_limit)
    fixed = prober.fixed_bytes
    env_values, batch_values = plan_grids(cfg, pinned)
    _check_memory(cfg, prober, pinned, memory_limit, env_values[0], batch_values[0])
    t0 = clock()  # the budget covers the probes, not imports and setup
    load_before = _load_average()
    setup_s = t0 - t_setup

    say(
        f"autotune: {cfg.algo} on {cfg.env} | {placement.describe()} | budget "
        f"{budget:g}s | memory limit {mib(memory_limit)} | {u:.4g} gradient steps per env "
        f"step (kept)"
    )
    sampling = Grid("sampling", env_values)
    update = Grid("update", batch_values)
    s_need = lambda n: fixed + prober.sampling_bytes(n) + prober.update_bytes(batch_values[0])
    u_need = lambda b: fixed + prober.sampling_bytes(env_values[0]) + prober.update_bytes(b)
    # the first point of each grid (a deadline in the past measures exactly one) ...
    walk(sampling, prober.sampling, s_need, memory_limit, t0, clock, say)
    u_stop = None if on_policy else batch_stop
    walk(update, prober.update, u_need, memory_limit, t0, clock, say, u_stop)
    for grid, name in ((sampling, "num_envs"), (update, "batch_size")):
        if not grid.points:
            raise ConfigError(
                name if name in pinned else "buffer_size",
                f"the smallest {grid.kind} probe ({name} {grid.values[0]}) compiled to more "
                f"than the {mib(memory_limit)} free",
            )
    # ... then the sampling grid gets a share of the budget as large as sampling's share
    # of an iteration's time there (clamped to 15-50%): SAC on a CPU is update-bound
    share = sampling_share(cfg, sampling.points[0], update.points[0])
    walk(sampling, prober.sampling, s_need, memory_limit, t0 + share * budget, clock, say)
    walk(update, prober.update, u_need, memory_limit, t0 + WALK_SHARE * budget, clock, say, u_stop)
    if sampling.stop == "budget":  # the update grid left time over: go on sampling
        walk(sampling, prober.sampling, s_need, memory_limit, t0 + WALK_SHARE * budget, clock, say)
    for grid, name in ((sampling, "num_envs"), (update, "batch_size")):
        if name in pinned:
            grid.stop = "pinned"
        elif grid is update and on_policy:
            grid.stop = "kept (on-policy minibatch)"
    retimed = retime(prober, (sampling, update), t0 + budget, clock)
    elapsed = clock() - t0

    choice = choose.choose(
        cfg, sampling.points, update.points, pinned, memory_limit, fixed, TOLERANCE, placement.split
    )
    chosen = cfg.replace(**{k: choice[k] for k in TUNED if k not in pinned})
    config.validate(chosen)
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
            "batch_tolerance": BATCH_TOLERANCE,
            "min_iterations": MIN_ITERATIONS,
            "on_policy_max_minibatches": ON_POLICY_MAX_MINIBATCHES,
            "min_gain": MIN_GAIN,
            "patience": PATIENCE,
            "reps": REPS,
            "target_chunk_s": TARGET_CHUNK_S,
        },
        "sampling": sampling.as_dict(),
        "update": update.as_dict(),
        "choice": choice,
    }
    if elapsed > budget:
        say(
            f"autotune: the probe took {elapsed:.1f}s, over the {budget:g}s budget "
            "(one point per grid is the minimum; compiles are slow on a busy machine)"
        )
    say(table(profile))
    if out_dir is not None:
        write_profile(profile, Path(out_dir), say)
    return chosen, profile
