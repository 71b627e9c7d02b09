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
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from jaxspreeze import algos, envs
from jaxspreeze.algos.base import AlgoSpec
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
from jaxspreeze.autotune.report import describe_workers, table
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.run.caches import enable_compile_cache
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

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


def _placeholders(cfg: RunConfig, spec: AlgoSpec, pinned: set[str]) -> RunConfig:
    """``cfg`` (resolved, of algorithm ``spec``) with valid stand-ins for the fields
    autotune will choose, for validation.

    The values the user left to autotune need not fit together yet (e.g. PPO's default
    minibatch larger than a small rollout); everything else is checked as usual.
    """
    changes: dict[str, int] = {}
    if "grad_steps" not in pinned:
        changes["grad_steps"] = spec.grad_step_multiple(getattr(cfg, spec.name))
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
    spec = algos.get(cfg.algo)
    cfg = config.resolve(cfg, spec)
    budget = cfg.autotune_budget_s if budget_s is None else float(budget_s)
    if not budget >= MIN_BUDGET_S:
        raise ConfigError(
            "autotune_budget_s",
            f"{budget:g} s is too small for even one probe (a compile and {REPS} timed "
            f"repetitions of each kind); give at least {MIN_BUDGET_S:g} s (default 30)",
        )
    host = envs.is_host_env(cfg.env)
    fields = HOST_TUNED if host else TUNED
    pinned = set(pinned) & set(fields)
    # checked with stand-ins for what is to choose; the probes read the config as given
    checked = plan(_placeholders(cfg, spec, pinned))
    run_plan = dataclasses.replace(checked, cfg=cfg)
    u = update_ratio(cfg, pinned & set(TUNED))
    on_policy, placement = spec.on_policy, checked.placement
    assert placement is not None
    if memory_limit is None:
        memory_limit = int(free_memory(placement.critic) * MEMORY_FRACTION)
    if host and on_policy:  # choose_host's rule is the off-policy one (replay ratio, free batch)
        raise ConfigError(
            "algo",
            f"autotune of {cfg.algo} on host envs ({cfg.env}) is not supported yet; set "
            "the sizes, or tune an off-policy algorithm (sac, td3, ddpg)",
        )
    if prober is None:
        enable_compile_cache(cfg.compile_cache)
        prober = (HostProber if host else probes.RealProber)(run_plan, memory_limit)
    run = _Probe(
        cfg, prober, pinned, placement, memory_limit, budget, u, on_policy, host, clock, say
    )
    profile = _probe(run, t_setup)
    chosen = cfg.replace(**{k: profile["choice"][k] for k in fields if k not in pinned})
    plan(chosen, placement)  # the choice checked as a run
    if profile["over_budget"]:
        say(
            f"autotune: the probe took {profile['elapsed_s']:.1f}s, over the {budget:g}s budget "
            "(one point per grid is the minimum; compiles are slow on a busy machine)"
        )
    say(table(profile))
    if out_dir is not None:
        write_profile(profile, Path(out_dir), say)
    return chosen, profile


@dataclass
class _Probe:
    """One probe of this machine: the prober, the run it is for, its limits, clock and say."""

    cfg: RunConfig
    prober: Any
    pinned: set[str]
    placement: Any
    memory_limit: int
    budget: float
    u: float  # gradient steps per env step, kept
    on_policy: bool
    host: bool  # host envs: sampling grids per worker count, and the check of the choice
    clock: Callable[[], float]
    say: Callable[[str], None]
    t0: float = 0.0  # when the probes started (the budget counts from here)


def _probe(p: _Probe, t_setup: float) -> dict[str, Any]:
    """Walk the grids within the budget, choose, re-time what is left; the profile.

    The device path has one sampling grid (under worker count 0); host envs have one per
    worker count (:func:`~.host.plan_host_grids`) and, after the choice, a short run of
    the host schedule at it checks it (its time set aside from the start, when it takes
    at most CHECK_SHARE of the budget). The device path re-times every point before it
    chooses; the host path, its update points after the check.
    """
    cfg, prober, clock = p.cfg, p.prober, p.clock
    if p.host:
        env_grids, batch_values = plan_host_grids(cfg, p.pinned)
    else:
        env_values, batch_values = plan_grids(cfg, p.pinned)
        env_grids = {0: env_values}
    n_first = min(v[0] for v in env_grids.values())
    _check_memory(cfg, prober, p.pinned, p.memory_limit, n_first, batch_values[0])
    p.t0 = t0 = clock()  # the budget covers the probes, not imports and setup
    load_before = _load_average()
    where = " (host env: sampling workers)" if p.host else ""
    p.say(
        f"autotune: {cfg.algo} on {cfg.env}{where} | {p.placement.describe()} | budget "
        f"{p.budget:g}s | memory limit {mib(p.memory_limit)} | {p.u:.4g} gradient steps per "
        "env step (kept)"
    )
    grids = {w: Grid("sampling", values) for w, values in env_grids.items()}
    update = Grid("update", batch_values)
    grids_s = _walk_grids(p, grids, update, n_first)
    _mark_stops(p, grids, update)
    deadline = t0 + p.budget
    fixed = prober.fixed_bytes
    check = None
    if p.host:
        points = [pt for g in grids.values() for pt in g.points]
        choice = choose.choose(
            cfg, points, update.points, p.pinned, p.memory_limit, fixed, TOLERANCE,
            batch_tolerance=BATCH_TOLERANCE, host=True,
        )  # fmt: skip
        check = _check(p, choice, _check_cost(update), set_aside=grids_s < p.budget)
        retimed = retime(prober, (update,), deadline, clock)
    else:
        retimed = retime(prober, (grids[0], update), deadline, clock)
        choice = choose.choose(
            cfg, grids[0].points, update.points, p.pinned, p.memory_limit, fixed, TOLERANCE,
            p.placement.split,
        )  # fmt: skip
    elapsed = clock() - t0
    return {
        **_header(p, elapsed, t0 - t_setup, retimed, load_before),
        "sampling": _sampling_record(grids) if p.host else grids[0].as_dict(),
        "update": update.as_dict(),
        "choice": choice,
        **({"check": check} if p.host else {}),
    }


def _walk_grids(p: _Probe, grids: dict[int, Grid], update: Grid, n_first: int) -> float:
    """Walk every grid within its share of the budget; returns the grids' budget.

    The first point of each grid, then the sampling grids in turn within sampling's
    share (:func:`~.grid.sampling_share`), then the batches up to WALK_SHARE, then
    sampling again where the batches left time over. The grids' budget is the probe's,
    less the host check's time when it is set aside.
    """
    prober, t0, clock, say = p.prober, p.t0, p.clock, p.say
    fixed, b0 = prober.fixed_bytes, update.values[0]
    s_need = lambda n: fixed + prober.sampling_bytes(n) + prober.update_bytes(b0)
    u_need = lambda b: fixed + prober.sampling_bytes(n_first) + prober.update_bytes(b)
    u_stop = None if p.on_policy else batch_stop

    def sample(w: int, deadline: float) -> None:
        measure = prober.sampling if not w else lambda n: prober.host_sampling(w, n)
        label = f" | {describe_workers(w)}" if w else ""
        walk(grids[w], measure, s_need, p.memory_limit, deadline, clock, say, label=label)

    def batches(deadline: float) -> None:
        walk(update, prober.update, u_need, p.memory_limit, deadline, clock, say, u_stop)

    # the first point of every grid (a deadline in the past measures exactly one) ...
    for w in grids:
        sample(w, t0)
    batches(t0)
    _require_first_points(p, [*((g, "num_envs") for g in grids.values()), (update, "batch_size")])
    # ... then the sampling grids get a share of the budget as large as sampling's share
    # of an iteration's time there (clamped to 15-50%): SAC on a CPU is update-bound
    first = max((g.points[0] for g in grids.values()), key=lambda pt: pt.rate)
    share = sampling_share(p.cfg, first, update.points[0])
    # the check of the choice (a short run) gets its time set aside, unless that would
    # take more than CHECK_SHARE of the budget from the grids
    cost = _check_cost(update)
    holds = p.host and getattr(prober, "host_run", None) is not None
    grids_s = p.budget - cost if holds and cost <= CHECK_SHARE * p.budget else p.budget
    for i, w in enumerate(grids):
        sample(w, t0 + share * grids_s * (i + 1) / len(grids))
    end = t0 + WALK_SHARE * grids_s
    batches(end)
    for w, g in grids.items():  # the update grid left time over: go on sampling
        if g.stop == "budget":
            sample(w, end)
    return grids_s


def _require_first_points(p: _Probe, named: list[tuple[Grid, str]]) -> None:
    """Fail when the first point of a grid (named by its field) did not fit."""
    fits = "does not fit in the" if p.host else "compiled to more than the"
    for g, name in named:
        if not g.points:
            raise ConfigError(
                name if name in p.pinned else "buffer_size",
                f"the smallest {g.kind} probe ({name} {g.values[0]}) {fits} "
                f"{mib(p.memory_limit)} free",
            )


def _mark_stops(p: _Probe, grids: dict[int, Grid], update: Grid) -> None:
    """Say why a grid has one point where that is the rule: pinned, or kept on-policy."""
    for name, gs in (("num_envs", grids.values()), ("batch_size", [update])):
        if name in p.pinned:
            for g in gs:
                g.stop = "pinned"
    if p.on_policy and "batch_size" not in p.pinned:
        update.stop = "kept (on-policy minibatch)"
    if "host_workers" in p.pinned:
        for g in grids.values():
            g.stop = g.stop if g.stop == "pinned" else f"{g.stop} (workers pinned)"


def _check_cost(update: Grid) -> float:
    """Seconds the host check of the choice takes, about (its compile is the update's)."""
    return 1.5 * (update.points[0].compile_s + CHECK_S) + 1.0


def _check(p: _Probe, choice: dict[str, Any], cost: float, set_aside: bool) -> dict[str, Any]:
    """The check of a host choice: a short run of the host schedule at it, budget allowing.

    It runs when its ``cost`` (seconds) was ``set_aside`` from the grids' budget and is
    still left.
    """
    run_check = getattr(p.prober, "host_run", None)
    if run_check is None:
        return {"done": False, "why_not": "this prober has no check"}
    if not set_aside or p.clock() + cost > p.t0 + p.budget:
        return {"done": False, "why_not": f"budget (it needs about {cost:.0f}s)"}
    sizes = {k: choice[k] for k in HOST_TUNED if k != "chunk_iterations"}
    pred = choice["predicted"]
    check = {"done": True, **run_check(p.cfg.replace(**sizes), pred["iteration_s"])}
    check["predicted_env_steps_per_s"] = pred["env_steps_per_s"]
    check["ratio"] = check["env_steps_per_s"] / pred["env_steps_per_s"]
    p.say(
        f"  check    a {check['seconds']:.1f}s run of the host schedule at the choice: "
        f"{check['env_steps_per_s']:,.0f} env steps/s (predicted "
        f"{pred['env_steps_per_s']:,.0f}; compile {check['compile_s']:.1f}s)"
    )
    return check


def _header(
    p: _Probe, elapsed: float, setup_s: float, retimed: int, load_before: float | None
) -> dict[str, Any]:
    """The profile's first keys: what was probed, on what, for how long, by which rules."""
    on_policy_rule = {} if p.host else {"on_policy_max_minibatches": ON_POLICY_MAX_MINIBATCHES}
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "algo": p.cfg.algo,
        "env": p.cfg.env,
        **({"host": True} if p.host else {}),
        "placement": p.placement.describe(),
        "rollout_steps": p.cfg.rollout_steps,
        "hidden": list(getattr(p.cfg, p.cfg.algo).hidden),
        "hardware": devices.describe_hardware(),
        "versions": _versions(),
        "budget_s": p.budget,
        "elapsed_s": elapsed,
        "setup_s": setup_s,
        "over_budget": elapsed > p.budget,
        "retime_rounds": retimed,
        "load_average": {"before": load_before, "after": _load_average()},
        "memory": {"limit_bytes": p.memory_limit, "fixed_bytes": p.prober.fixed_bytes},
        "rules": {
            "tolerance": TOLERANCE,
            "batch_tolerance": BATCH_TOLERANCE,
            "min_iterations": MIN_ITERATIONS,
            **on_policy_rule,
            "min_gain": MIN_GAIN,
            "patience": PATIENCE,
            "reps": REPS,
            "target_chunk_s": TARGET_CHUNK_S,
        },
    }


def _sampling_record(grids: dict[int, Grid]) -> dict[str, Any]:
    """The host profile's sampling grids: the values, worker counts, stops and points."""
    return {
        "values": sorted({v for g in grids.values() for v in g.values}),
        "workers": list(grids),
        "stop": "; ".join(f"{describe_workers(w)}: {g.stop}" for w, g in grids.items()),
        "stops": {str(w): g.stop for w, g in grids.items()},
        "points": [dataclasses.asdict(pt) for g in grids.values() for pt in g.points],
    }
