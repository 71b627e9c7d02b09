"""Autotune vs the defaults on learning tasks: wall time to a return threshold, final return.

For each :data:`TASKS` entry, :func:`compare` probes this machine with
``autotune.tune`` (nothing pinned), then trains the default config and the autotuned one
with the same env-step budget, ``num_seeds`` seeds each (vmapped in one program per
config). Both runs use the trainer's own programs (``schedules.make``: warm-up and fused
chunks) and its evaluation (``evaluate.make_seed_evaluate``: deterministic policy, the
same episodes for both). The two runs advance **interleaved**, one chunk of each in
turn, so a shared machine's load drift hits both alike; every chunk covers about
``eval_every`` env steps in both runs (``chunk_iterations`` set from it: autotune's own
chunk length only changes dispatch overhead) and is followed by an evaluation that is
not timed.

Wall time to the threshold counts warm-up and chunks, from the end of compilation to the
end of the first chunk after which a seed's evaluation return reaches the threshold;
compile time and the autotune probe are reported apart. (The trainer's evaluator thread
is latest-wins and skips evaluations while busy, which would make the time resolution
depend on the evaluation's cost: this loop evaluates every chunk instead.)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze import autotune, schedules
from jaxspreeze.agent.evaluate import make_seed_evaluate
from jaxspreeze.bench.record import Record, versions, with_reference
from jaxspreeze.envs import make_env
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

SEEDS = 3
AUTOTUNE_BUDGET_S = 30.0


@dataclass(frozen=True)
class Task:
    """A learning task: an algorithm's defaults on an env, a budget and a threshold."""

    algo: str
    env: str
    total_steps: int
    threshold: float
    eval_every: int
    eval_episodes: int = 16
    autotune_budget_s: float = AUTOTUNE_BUDGET_S  # brax compiles for tens of seconds a point

    @property
    def name(self) -> str:
        """``sac-Pendulum-v1``."""
        return f"{self.algo}-{self.env.split('/')[-1]}"


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("sac", "gymnax/Pendulum-v1", 10_000, -200.0, 500),
        Task("td3", "gymnax/Pendulum-v1", 10_000, -200.0, 500),
        Task("ppo", "gymnax/CartPole-v1", 100_000, 475.0, 4_096),
        Task("sac", "brax/inverted_pendulum", 20_000, 900.0, 1_000, autotune_budget_s=180.0),
    )
}


def base_config(task: Task, seeds: int = SEEDS, **fields: Any) -> RunConfig:
    """The default run of ``task`` (the algorithm's defaults, the task's budget), resolved."""
    cfg = RunConfig(
        algo=task.algo,
        env=task.env,
        total_steps=task.total_steps,
        num_seeds=seeds,
        eval_every=task.eval_every,
        eval_episodes=task.eval_episodes,
        **fields,
    )
    return config.resolve(cfg)


def aligned(cfg: RunConfig, eval_every: int) -> RunConfig:
    """``cfg`` with chunks of about ``eval_every`` env steps (at least one iteration)."""
    k = max(1, eval_every // plan(cfg, on_devices=False).steps_per_iteration)
    return cfg.replace(chunk_iterations=k)


class _Run:
    """One config trained chunk by chunk: compiled, warmed up, evaluated after each chunk."""

    def __init__(self, label: str, cfg: RunConfig):
        self.label, self.cfg = label, cfg
        self.plan = plan(cfg)
        self.schedule = schedules.make(self.plan)
        self.device = self.schedule.placement.eval
        state = self.schedule.init()
        t0 = time.perf_counter()
        self.schedule.compile(state)
        env = make_env(cfg.env, cfg.eval_episodes, cfg.obs_keys)
        keys = jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds)
        self._evaluate = make_seed_evaluate(
            self.schedule.algo, env, jax.device_put(keys, self.device)
        )
        jax.block_until_ready(self._evaluate(self._actor(state)))  # compiles it
        self.compile_s = time.perf_counter() - t0
        self.state = state
        self.wall_s = 0.0  # warm-up + chunks
        self.warmup_s = 0.0
        self.chunks_left = self.schedule.num_chunks
        self.curve: list[dict[str, Any]] = []
        self.per_step_s: list[float] = []  # seconds per env step of each chunk

    def _actor(self, state: Any) -> Any:
        return jax.device_put(state.agent.actor, self.device)

    def warmup(self) -> None:
        """The random-action warm-up (timed: it is part of the run)."""
        t0 = time.perf_counter()
        self.state = jax.block_until_ready(self.schedule.warmup(self.state))
        self.warmup_s = time.perf_counter() - t0
        self.wall_s += self.warmup_s

    def step(self) -> None:
        """One chunk (timed), then one evaluation of every seed (not timed)."""
        t0 = time.perf_counter()
        self.state, _ = self.schedule.chunk(self.state)
        jax.block_until_ready(self.state)
        seconds = time.perf_counter() - t0
        self.wall_s += seconds
        self.chunks_left -= 1
        steps = self.schedule.iterations_per_chunk * self.plan.steps_per_iteration
        self.per_step_s.append(seconds / steps)
        env_steps = int(np.asarray(self.state.env_steps).reshape(-1)[0])
        result = jax.device_get(self._evaluate(self._actor(self.state), env_steps))  # fresh starts
        self.curve.append(
            {
                "env_steps": env_steps,
                "wall_s": self.wall_s,
                "return_per_seed": np.asarray(result.return_mean, np.float64).tolist(),
            }
        )

    def record(self, threshold: float) -> Record:
        """The run's side of the table: times to the threshold, final return, rates."""
        cfg = self.cfg
        seeds = cfg.num_seeds
        times: list[float | None] = []
        steps_to: list[int | None] = []
        steady: list[float | None] = []  # the same at the run's median chunk speed
        per_step = statistics.median(self.per_step_s) if self.per_step_s else math.nan
        for i in range(seeds):
            hit = next((p for p in self.curve if p["return_per_seed"][i] >= threshold), None)
            times.append(hit["wall_s"] if hit else None)
            steps_to.append(hit["env_steps"] if hit else None)
            trained = hit["env_steps"] - self.plan.warmup_steps if hit else 0
            steady.append(self.warmup_s + trained * per_step if hit else None)
        final = self.curve[-1]["return_per_seed"] if self.curve else [math.nan] * seeds
        env_steps = self.curve[-1]["env_steps"] if self.curve else 0
        return {
            "kind": "learning",
            "label": self.label,
            "algo": cfg.algo,
            "env": cfg.env,
            **{k: getattr(cfg, k) for k in autotune.TUNED},
            "rollout_steps": cfg.rollout_steps,
            "grad_steps_per_env_step": _grad_steps_per_env_step(self.schedule),
            "num_seeds": seeds,
            "threshold": threshold,
            "wall_to_threshold_s_per_seed": times,
            "env_steps_to_threshold_per_seed": steps_to,
            "reached": sum(t is not None for t in times),
            "wall_to_threshold_s": _median_or_none(times),
            "steady_to_threshold_s_per_seed": steady,
            "steady_to_threshold_s": _median_or_none(steady),
            "median_chunk_s_per_env_step": per_step,
            "final_return_per_seed": final,
            "final_return": float(np.mean(final)),
            "final_return_std": float(np.std(final)),
            "env_steps": env_steps,
            "wall_s": self.wall_s,
            "env_steps_per_s": env_steps * seeds / max(self.wall_s, 1e-9),
            "compile_s": self.compile_s,
            "curve": self.curve,
        }


def _grad_steps_per_env_step(schedule: Any) -> float:
    return schedule.algo.critic_steps_per_iteration / schedule.plan.steps_per_iteration


def _median_or_none(times: list[float | None]) -> float | None:
    """The median over seeds, an unreached seed counting as infinitely late (None: inf)."""
    value = statistics.median([math.inf if t is None else t for t in times])
    return None if math.isinf(value) else value


def compare(
    task: Task,
    seeds: int = SEEDS,
    autotune_budget_s: float | None = None,
    out_dir: Path | None = None,
    say: Callable[[str], None] = lambda *a: None,
    **fields: Any,
) -> Record:
    """Autotune ``task`` on this machine, then train default and autotuned, interleaved.

    Returns the autotuned run's record with the default's as its ``reference`` (the
    headline ratio is default time / autotuned time: > 1, autotune reached the threshold
    sooner), the autotune profile (with this comparison in ``profile["learning"]``) and a
    verdict. ``autotune_budget_s`` defaults to the task's. ``fields`` go into both configs (e.g. ``compile_cache="off"``). With
    ``out_dir`` the profile and its figure are written there.
    """
    base = base_config(task, seeds, **fields)
    t0 = time.perf_counter()
    budget = task.autotune_budget_s if autotune_budget_s is None else autotune_budget_s
    tuned, profile = autotune.tune(base, budget_s=budget, say=say)
    probe_s = time.perf_counter() - t0
    runs = [
        _Run("default", aligned(base, task.eval_every)),
        _Run("autotuned", aligned(tuned, task.eval_every)),
    ]
    for run in runs:
        run.warmup()
    while any(r.chunks_left for r in runs):
        for run in runs:
            if run.chunks_left:
                run.step()
                last = run.curve[-1]
                say(
                    f"  {task.name} {run.label:9s} {last['env_steps']:>8,} steps "
                    f"{last['wall_s']:7.1f}s  return "
                    + " ".join(f"{r:8.1f}" for r in last["return_per_seed"])
                )
    default, ours = (r.record(task.threshold) for r in runs)
    ours["autotune"] = {
        "probe_s": profile["elapsed_s"],
        "setup_s": profile["setup_s"],
        "tune_s": probe_s,
        "choice": {k: profile["choice"][k] for k in autotune.TUNED},
        "predicted_wall_s": profile["choice"]["predicted"]["wall_s"],
        "predicted_base_wall_s": profile["choice"]["predicted"]["base_wall_s"],
        "load_average": profile["load_average"],
    }
    record = with_reference(ours, default)
    record.update(
        task=task.name,
        total_steps=task.total_steps,
        eval_every=task.eval_every,
        verdict=verdict(ours, default),
        hardware=profile["hardware"],
        versions=versions(),
    )
    profile["learning"] = {
        "task": task.name,
        "threshold": task.threshold,
        "runs": {r["label"]: _slim(r) for r in (default, ours)},
    }
    record["profile"] = profile
    if out_dir is not None:
        autotune.write_profile(profile, Path(out_dir), say)
    return record


def _slim(rec: Record) -> Record:
    keys = (
        "num_envs",
        "batch_size",
        "grad_steps",
        "chunk_iterations",
        "wall_to_threshold_s",
        "wall_to_threshold_s_per_seed",
        "steady_to_threshold_s",
        "final_return",
        "final_return_per_seed",
        "curve",
    )
    return {k: rec[k] for k in keys}


def verdict(ours: Record, default: Record) -> dict[str, Any]:
    """Did autotune meet issue 17's bar? Sooner to the threshold, final return not worse.

    ``sooner``: the median time to the threshold over seeds is shorter (an unreached
    seed counts as infinitely late); ``steady_sooner``: the same at each run's median
    chunk speed (load spikes on a shared machine removed); ``final_ok``: the autotuned
    mean final return is at least the lowest of the default's seeds (within the seeds'
    spread, or better); ``same_config``: autotune kept the default sizes (the runs differ
    only by the machine's noise).
    """

    def faster(key: str) -> tuple[bool, float | None]:
        a, b = ours.get(key), default.get(key)
        return a is not None and (b is None or a < b), (b / a if a and b else None)

    sooner, speedup = faster("wall_to_threshold_s")
    steady_sooner, steady_speedup = faster("steady_to_threshold_s")
    sizes = ("num_envs", "batch_size", "grad_steps")
    return {
        "sooner": sooner,
        "speedup": speedup,
        "steady_sooner": steady_sooner,
        "steady_speedup": steady_speedup,
        "final_ok": ours["final_return"] >= min(default["final_return_per_seed"]),
        "same_config": all(ours.get(k) == default.get(k) for k in sizes),
    }
