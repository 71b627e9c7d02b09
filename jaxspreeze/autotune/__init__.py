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

**Host envs** (``gymnasium/<id>``, ``envpool/<task>``: the host schedule's sampling
workers step them while the learner updates) are probed by :class:`~.host.HostProber`:
the worker pool's env steps/s with the policy in the loop over worker counts (1, 2, 4, ...
up to the CPU count) x num_envs, and the learner's update over batch sizes. The choice
(:func:`~.choose.choose_host`) also picks ``host_workers``: the batch by the same rule,
then the (workers, num_envs) whose run goes fastest at the kept replay ratio, a run going
at the slower of its two sides, ``min(sampling, learner)``.

The parts: :mod:`.probes` (the timed programs), :mod:`.host` (the host-env probes),
:mod:`.grid` (the grids and the walk), :mod:`.choose` (the choice rule), :mod:`.profile`
(``autotune.json`` written, read and applied), :mod:`.report` (the table and the figure).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from jaxspreeze import algos, config, devices, envs
from jaxspreeze.autotune import choose, probes
from jaxspreeze.autotune.choose import (
    BATCH_TOLERANCE,
    HOST_TUNED,
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
from jaxspreeze.autotune.host import CHECK_S, HostProber, plan_host_grids
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

__all__ = [
    "HOST_TUNED",
    "TUNED",
    "ProfileWarning",
    "apply_profile",
    "load_profile",
    "tune",
    "write_profile",
]

MIN_BUDGET_S = 2.0  # below this not even one compiled probe can fit
CHECK_SHARE = 0.4  # host envs: the check of the choice may take up to this share of the budget
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
    host = envs.is_host_env(cfg.env)
    pinned = set(pinned) & set(HOST_TUNED if host else TUNED)
    config.validate(_placeholders(cfg, pinned))
    u = update_ratio(cfg, pinned & set(TUNED))
    on_policy = algos.get(cfg.algo).on_policy
    placement = devices.resolve(cfg.placement)
    if memory_limit is None:
        memory_limit = int(free_memory(placement.critic) * MEMORY_FRACTION)
    if host:
        if on_policy:  # choose_host's rule is the off-policy one (replay ratio, free batch)
            raise ConfigError(
                "algo",
                f"autotune of {cfg.algo} on host envs ({cfg.env}) is not supported yet; set "
                "the sizes, or tune an off-policy algorithm (sac, td3, ddpg)",
            )
        if prober is None:
            enable_compile_cache(cfg.compile_cache)
            prober = HostProber(cfg, placement, memory_limit)
        profile = _tune_host(
            cfg, budget, pinned, u, placement, memory_limit, prober, say, clock, t_setup
        )
        chosen = cfg.replace(**{k: profile["choice"][k] for k in HOST_TUNED if k not in pinned})
        config.validate(chosen)
        say(table(profile))
        if out_dir is not None:
            write_profile(profile, Path(out_dir), say)
        return chosen, profile
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


def _tune_host(
    cfg: RunConfig,
    budget: float,
    pinned: set[str],
    u: float,
    placement: Any,
    memory_limit: int,
    prober: Any,
    say: Callable[[str], None],
    clock: Callable[[], float],
    t_setup: float,
) -> dict[str, Any]:
    """The host-env probe (``gymnasium/``, ``envpool/``): workers x num_envs, then batches.

    The sampling grids (one per worker count, :func:`~.host.plan_host_grids`) and the
    update grid are walked as on the device path: the first point of each, then the
    sampling grids share sampling's part of the budget in turn, then the batches; the
    choice is :func:`~.choose.choose_host`'s; then a short run of the host schedule at the
    choice checks it (its time set aside from the start, when it takes at most
    CHECK_SHARE of the budget); what is left re-times the update points.
    Returns the profile (``setup_s``: from ``t_setup`` to the first probe).
    """
    fixed = prober.fixed_bytes
    env_grids, batch_values = plan_host_grids(cfg, pinned)
    n_first = min(v[0] for v in env_grids.values())
    _check_memory(cfg, prober, pinned, memory_limit, n_first, batch_values[0])
    t0 = clock()
    load_before = _load_average()
    say(
        f"autotune: {cfg.algo} on {cfg.env} (host env: sampling workers) | "
        f"{placement.describe()} | budget {budget:g}s | memory limit {mib(memory_limit)} | "
        f"{u:.4g} gradient steps per env step (kept)"
    )
    grids = {w: Grid("sampling", values) for w, values in env_grids.items()}
    update = Grid("update", batch_values)
    b0 = batch_values[0]
    s_need = lambda n: fixed + prober.sampling_bytes(n) + prober.update_bytes(b0)
    u_need = lambda b: fixed + prober.sampling_bytes(n_first) + prober.update_bytes(b)
    measure = {w: (lambda n, w=w: prober.host_sampling(w, n)) for w in grids}
    label = {w: f" | {w} worker{'s' if w != 1 else ''}" for w in grids}
    # the first point of every grid (a deadline in the past measures exactly one) ...
    for w, g in grids.items():
        walk(g, measure[w], s_need, memory_limit, t0, clock, say, label=label[w])
    walk(update, prober.update, u_need, memory_limit, t0, clock, say, batch_stop)
    for g, name in [*((g, "num_envs") for g in grids.values()), (update, "batch_size")]:
        if not g.points:
            raise ConfigError(
                name if name in pinned else "buffer_size",
                f"the smallest {g.kind} probe ({name} {g.values[0]}) does not fit in the "
                f"{mib(memory_limit)} free",
            )
    # ... then the sampling grids, in turn, within sampling's share of the budget ...
    first = max((g.points[0] for g in grids.values()), key=lambda p: p.rate)
    share = sampling_share(cfg, first, update.points[0])
    # the check of the choice (a short run) gets its time set aside, unless that would
    # take more than CHECK_SHARE of the budget from the grids
    cost = 1.5 * (update.points[0].compile_s + CHECK_S) + 1.0
    has_check = getattr(prober, "host_run", None) is not None
    grids_s = budget - cost if has_check and cost <= CHECK_SHARE * budget else budget
    for i, (w, g) in enumerate(grids.items()):
        deadline = t0 + share * grids_s * (i + 1) / len(grids)
        walk(g, measure[w], s_need, memory_limit, deadline, clock, say, label=label[w])
    end = t0 + WALK_SHARE * grids_s
    walk(update, prober.update, u_need, memory_limit, end, clock, say, batch_stop)
    for w, g in grids.items():  # the update grid left time over: go on sampling
        if g.stop == "budget":
            walk(g, measure[w], s_need, memory_limit, end, clock, say, label=label[w])
    for name, gs in (("num_envs", grids.values()), ("batch_size", [update])):
        if name in pinned:
            for g in gs:
                g.stop = "pinned"
    if "host_workers" in pinned:
        for g in grids.values():
            g.stop = g.stop if g.stop == "pinned" else f"{g.stop} (workers pinned)"
    points = [p for g in grids.values() for p in g.points]
    choice = choose.choose_host(
        cfg, points, update.points, pinned, memory_limit, fixed, TOLERANCE, BATCH_TOLERANCE
    )
    # the check: a short run of the host schedule at the choice, when the budget holds it
    # (its compile is about the update probe's)
    check: dict[str, Any] = {"done": False}
    run_check = getattr(prober, "host_run", None)
    if run_check is None:
        check["why_not"] = "this prober has no check"
    elif grids_s == budget or clock() + cost > t0 + budget:
        check["why_not"] = f"budget (it needs about {cost:.0f}s)"
    else:
        sizes = {k: choice[k] for k in HOST_TUNED if k != "chunk_iterations"}
        pred = choice["predicted"]
        check = {"done": True, **run_check(cfg.replace(**sizes), pred["iteration_s"])}
        check["predicted_env_steps_per_s"] = pred["env_steps_per_s"]
        check["ratio"] = check["env_steps_per_s"] / pred["env_steps_per_s"]
        say(
            f"  check    a {check['seconds']:.1f}s run of the host schedule at the choice: "
            f"{check['env_steps_per_s']:,.0f} env steps/s (predicted "
            f"{pred['env_steps_per_s']:,.0f}; compile {check['compile_s']:.1f}s)"
        )
    retimed = retime(prober, (update,), t0 + budget, clock)
    elapsed = clock() - t0
    profile: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "algo": cfg.algo,
        "env": cfg.env,
        "host": True,
        "placement": placement.describe(),
        "rollout_steps": cfg.rollout_steps,
        "hidden": list(cfg.algo_config.hidden),
        "hardware": devices.describe_hardware(),
        "versions": _versions(),
        "budget_s": budget,
        "elapsed_s": elapsed,
        "setup_s": t0 - t_setup,
        "over_budget": elapsed > budget,
        "retime_rounds": retimed,
        "load_average": {"before": load_before, "after": _load_average()},
        "memory": {"limit_bytes": memory_limit, "fixed_bytes": fixed},
        "rules": {
            "tolerance": TOLERANCE,
            "batch_tolerance": BATCH_TOLERANCE,
            "min_iterations": MIN_ITERATIONS,
            "min_gain": MIN_GAIN,
            "patience": PATIENCE,
            "reps": REPS,
            "target_chunk_s": TARGET_CHUNK_S,
        },
        "sampling": {
            "values": sorted({v for g in grids.values() for v in g.values}),
            "workers": list(grids),
            "stop": "; ".join(f"{describe_workers(w)}: {g.stop}" for w, g in grids.items()),
            "stops": {str(w): g.stop for w, g in grids.items()},
            "points": [dataclasses.asdict(p) for p in points],
        },
        "update": update.as_dict(),
        "choice": choice,
        "check": check,
    }
    if elapsed > budget:
        say(
            f"autotune: the probe took {elapsed:.1f}s, over the {budget:g}s budget "
            "(one point per grid is the minimum; compiles are slow on a busy machine)"
        )
    return profile


def describe_workers(w: int) -> str:
    """``"1 worker"``, ``"2 workers"``."""
    return f"{w} worker{'s' if w != 1 else ''}"
