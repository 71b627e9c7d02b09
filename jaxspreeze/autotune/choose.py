"""The choice rule: num_envs, batch size, gradient steps and chunk length from measured rates.

The rule keeps what the configured run learns per env step and spends the hardware only
where that costs no learning (issue 17: a faster run that takes fewer gradient steps per
env step learns less, at the same learning rate):

1. **Gradient steps per env step stay the algorithm's**: off-policy ``u = G / (n T)`` of
   the algorithm's default run (SAC, TD3: 8 / 8 = 1); ``--replay-ratio R`` sets
   ``u = R / B0`` (R update samples per env step at the configured batch B0) and a pinned
   grad_steps ``u = G / (n0 T)``. On-policy ``u = epochs / B0`` (every sample is seen
   ``epochs`` times, in minibatches of B0), so the minibatch stays B0.
2. **The batch grows only while it is free**: the largest measured batch ``B >= B0``
   whose gradient step takes at most ``1 + BATCH_TOLERANCE`` (10%) of B0's step time.
   On an accelerator a bigger batch often costs nothing: each gradient step gets a
   lower-variance gradient, with the same number of steps and the same learning rate
   (nothing is traded, so no learning-rate scaling rule is applied). On a small CPU a
   step's time grows with the batch, and the batch stays B0.
3. **num_envs by predicted wall time**: for each measured n, ``G = u n T`` (rounded up
   to a multiple of the algorithm's ``grad_step_multiple``, e.g. TD3's policy_delay: never
   fewer gradient steps) and the predicted wall time to finish the budget is
   ``warm-up / S(n) + iterations(n) x (n T / S(n) + G t(B))`` (S: env steps/s with the
   policy in the loop; t(B): seconds per gradient step). Among the n within TOLERANCE
   (5%) of the fastest, the one nearest the configured n0 wins (a change must pay for
   itself), then the smaller.
4. **Learning guards**: a run refreshes the policy that collects data at least
   MIN_ITERATIONS times; an on-policy rollout holds at least ON_POLICY_MIN_MINIBATCHES and
   at most ON_POLICY_MAX_MINIBATCHES minibatches (n0 is always allowed); memory and the
   replay buffer bound every pair.
5. The chunk length K makes one chunk last about TARGET_CHUNK_S.

Host envs (:func:`choose_host`): the same gradient steps per env step and batch rule; the
sampling workers run concurrently with the learner, so a pair's rate is the slower side's,
``min(S(W, n), n T / (G t(B)))``, and ``host_workers`` W is chosen with n.

Pinned fields keep their values and the rest is chosen around them (a pinned G that
would give fewer gradient steps per env step than u at some n rules that n out).
Self-contained: it reads measured :class:`Point` tables (real or synthetic) and a config,
and measures nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jaxspreeze import algos
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import Record
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig

TUNED = ("num_envs", "batch_size", "grad_steps", "chunk_iterations")
HOST_TUNED = (*TUNED, "host_workers")  # host envs: the sampling workers too
ON_POLICY_SIZES = {"num_envs", "batch_size"}  # both pinned: the minibatch rule is theirs
TOLERANCE = 0.05  # predicted wall times within 5% of the fastest are a tie
BATCH_TOLERANCE = 0.10  # a batch is free while its step time is within 10% of B0's
ON_POLICY_MIN_MINIBATCHES = 4  # on-policy: a rollout holds at least this many minibatches
ON_POLICY_MAX_MINIBATCHES = 32  # ... and at most this many (brax PPO's default count)
MIN_ITERATIONS = 50  # a run refreshes the acting policy at least this many times
TARGET_CHUNK_S = 1.0  # one chunk should take about this long (0.5-2 s)
MAX_CHUNK_ITERATIONS = 10_000


@dataclass
class Point:
    """One measured grid point: a num_envs (sampling) or a batch size (update)."""

    value: int
    rate: float  # median env steps/s or update samples/s
    compile_s: float
    call_s: float  # median seconds per timed call
    work: int  # env steps or update samples per call
    rates: list[float] = field(default_factory=list)  # one per repetition
    bytes_est: int = 0  # memory this point adds to a run, estimated before allocation
    bytes_compiled: int = 0  # XLA's own count after compile (arguments + outputs + temps)
    wall_s: float = 0.0  # everything this point took: setup, compile, warm-up, timing
    workers: int = 0  # host envs: the sampling worker threads (0: a device probe)


def mib(nbytes: float | None) -> str:
    """``nbytes`` as ``"12.3 MiB"`` (``"unknown memory"`` for None)."""
    return "unknown memory" if nbytes is None else f"{nbytes / 2**20:,.1f} MiB"


def update_ratio(cfg: RunConfig, pinned: set[str] | frozenset[str] = frozenset()) -> float:
    """Gradient steps per env step that autotune keeps.

    Off-policy: the algorithm's default run's ``G / (n T)`` (SAC/TD3: 8 / 8 = 1);
    ``replay_ratio / batch_size`` when ``--replay-ratio`` is set; ``grad_steps /
    (num_envs x rollout_steps)`` of ``cfg`` when grad_steps is pinned. On-policy (PPO):
    ``epochs / batch_size`` (``--replay-ratio`` does not apply: its replay ratio is its
    epochs).
    """
    cfg = config.resolve(cfg)
    spec = algos.get(cfg.algo)
    if spec.on_policy:
        if cfg.replay_ratio:
            raise ConfigError(
                "replay_ratio",
                f"{spec.label}'s replay ratio is its number of epochs (--{spec.name}.epochs, "
                f"now {getattr(cfg, cfg.algo).epochs}); drop --replay-ratio",
            )
        return getattr(cfg, cfg.algo).epochs / cfg.batch_size
    if cfg.replay_ratio:
        return cfg.replay_ratio / cfg.batch_size
    if "grad_steps" in pinned:
        return cfg.grad_steps / (cfg.num_envs * cfg.rollout_steps)
    d = spec.defaults
    return d["grad_steps"] / (d["num_envs"] * d["rollout_steps"])


def target_replay_ratio(cfg: RunConfig, pinned: set[str] | frozenset[str] = frozenset()) -> float:
    """Update samples per env step at the configured batch: ``update_ratio x B0``.

    Off-policy: ``--replay-ratio``, or 256 for the SAC/TD3 defaults (one batch-256
    gradient step per env step). On-policy: its ``epochs``.
    """
    cfg = config.resolve(cfg)
    return update_ratio(cfg, pinned) * cfg.batch_size


def step_time(p: Point) -> float:
    """Seconds per gradient step at the batch of update point ``p``."""
    return p.value / p.rate


def interpolate(points: Sequence[Point], value: int) -> Point:
    """The point at ``value``, or one interpolated log-log between measured points.

    Below the smallest measured value the rate scales linearly; above the largest it is
    flat (the grid stopped because it no longer grew).
    """
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


def free_batches(
    update: Sequence[Point], base: int, tolerance: float = BATCH_TOLERANCE
) -> list[Point]:
    """The measured batches ``>= base`` whose step time is within ``tolerance`` of base's.

    ``base`` (the configured batch) is always among them (interpolated if unmeasured).
    """
    p0 = interpolate(update, base)
    limit = (1 + tolerance) * step_time(p0)
    larger = [p for p in update if p.value > base and step_time(p) <= limit]
    return sorted([p0, *larger], key=lambda p: p.value)


def max_num_envs(cfg: RunConfig) -> int:
    """The most envs the learning guards allow (never below the configured num_envs).

    At least MIN_ITERATIONS iterations per run; off-policy ``n T`` fits in the buffer;
    on-policy at most ON_POLICY_MAX_MINIBATCHES minibatches of ``batch_size`` per rollout.
    """
    cfg = config.resolve(cfg)
    T = cfg.rollout_steps
    warmup = 0 if algos.get(cfg.algo).on_policy else cfg.learning_starts
    top = max(cfg.total_steps - warmup, 1) // (T * MIN_ITERATIONS)
    if algos.get(cfg.algo).on_policy:
        top = min(top, ON_POLICY_MAX_MINIBATCHES * cfg.batch_size // T)
    else:
        top = min(top, cfg.buffer_size // T)
    return max(top, cfg.num_envs, 1)


def _warmup_steps(cfg: RunConfig, n: int) -> int:
    if algos.get(cfg.algo).on_policy or cfg.learning_starts == 0:
        return 0
    return math.ceil(cfg.learning_starts / n) * n


@dataclass
class _Rule:
    """What the choice reads for one run: its config, the kept ``u``, the measured batches."""

    cfg: RunConfig
    pinned: set[str]
    u: float  # gradient steps per env step, kept
    multiple: int  # G is a multiple of this (e.g. TD3's policy_delay)
    on_policy: bool
    host: bool  # host envs: candidates carry the worker count
    u_points: list[Point]  # B0 (interpolated if unmeasured), then the larger measured batches
    free: set[int]  # the batches whose step time is within the batch tolerance of B0's
    memory_limit: int | None
    fixed_bytes: int

    def grad_steps(self, nT: int) -> int:
        """Off-policy G for ``n T`` env steps: the pinned one, or ``u n T`` rounded up."""
        if "grad_steps" in self.pinned:
            return self.cfg.grad_steps
        return self.multiple * max(1, math.ceil(self.u * nT / self.multiple - 1e-9))

    def why_not(self, g: int | None, nT: int, b: int, need: int) -> str:
        """Why a pair is not eligible ("" when it is); ``g`` None: no gradient-step check."""
        why = ""
        if g is not None and g < self.u * nT * (1 - 1e-9) and "num_envs" not in self.pinned:
            why = "fewer gradient steps per env step"
        if not why and b not in self.free:
            why = "batch not free"
        if self.memory_limit is not None and need > self.memory_limit:
            why = "memory"
        return why

    def scored(
        self, s: Point, up: Point, g: int, steps: int, t_iter: float, rates: Record, check_g: bool
    ) -> Record:
        """The candidate record of the pair (s, up): sizes, ratios, ``rates``, predicted wall.

        ``steps`` gradient steps an iteration takes (on-policy: epochs x minibatches) of
        ``t_iter`` seconds; the wall time is the warm-up's plus the iterations'.
        """
        n, b = s.value, up.value
        nT = n * self.cfg.rollout_steps
        need = self.fixed_bytes + s.bytes_est + up.bytes_est
        why = self.why_not(g if check_g else None, nT, b, need)
        warm = _warmup_steps(self.cfg, n)
        iterations = math.ceil(max(self.cfg.total_steps - warm, 0) / nT)
        return {
            "num_envs": n,
            **({"host_workers": s.workers} if self.host else {}),
            "batch_size": b,
            "grad_steps": g,
            "grad_steps_per_env_step": steps / nT,
            "replay_ratio": steps * b / nT,
            "step_s": step_time(up),
            "iteration_s": t_iter,
            "iterations": iterations,
            **rates,
            "wall_s": warm / s.rate + iterations * t_iter,
            "bytes": need,
            "eligible": not why,
            "why_not": why,
        }


def _rule(
    cfg: RunConfig,
    sampling: Sequence[Point],
    update: Sequence[Point],
    pinned: set[str] | frozenset[str],
    fields: tuple[str, ...],
    memory_limit: int | None,
    fixed_bytes: int,
    batch_tolerance: float,
) -> _Rule:
    """The :class:`_Rule` of ``cfg`` choosing ``fields`` (TUNED or HOST_TUNED)."""
    if not sampling or not update:
        raise ConfigError("autotune_budget_s", "no measurement to choose from")
    cfg = config.resolve(cfg)
    spec = algos.get(cfg.algo)
    pinned = set(pinned) & set(fields)
    u = update_ratio(cfg, pinned & set(TUNED))
    b0 = cfg.batch_size
    if "batch_size" in pinned or spec.on_policy:
        u_points = [interpolate(update, b0)]
    else:
        larger = (p for p in update if p.value > b0)
        u_points = sorted([interpolate(update, b0), *larger], key=lambda p: p.value)
    free = {p.value for p in free_batches(u_points, b0, batch_tolerance)}
    multiple = spec.grad_step_multiple(getattr(cfg, cfg.algo))
    host = fields == HOST_TUNED
    return _Rule(
        cfg, pinned, u, multiple, spec.on_policy, host, u_points, free, memory_limit, fixed_bytes
    )


def _candidates(
    rule: _Rule, s_points: Sequence[Point], score: Callable[[Point, Point], Record | None]
) -> list[Record]:
    """Every measured (sampling, update) pair ``score`` keeps, scored, in grid order."""
    pairs = (score(s, up) for s in s_points for up in rule.u_points)
    return [c for c in pairs if c is not None]


def _rejected(candidates: list[Record]) -> list[str]:
    """Why each ineligible candidate is out, e.g. ``"num_envs 8 x batch 512: memory"``."""
    out = []
    for c in candidates:
        if c["why_not"]:
            workers = f"{c['host_workers']} worker(s) x " if "host_workers" in c else ""
            out.append(
                f"{workers}num_envs {c['num_envs']} x batch {c['batch_size']}: {c['why_not']}"
            )
    return out


def choose(
    cfg: RunConfig,
    sampling: Sequence[Point],
    update: Sequence[Point],
    pinned: set[str] | frozenset[str] = frozenset(),
    memory_limit: int | None = None,
    fixed_bytes: int = 0,
    tolerance: float = TOLERANCE,
    overlap: bool = False,
    batch_tolerance: float = BATCH_TOLERANCE,
    host: bool = False,
) -> dict[str, Any]:
    """Pick num_envs, batch_size, grad_steps and chunk_iterations from measured rates.

    The rule of this module's docstring. Every measured pair (n, B) is scored (its
    predicted wall time to finish ``cfg.total_steps``) and listed in ``candidates`` for
    the report; the choice is made among the eligible ones (B free, at least ``u``
    gradient steps per env step, the guards, memory). ``overlap`` (split placement)
    models sampling and updates running concurrently (max instead of sum). Pinned fields
    keep ``cfg``'s values (rates there are interpolated if unmeasured). A pair needs
    ``fixed_bytes + S.bytes_est + U.bytes_est <= memory_limit``.

    ``host``: host envs' rule, which also picks host_workers (:func:`choose_host`;
    ``overlap`` is then always on).
    """
    fields = HOST_TUNED if host else TUNED
    rule = _rule(cfg, sampling, update, pinned, fields, memory_limit, fixed_bytes, batch_tolerance)
    if host:
        return _choose_host(rule, sampling, tolerance, batch_tolerance)
    cfg, n0 = rule.cfg, rule.cfg.num_envs
    if "num_envs" in rule.pinned:
        s_points = [interpolate(sampling, n0)]
    else:
        top = max_num_envs(cfg)
        s_points = [p for p in sampling if p.value <= top] or [interpolate(sampling, n0)]
    candidates = _candidates(rule, s_points, lambda s, up: _device_pair(rule, s, up, overlap))
    if not any(c["eligible"] for c in candidates):
        raise _infeasible(rule, _rejected(candidates))
    # the largest free batch that fits with some n, then n by predicted wall time
    near = lambda c: (abs(math.log(c["num_envs"] / n0)), c["num_envs"])
    base = {"num_envs": n0, "batch_size": cfg.batch_size, "grad_steps": cfg.grad_steps}
    return _choice(
        rule, _pick(candidates, tolerance, near), candidates, base, s_points,
        order=("num_envs", "batch_size"), tolerance=tolerance, batch_tolerance=batch_tolerance,
        extra={"overlap": overlap}, predicted_extra=(),
    )  # fmt: skip


def _device_pair(rule: _Rule, s: Point, up: Point, overlap: bool) -> Record | None:
    """The device path's candidate (s, up), or None where the pair cannot run at all.

    An iteration samples ``n T`` env steps then updates (both at once with ``overlap``).
    """
    cfg = rule.cfg
    nT, b = s.value * cfg.rollout_steps, up.value
    if rule.on_policy:
        minibatches = nT // b
        if nT % b:
            return None  # the minibatch must divide the rollout
        if minibatches < ON_POLICY_MIN_MINIBATCHES and len(rule.pinned & ON_POLICY_SIZES) < 2:
            return None
        g = cfg.grad_steps  # unused on-policy: epochs x minibatches instead
        steps = getattr(cfg, cfg.algo).epochs * minibatches
    else:
        if b > cfg.buffer_size:
            return None
        g = steps = rule.grad_steps(nT)
    t_sample, t_update = nT / s.rate, steps * step_time(up)
    t_iter = max(t_sample, t_update) if overlap else t_sample + t_update
    rates = {"env_steps_per_s": nT / t_iter, "update_samples_per_s": steps * b / t_iter}
    return rule.scored(s, up, g, steps, t_iter, rates, check_g=not rule.on_policy)


def _infeasible(rule: _Rule, rejected: list[str]) -> ConfigError:
    """The error when no pair is eligible: memory, or the first other reason."""
    if rejected and all(r.endswith("memory") for r in rejected):
        return ConfigError(
            "batch_size" if "batch_size" in rule.pinned else "num_envs",
            f"no measured num_envs x batch size fits in {mib(rule.memory_limit)} "
            "(replay buffer + sampling + update); lower --buffer-size or the pinned sizes",
        )
    label = algos.get(rule.cfg.algo).label
    divides = f" ({label}: the minibatch must divide num_envs x rollout_steps)"
    return ConfigError(
        "batch_size",
        "no measured num_envs x batch size is feasible"
        + (divides if rule.on_policy else "")
        + (f"; {rejected[0]}" if rejected else ""),
    )


def _pick(candidates: list[Record], tolerance: float, near: Callable[[Record], Any]) -> Record:
    """The largest feasible batch; among its candidates within ``tolerance`` of the
    fastest predicted wall time, the one ``near`` ranks first (nearest the defaults)."""
    eligible = [c for c in candidates if c["eligible"]]
    b_pick = max(c["batch_size"] for c in eligible)
    row = [c for c in eligible if c["batch_size"] == b_pick]
    fastest = min(c["wall_s"] for c in row)
    return min((c for c in row if c["wall_s"] <= (1 + tolerance) * fastest), key=near)


def _choice(
    rule: _Rule,
    pick: Record,
    candidates: list[Record],
    base: Record,
    s_points: Sequence[Point],
    *,
    order: tuple[str, ...],
    tolerance: float,
    batch_tolerance: float,
    extra: Record,
    predicted_extra: tuple[str, ...],
) -> Record:
    """The choice record of :func:`choose` and :func:`choose_host`: the picked sizes (the
    keys of ``base``, which holds their configured values), the chunk length, the ratios,
    what it was measured against and its predictions.

    The candidate with the configured sizes (``order``, which also sorts the candidates)
    gives the predicted wall time of the defaults. ``extra`` adds keys;
    ``predicted_extra`` names more of the pick's rates to report as predicted.
    """
    cfg, u, u_points = rule.cfg, rule.u, rule.u_points
    if "chunk_iterations" in rule.pinned:
        k = cfg.chunk_iterations
    else:
        k = int(min(max(round(TARGET_CHUNK_S / pick["iteration_s"]), 1), MAX_CHUNK_ITERATIONS))
    default = next((c for c in candidates if all(c[s] == base[s] for s in order)), None)
    best_s = max(p.rate for p in s_points)
    best_u = max(p.rate for p in u_points)
    rates = ("env_steps_per_s", "update_samples_per_s", *predicted_extra, "iteration_s")
    return {
        **{key: pick[key] for key in base},
        "chunk_iterations": k,
        "grad_steps_per_env_step": pick["grad_steps_per_env_step"],
        "update_ratio_target": u,
        "replay_ratio": pick["replay_ratio"],
        "replay_ratio_target": u * base["batch_size"],
        "base": {**base, "total_steps": cfg.total_steps},
        "tolerance": tolerance,
        "batch_tolerance": batch_tolerance,
        **extra,
        "pinned": sorted(rule.pinned),
        "predicted": {
            **{r: pick[r] for r in rates},
            "chunk_s": k * pick["iteration_s"],
            "wall_s": pick["wall_s"],
            "base_wall_s": default["wall_s"] if default else None,
            "bytes": pick["bytes"],
        },
        "free_batch": max(rule.free),
        "base_step_s": step_time(u_points[0]),
        # the plain per-axis knees, for reference: where each rate alone saturates
        "sampling_knee": min(p.value for p in s_points if p.rate >= (1 - tolerance) * best_s),
        "update_knee": min(p.value for p in u_points if p.rate >= (1 - tolerance) * best_u),
        "candidates": sorted(candidates, key=lambda c: tuple(c[s] for s in order)),
    }


def _host_sampling_points(
    sampling: Sequence[Point], pinned: set[str], n0: int, w0: int, top: int
) -> list[Point]:
    """The (workers, num_envs) sampling points a host run may use (pinned values kept).

    A pinned value that was not measured is interpolated over the measured num_envs of
    the same worker count (or of all points when that count was not measured either).
    """
    pts = list(sampling)
    if "host_workers" in pinned:
        pts = [p for p in pts if p.workers == w0] or [
            dataclasses.replace(p, workers=w0) for p in sampling
        ]
    if "num_envs" in pinned:
        by_w: dict[int, list[Point]] = {}
        for p in pts:
            by_w.setdefault(p.workers, []).append(p)
        pts = []
        for w, group in sorted(by_w.items()):
            if n0 % w == 0:
                pts.append(dataclasses.replace(interpolate(group, n0), workers=w))
    else:
        pts = [p for p in pts if p.value <= top] or [
            dataclasses.replace(interpolate(pts, n0), workers=w0 if n0 % w0 == 0 else 1)
        ]
    return pts


def choose_host(
    cfg: RunConfig, sampling: Sequence[Point], update: Sequence[Point], **options: Any
) -> dict[str, Any]:
    """Host envs: pick host_workers, num_envs, batch_size, grad_steps and chunk_iterations.

    :func:`choose` with ``host=True`` (``options``: its other arguments, ``overlap`` aside).

    The sampling workers step the envs *while* the learner updates (the host schedule),
    at the target replay ratio: a run goes at the slower of its two sides, both measured:

    - sampling: ``S(W, n)``, env steps/s of W worker threads over n envs with the policy
      in the loop (``sampling`` points carry ``workers``);
    - learner: ``n T / (G t(B))`` env steps/s, the gradient steps an iteration needs
      (``G = u n T`` rounded up to the algorithm's multiple, ``u`` kept as on the device
      path) at the measured step time ``t(B)``.

    The batch follows the device rule (the largest free batch, at ``u`` gradient steps
    per env step); then (W, n) by predicted wall time for the budget, ``warm-up / S +
    iterations x n T / min(S, learner)``; within ``tolerance`` of the fastest, the pair
    nearest the configured (W0, n0) wins, then fewer workers, then fewer envs. Pinned
    fields keep ``cfg``'s values; every pair is listed in ``candidates`` with the side
    that bounds it.
    """
    return choose(cfg, sampling, update, host=True, **options)


def _choose_host(
    rule: _Rule, sampling: Sequence[Point], tolerance: float, batch_tolerance: float
) -> dict[str, Any]:
    """:func:`choose_host`'s choice under ``rule``."""
    cfg = rule.cfg
    n0, w0 = cfg.num_envs, cfg.host_workers
    s_points = _host_sampling_points(sampling, rule.pinned, n0, w0, max_num_envs(cfg))
    candidates = _candidates(rule, s_points, lambda s, up: _host_pair(rule, s, up))
    if not any(c["eligible"] for c in candidates):
        rejected = _rejected(candidates)
        raise ConfigError(
            "batch_size" if "batch_size" in rule.pinned else "num_envs",
            "no measured workers x num_envs x batch size is feasible"
            + (f"; {rejected[0]}" if rejected else ""),
        )
    near = lambda c: abs(math.log(c["num_envs"] / n0)) + abs(math.log(c["host_workers"] / w0))
    pick = _pick(candidates, tolerance, lambda c: (near(c), c["host_workers"], c["num_envs"]))
    base = {"num_envs": n0, "host_workers": w0, "batch_size": cfg.batch_size, "grad_steps": cfg.grad_steps}  # fmt: skip
    return _choice(
        rule, pick, candidates, base, s_points,
        order=("host_workers", "num_envs", "batch_size"), tolerance=tolerance,
        batch_tolerance=batch_tolerance, extra={"overlap": True, "bound": pick["bound"]},
        predicted_extra=("sampling_env_steps_per_s", "learner_env_steps_per_s"),
    )  # fmt: skip


def _host_pair(rule: _Rule, s: Point, up: Point) -> Record | None:
    """The host path's candidate (s, up), or None where the pair cannot run at all.

    The workers sample while the learner updates: the run goes at the slower side.
    """
    cfg = rule.cfg
    nT, b = s.value * cfg.rollout_steps, up.value
    if b > cfg.buffer_size or nT > cfg.buffer_size:
        return None
    g = rule.grad_steps(nT)
    learner = nT / (g * step_time(up))
    rate = min(s.rate, learner)
    rates = {
        "sampling_env_steps_per_s": s.rate,
        "learner_env_steps_per_s": learner,
        "bound": "sampling" if s.rate < learner else "learner",
        "env_steps_per_s": rate,
        "update_samples_per_s": rate * g * b / nT,
    }
    return rule.scored(s, up, g, g, nT / rate, rates, check_g=True)
