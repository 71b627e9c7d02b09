"""A finished run's ``summary.json``: what :func:`jaxspreeze.run.records.summary` is given.

The final evaluation, the counts and times of the chunks, the host threads' counters, the
memory estimate, the resume and the stop, and the compile accounting of the whole run
(:func:`compiles`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze import schedules
from jaxspreeze.agent import policy as policy_lib
from jaxspreeze.agent.evaluate import EvalResult
from jaxspreeze.core.compiles import CompileLog
from jaxspreeze.core.programs import ProgramCache
from jaxspreeze.core.types import Record
from jaxspreeze.run import records
from jaxspreeze.run.threads import HostThreads
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import distributed, population
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.store import checkpoint
from jaxspreeze.store.resume import ResumePoint


@dataclass(frozen=True)
class Ran:
    """What the chunks of one call of :func:`jaxspreeze.train` left."""

    state: TrainState
    steps: int  # env steps per seed
    chunks: int  # chunks run by this call (a resumed run counts from the resume)
    stopped: str | None  # the signal that stopped the run, if one did
    train_s: float  # seconds from the host threads' start to the last chunk done
    first_dispatch_s: float | None  # from the call of train() to the first chunk dispatched
    final: EvalResult | None  # the final evaluation (process 0, a run not stopped)
    trained_actor: Any = None  # the actor as trained (before a PBT copy after the last chunk)


def run_summary(
    cfg: RunConfig,
    schedule: schedules.Schedule,
    run_dir: Path,
    host: HostThreads,
    ran: Ran,
    *,
    t_start: float,
    compile_s: float,
    sink_drops: int,
    estimate: dict[str, int],
    point: ResumePoint | None,
    compiles: Record | None,
    wall_from: tuple[float, str] | None = None,
    best: Record | None = None,
) -> Record:
    """The summary of a run on process 0 (whose ``host`` threads hold the evaluator).

    ``wall_s`` counts from ``t_start`` (the call of ``train``, ``perf_counter`` seconds)
    to this call; ``command_wall_s`` (the wall time the console prints) from
    ``wall_from``: a ``time.time()`` and what it was, ``wall_counted_from`` (``"command"``:
    the process's start, for the ``jaxspreeze`` command; ``"train()"``: the call, the
    default). ``estimate`` is the memory estimate, ``point`` where a resumed run continued
    from, ``compiles`` :func:`compiles`' accounting; ``best`` each unit's best evaluation
    (``best_eval``: :meth:`jaxspreeze.run.evalwatch.BestPolicies.records`).
    """
    evaluator = host.evaluator
    assert evaluator is not None, "process 0 writes the summary"
    latest = checkpoint.latest(run_dir)
    wall_s = time.perf_counter() - t_start
    since, what = wall_from or (time.time() - wall_s, "train()")
    wall = {"command_wall_s": time.time() - since, "wall_counted_from": what}
    return records.summary(
        cfg,
        env_steps=distributed.local_copy(ran.state.env_steps),
        final_eval=records.final_eval_fields(ran.final, evaluator.errors),
        times={"wall_s": wall_s, "train_s": ran.train_s, "compile_s": compile_s},
        compiles={**(compiles or {}), **wall},
        work=host.work,
        chunks=ran.chunks,
        schedule=schedule,
        host={**evaluator.stats(), "sink_drops": sink_drops, "sink_errors": host.metrics.errors},
        memory=estimate,
        resumed_from=str(point.checkpoint) if point is not None else None,
        stopped=ran.stopped,
        checkpoint=str(latest) if latest else None,
        resume=point.record() if point is not None else None,
        best_eval=best,
    )


def compiles(
    log: CompileLog | None,
    first_dispatch_s: float | None,
    before_train_s: float | None = None,
    kept: ProgramCache | None = None,
) -> Record | None:
    """The summary's compile accounting: all of it, per program, and the time to start.

    ``first_chunk_dispatched_s`` counts from the call of :func:`jaxspreeze.run.trainer.train`
    to the first chunk's dispatch (a host env's chunk, which samples and learns in the call,
    to its start: the training's start either way),
    ``command_to_first_chunk_s`` from the start of the process (the command: interpreter,
    imports and argument parsing included), ``command_to_train_s`` the difference;
    ``programs_loaded`` / ``programs_compiled`` name the programs the program cache gave
    and those traced and compiled (:mod:`jaxspreeze.core.programs`).
    """
    if log is None:
        return None
    from_command = None
    if first_dispatch_s is not None and before_train_s is not None:
        from_command = before_train_s + first_dispatch_s
    return {
        "compile_all_s": log.total_s(),
        "compile_programs_s": log.programs(),
        "first_chunk_dispatched_s": first_dispatch_s,
        "command_to_first_chunk_s": from_command,
        "command_to_train_s": before_train_s,
        **(kept or ProgramCache.off()).report(),
    }


def members_table(cfg: RunConfig, evals: list[Record], final: EvalResult | None) -> list[Record]:
    """A population's members for ``summary.json``: each member's values, its final return
    (mean over its seeds), its best evaluation's return and the env steps (per seed) it
    was reached at. ``evals``: the run's eval records (resumed ones included)."""
    table = []
    final_slots = None if final is None else np.asarray(final.return_mean).reshape(-1)
    for m, values in enumerate(population.member_table(cfg)):
        seen = [
            (r["eval_return_per_member"][m], r["env_steps"])
            for r in evals
            if len(r.get("eval_return_per_member") or ()) > m
        ]
        best = max(seen, key=lambda x: x[0], default=(None, None))
        slots = population.member_slots(cfg, m)
        final_m = None if final_slots is None else float(final_slots[slots].mean())
        table.append(
            {
                "member": m,
                "values": values,
                "seeds": [cfg.seed + i for i in range(cfg.num_seeds)],
                "final_return": final_m,
                "best_return": best[0],
                "steps_to_best": best[1],
                "policy": policy_lib.member_file(m),
            }
        )
    return table


def with_members(
    summary: Record, setup: Any, history: list[Record], host: HostThreads, ran: Ran, save: bool
) -> Record:
    """``summary`` with a population's ``members`` table and ``best_member``; with
    ``save``, every member's ``policy-<m>.msgpack`` is written. ``setup``: the run's
    ``starting.Setup``; ``history``: the records of the run before this process."""
    evals = [r for r in history if r.get("kind") == "eval"] + host.builder.evals
    table = members_table(setup.cfg, evals, ran.final)
    if save:
        actor = distributed.local_copy(ran.trained_actor)
        save_members(setup.run.path, setup.cfg, setup.schedule.algo, actor, table)
    named = members_and_seeds(summary, setup.cfg)
    return {**named, "members": table, "best_member": best_member(table)}


def members_and_seeds(summary: Record, cfg: RunConfig) -> Record:
    """A population's ``summary`` that names members and seeds as such: after ``num_seeds``
    (each member's seeds) come ``num_members`` and ``seeds_per_member``; after the flat
    ``final_eval_return_per_seed`` (kept: one value per member's seed, member-major, i.e.
    member m's seeds at ``m * num_seeds ...``) come ``final_eval_return_per_member`` (the
    mean over each member's seeds) and ``final_eval_return_per_member_seed`` (``[member]
    [seed]``)."""
    m, s = cfg.members, cfg.num_seeds
    counts = {"num_members": m, "seeds_per_member": s}
    flat = summary.get("final_eval_return_per_seed")
    returns = {}
    if isinstance(flat, list) and len(flat) == m * s:
        nested = [flat[i * s : (i + 1) * s] for i in range(m)]
        returns = {
            "final_eval_return_per_member": [float(np.mean(row)) for row in nested],
            "final_eval_return_per_member_seed": nested,
        }
    out: Record = {}
    for key, value in summary.items():
        out[key] = value
        if key == "num_seeds":
            out.update(counts)
        elif key == "final_eval_return_per_seed":
            out.update(returns)
    return {**out, **counts} if "num_seeds" not in summary else out


def best_member(table: list[Record]) -> int:
    """The member with the highest final return (else best return) of a members table."""

    def score(row: Record) -> float:
        value = row["final_return"] if row["final_return"] is not None else row["best_return"]
        return -math.inf if value is None or not math.isfinite(value) else value

    return max(table, key=score)["member"]


def save_members(run_dir: Path, cfg: RunConfig, algo: Any, actor: Any, table: list[Record]) -> None:
    """Write ``policy-<m>.msgpack`` for every member (a standalone file: the member's own
    config and seeds, for ``jaxspreeze.load``)."""
    for row in table:
        m = row["member"]
        slots = population.member_slots(cfg, m)
        own = jax.tree.map(lambda x, s=slots: np.asarray(x)[s.start : s.stop], actor)
        one = dataclasses.replace(cfg, population=(cfg.population[m],))
        policy_lib.save_policy_file(run_dir / row["policy"], policy_lib.Policy(one, algo, own))
