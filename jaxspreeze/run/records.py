"""Records: what a run reports, built from a chunk's metrics, an evaluation or the run's end.

A record is a flat dict of JSON-ready values (numbers, strings, lists for per-seed
values) with a ``kind``: ``"chunk"`` (one per jitted chunk) or ``"eval"`` (one per
evaluation). Values are the mean over seeds; ``<name>_per_seed`` keeps each seed's value
when a run has several. ``env_steps`` always counts the env steps of *one* seed (every
seed of a ``num_seeds`` run takes the same steps); the summary's ``env_steps_total`` is
their sum over seeds. Rates (``env_steps_per_s``, ``update_samples_per_s``,
``grad_steps_per_s``) count the work of all seeds.

:class:`RecordBuilder` runs on the metrics thread only (that is where it waits for a
chunk's device arrays); its clock never leaves that thread.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxspreeze.agent.evaluate import EvalResult, Snapshot, eval_seed
from jaxspreeze.core.types import EVAL_FIELDS, Record, clean
from jaxspreeze.setup import devices, distributed

if TYPE_CHECKING:
    from jaxspreeze.algos.base import Algorithm
    from jaxspreeze.schedules import Schedule
    from jaxspreeze.setup.config import RunConfig
    from jaxspreeze.setup.plan import RunPlan

SUMMED = ("episode_return_sum", "episode_length_sum", "episodes")


def chunk_record(metrics: dict[str, Any], num_seeds: int) -> Record:
    """Reduce one chunk's per-iteration metrics ``[K, S]`` (host arrays) to a flat record.

    Scalars are the mean over seeds; ``<name>_per_seed`` keeps each seed's value when
    ``num_seeds`` > 1. ``env_steps`` is the seed's count at the end of the chunk.
    """
    m = {k: np.asarray(v) for k, v in metrics.items()}
    per_seed: dict[str, np.ndarray] = {}
    for k, v in m.items():
        if k in SUMMED:
            per_seed[k] = v.sum(0)
        elif k == "env_steps":
            per_seed[k] = v[-1]
        elif k.endswith("finite"):
            per_seed[k] = v.all(0)
        else:
            per_seed[k] = v.mean(0)
    episodes = per_seed.pop("episodes")
    ret_sum, len_sum = per_seed.pop("episode_return_sum"), per_seed.pop("episode_length_sum")
    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed["episode_return"] = np.where(episodes > 0, ret_sum / episodes, np.nan)
        per_seed["episode_length"] = np.where(episodes > 0, len_sum / episodes, np.nan)
    record: Record = {"kind": "chunk"}
    for k, v in per_seed.items():
        if k.endswith("finite"):
            record[k] = bool(v.all())
        elif k == "env_steps":
            record[k] = int(v[0])
        else:
            record[k] = float(np.nanmean(v)) if np.isfinite(v).any() else math.nan
        if num_seeds > 1 and k != "env_steps":
            record[f"{k}_per_seed"] = v.tolist()
    return record


STARTS = "fresh"  # every evaluation draws new starts (its env step folded into its key)


def seeds_se(per_seed: Any) -> float:
    """The standard error of the mean over seeds of the seeds' means (each with its own
    standard error over its episodes): ``sqrt(sum se_i^2) / S``."""
    se = np.asarray(per_seed, np.float64).reshape(-1)
    return float(np.sqrt(np.sum(se**2)) / se.size) if se.size else math.nan


def eval_record(
    snap: Snapshot,
    result: EvalResult,
    wall_s: float,
    eval_s: float,
    num_seeds: int,
    episodes: int | None = None,
) -> Record:
    """An eval record: mean over seeds, plus ``<name>_per_seed`` when ``num_seeds`` > 1;
    ``eval_return_se`` is the standard error of ``eval_return`` (:func:`seeds_se`);
    ``eval_episodes`` (per seed) and ``eval_starts`` name the protocol."""
    record: Record = {
        "kind": "eval",
        "env_steps": snap.env_steps,
        "chunk": snap.chunk,
        "wall_s": wall_s,
        "final": snap.final,
        "eval_s": eval_s,
    }
    values = dict(zip(EVAL_FIELDS, _with_se(result), strict=True))
    for name, value in values.items():
        value = np.asarray(value, np.float64).reshape(-1)
        record[name] = seeds_se(value) if name == "eval_return_se" else float(value.mean())
        if num_seeds > 1:
            record[f"{name}_per_seed"] = value.tolist()
    if episodes is not None:
        record["eval_episodes"] = episodes
    record["eval_starts"] = STARTS
    return record


def _with_se(result: EvalResult) -> EvalResult:
    """``result`` with a standard error (NaN where its maker gave none)."""
    if result.return_se is not None:
        return result
    return result._replace(return_se=np.full(np.shape(result.return_mean), np.nan))


def protocol(cfg: RunConfig) -> Record:
    """How a run evaluates (the summary's ``eval_protocol``): the episodes per seed, the
    starts (fresh at every evaluation: the key of ``eval_seed`` folded with the
    evaluation's env step) and what the standard error is."""
    return {
        "episodes": cfg.eval_episodes,
        "starts": STARTS,
        "eval_seed": eval_seed(cfg.seed),
        "standard_error": "std(ddof=1)/sqrt(episodes) per seed; over seeds sqrt(sum se^2)/seeds",
    }


def final_eval_fields(result: EvalResult | None, errors: list[str]) -> dict[str, Any]:
    """The summary's ``final_eval_*`` fields (``final_eval_error`` if it failed)."""
    if result is None:
        return {"final_eval_return": None, "final_eval_error": errors[-1] if errors else None}
    result = _with_se(result)
    per_seed_return = np.asarray(result.return_mean).tolist()
    per_seed_se = np.asarray(result.return_se, np.float64).reshape(-1).tolist()
    return {
        "final_eval_return": float(np.mean(per_seed_return)),
        "final_eval_return_se": seeds_se(per_seed_se),
        "final_eval_return_std": float(np.std(per_seed_return)),
        "final_eval_return_per_seed": per_seed_return,
        "final_eval_return_se_per_seed": per_seed_se,
        "final_eval_episode_return_std": np.asarray(result.return_std).tolist(),
        "final_eval_length": float(np.mean(result.length_mean)),
    }


@dataclass(frozen=True)
class Work:
    """The work of one chunk, summed over seeds: env steps, gradient steps, batch size."""

    env_steps: int
    critic_updates: int
    actor_updates: int
    batch_size: int

    @classmethod
    def per_chunk(cls, plan: RunPlan, algo: Algorithm, iterations: int) -> Work:
        """The work of a chunk of ``iterations`` iterations of every seed of ``plan``."""
        cfg = plan.cfg
        return cls(
            env_steps=iterations * plan.steps_per_iteration * cfg.slots,
            critic_updates=iterations * algo.critic_steps_per_iteration * cfg.slots,
            actor_updates=iterations * algo.actor_steps_per_iteration * cfg.slots,
            batch_size=cfg.batch_size,
        )

    def chunk_rates(self, seconds: float) -> Record:
        """The rates of one chunk that took ``seconds``."""
        return {
            "env_steps_per_s": self.env_steps / seconds,
            "update_samples_per_s": self.critic_updates * self.batch_size / seconds,
        }

    def throughput(self, chunks: int, seconds: float) -> Record:
        """The throughput record of ``chunks`` chunks that took ``seconds`` of training."""
        return {
            "env_steps_per_s": self.env_steps * chunks / seconds,
            "update_samples_per_s": self.critic_updates * chunks * self.batch_size / seconds,
            "grad_steps_per_s": {
                "critic": self.critic_updates * chunks / seconds,
                "actor": self.actor_updates * chunks / seconds,
            },
            "replay_ratio": self.critic_updates * self.batch_size / self.env_steps,
        }


class RecordBuilder:
    """Builds the chunk and eval records of a run, on the metrics thread only.

    ``t_start`` is when the run started (``wall_s`` counts from it) and ``t_train`` when
    the first chunk was dispatched (the first chunk's rates count from it), both
    ``time.perf_counter()`` values; ``wall_offset`` (a resumed run: the ``wall_s`` its
    history ends at) is added to every ``wall_s``, so a run's curves over wall time go on
    where they stopped. An eval record reuses the ``wall_s`` of the chunk its snapshot was
    taken at; the metrics thread builds records in the order they were submitted, so that
    chunk's record is already built.
    """

    def __init__(
        self,
        num_seeds: int,
        work: Work,
        t_start: float,
        t_train: float,
        wall_offset: float = 0.0,
        member_seeds: int = 0,
        episodes: int | None = None,
    ):
        self.num_seeds = num_seeds
        self.episodes = episodes  # per seed and evaluation (the eval records say it)
        self.member_seeds = member_seeds  # a population: each member's seeds (0: none)
        self.evals: list[Record] = []  # the eval records built (a population's table)
        self.work = work
        self.t_start = t_start - wall_offset
        self._prev = t_train
        self._chunk_wall: dict[int, float] = {}

    def chunk(self, metrics: Any, chunk: int) -> Record:
        """The record of chunk ``chunk``; waits for its device ``metrics``."""
        record = chunk_record(jax.device_get(metrics), self.num_seeds)
        now = time.perf_counter()
        seconds = max(now - self._prev, 1e-9)
        self._prev = now
        self._chunk_wall[chunk] = now - self.t_start
        record.update(chunk=chunk, wall_s=now - self.t_start, **self.work.chunk_rates(seconds))
        return record

    def eval(self, snap: Snapshot, result: EvalResult, eval_s: float) -> Record:
        """The record of the evaluation of ``snap``."""
        wall_s = self._chunk_wall.get(snap.chunk, time.perf_counter() - self.t_start)
        record = eval_record(snap, result, wall_s, eval_s, self.num_seeds, self.episodes)
        if self.member_seeds:  # a population: each member's return, over its seeds
            slots = np.asarray(result.return_mean, np.float64).reshape(-1, self.member_seeds)
            record["eval_return_per_member"] = slots.mean(1).tolist()
            self.evals.append(record)
        return record


def run_topology(schedule: Schedule, throughput: Record) -> Record:
    """The processes and devices of a run and its rates per data-parallel device.

    The run's rates (``env_steps_per_s`` ...) count the work of every device of every
    process (the sizes are global); ``per_device`` divides them by the data-parallel
    devices (1 unless the placement is data-parallel). ``placement_kind`` names the
    topology (``single``, ``split``, ``data``, ``split-data``); with ``split-data`` a
    data-parallel "device" is a pair (``devices_per_shard`` 2: an actor-side and a
    critic-side device), and ``actor_devices`` / ``critic_devices`` count each side.
    """
    placement = schedule.placement
    shards = placement.data_devices
    topo = {k: v for k, v in distributed.topology().items() if k != "process_index"}
    sides = 2 if placement.split else 1
    return {
        **topo,
        "placement_kind": placement.kind,
        "actor_devices": shards,
        "critic_devices": shards,
        "devices_per_shard": sides,
        "data_parallel_devices": shards if placement.data_parallel else 0,
        "per_device": {
            "env_steps_per_s": throughput["env_steps_per_s"] / shards,
            "update_samples_per_s": throughput["update_samples_per_s"] / shards,
        },
    }


def summary(
    cfg: RunConfig,
    *,
    env_steps: Any,
    final_eval: Record,
    times: dict[str, float],
    work: Work,
    chunks: int,
    schedule: Schedule,
    host: Record,
    memory: dict[str, int],
    resumed_from: str | None,
    stopped: str | None,
    checkpoint: str | None,
    resume: Record | None = None,
    compiles: Record | None = None,
    best_eval: Record | None = None,
) -> Record:
    """The run's ``summary.json`` (JSON-ready): final evaluation, counts, throughput, setup.

    ``env_steps`` is the state's per-seed counter ``[S]``: the summary's ``env_steps`` is
    one seed's, ``env_steps_total`` their sum. ``times`` holds ``wall_s``, ``train_s``
    (the chunks) and ``compile_s``; ``chunks`` is the number of chunks this process ran (a
    resumed run counts from the resume) and the rates count their work in ``train_s``.
    ``host`` holds the evaluator's and the sinks' counters; ``resume`` (a resumed run)
    what the resume applied (``ResumePoint.record()``). ``compiles`` (if given) adds
    ``compile_all_s`` (every trace, lowering and compile of the run, wall seconds),
    ``compile_programs_s`` (XLA compile seconds per program) and
    ``first_chunk_dispatched_s`` (from the call of ``train`` to the first chunk queued).
    ``eval_protocol`` says how the evaluations were made (:func:`protocol`), ``best_eval``
    each unit's best evaluation (value, standard error, step, episodes, file).
    """
    per_seed = np.asarray(distributed.local_copy(env_steps)).reshape(-1)
    train_s = max(times["train_s"], 1e-9)
    out = {
        "algo": cfg.algo,
        "env": cfg.env,
        "num_seeds": cfg.num_seeds,
        **final_eval,
        "eval_protocol": protocol(cfg),
        "env_steps": int(per_seed.max()),
        "env_steps_total": int(per_seed.sum()),
        "wall_s": times["wall_s"],
        "train_s": train_s,
        "compile_s": times["compile_s"],
        **(compiles or {}),
        **work.throughput(chunks, train_s),
        "policy_lag": schedule.policy_lag,
        **host,
        "placement": schedule.placement.describe(),
        "topology": run_topology(schedule, work.throughput(chunks, train_s)),
        "hardware": devices.describe_hardware(),
        "memory_estimate_bytes": memory,
        "chunks": chunks,
        "iterations_per_chunk": schedule.iterations_per_chunk,
        "resumed_from": resumed_from,
        "resume": resume,
        "stopped": stopped,
        "checkpoint": checkpoint,
        "best_eval": best_eval,
    }
    return clean(out)
