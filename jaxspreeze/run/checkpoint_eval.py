"""Evaluate a run's checkpoint (``jaxspreeze eval``) with the programs the run kept.

The checkpoint (the run's newest intact one, or the one named) is restored into the
run's agent and evaluated per seed, the deterministic policy for one episode in each of
``episodes`` envs, by the trainer's protocol: the starts are drawn from the evaluation
seed (default: the run's, ``seed + 10000``) folded with the checkpoint's env step, so the
run's own evaluation at that step, with its episode count, is reproduced exactly, and
another ``--seed`` draws other starts. On a device env the evaluation is the trainer's own program
(:func:`jaxspreeze.run.threads.make_evaluate`), on the run's placement when this machine has
its devices: with the run's compile cache on (its ``compile_cache`` setting) and its
``eval_episodes``, the evaluation program the run kept is loaded rather than compiled
(:mod:`jaxspreeze.core.programs`), and the agent's init comes from JAX's compile cache. Any
other episode count compiles once and is kept by JAX's cache for the next call. Host envs
are stepped on the host by a loop of jitted policy calls (nothing to keep).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import (
    EvalResult,
    eval_seed,
    make_host_evaluate,
    make_seed_evaluate,
)
from jaxspreeze.core.errors import PlacementError
from jaxspreeze.envs import is_host_env, load_env_record, make_env
from jaxspreeze.run.caches import enable_compile_cache, program_cache
from jaxspreeze.run.records import STARTS, seeds_se
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import devices, population
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import checkpoint


def evaluate_checkpoint(
    run_dir: str | Path, episodes: int | None = None, seed: int | None = None
) -> dict[str, Any]:
    """Restore a run's newest intact checkpoint (or the checkpoint ``run_dir`` names) and
    evaluate its policy, per seed.

    ``run_dir`` is a run directory or one of its checkpoint directories
    (``RUN/checkpoints/000000021000``). Returns ``{"checkpoint", "env_steps", "episodes",
    "return_mean", "return_se", "return_std", "length_mean", "damaged"}`` (lists over
    seeds; ``return_se``: each seed's standard error over its episodes; ``mean_return``
    and ``mean_return_se``: over seeds; ``eval_seed`` and ``starts``: the protocol;
    ``env_steps`` per seed; ``damaged``: the newer checkpoints skipped as damaged, with
    why; ``pruned``: those a live run removed while they were read (the next newest was
    read instead); ``programs_loaded``: ``["evaluate"]`` when the run's kept evaluation program
    was loaded). Raises CheckpointError if there is none.
    """
    given = run_dir
    path, run_dir, damaged = checkpoint.find(given)
    load_env_record(run_dir)  # a user's env passed from Python: rebuilt where it can be
    saved = RunPlan.saved(checkpoint.saved_config(path, run_dir))
    cfg = saved.cfg
    episodes = episodes or cfg.eval_episodes
    seed = eval_seed(cfg.seed) if seed is None else seed
    cache_dir = enable_compile_cache(cfg.compile_cache)
    algo = saved.make_algorithm()
    # only the agent is needed: a template without the (possibly huge) replay buffer
    agent = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(0), cfg.slots))
    template = TrainState(*[None] * len(TrainState._fields))._replace(agent=agent)
    state, info, path, pruned = _restore_newest(given, path, template)
    actor = state.agent.actor
    loaded: list[str] = []  # the programs loaded from the run's kept ones
    if is_host_env(cfg.env):  # host envs: stepped on the host, seeded from ``seed``
        result = make_host_evaluate(algo, cfg.env, episodes, seed)(actor, info["env_steps"])
    else:
        result, loaded = _evaluate(saved, actor, episodes, (seed, info["env_steps"]), cache_dir)
    se = np.asarray(result.return_se, np.float64).reshape(-1)
    return {
        "checkpoint": str(path),
        "env_steps": info["env_steps"],
        "episodes": episodes,
        "eval_seed": seed,
        "starts": STARTS,
        "mean_return": float(np.mean(result.return_mean)),
        "mean_return_se": seeds_se(se),
        "return_mean": np.asarray(result.return_mean).tolist(),
        "return_se": se.tolist(),
        "return_std": np.asarray(result.return_std).tolist(),
        "length_mean": np.asarray(result.length_mean).tolist(),
        "damaged": [[str(p), why] for p, why in damaged],
        "pruned": [str(p) for p in pruned],
        "programs_loaded": loaded,
    }


PRUNED_TRIES = 5  # a live run pruning the checkpoint being read: read the next newest


def _restore_newest(
    given: str | Path, path: Path, template: TrainState
) -> tuple[TrainState, dict[str, Any], Path, list[Path]]:
    """Restore ``path``; when ``given`` is a run directory and a live run prunes that
    checkpoint while it is read (``--keep-checkpoints``), fall back to the run's newest
    intact one. Returns the state, its info, the checkpoint read and those pruned."""
    pruned: list[Path] = []
    while True:
        try:
            state, info = checkpoint.restore(path, template, partial=True)
            return state, info, path, pruned
        except Exception:
            gone = not path.exists() and not checkpoint.is_checkpoint(Path(given))
            if not gone or len(pruned) >= PRUNED_TRIES:
                raise
        pruned.append(path)
        path, _, _ = checkpoint.find(given)


def _evaluate(
    saved: RunPlan, actor: Any, episodes: int, at: tuple[int, int], cache_dir: str | None
) -> tuple[EvalResult, list[str]]:
    """The run's device evaluation of ``actor`` (every seed) with the evaluation seed and
    env step ``at``, loaded from the programs the run kept where the placement and the
    episode count are the run's; the names of the programs loaded."""
    seed, env_steps = at
    cfg = saved.cfg
    try:
        placed = saved.placed(devices.resolve(cfg.placement))
    except PlacementError:  # this machine lacks the run's devices: evaluate on one
        placed = saved.placed(devices.single())
    schedule = schedules.make(placed)
    programs = schedule.programs  # none kept; the run's compile mode
    if episodes == cfg.eval_episodes:  # the trainer's evaluation program, as it kept it
        programs = program_cache(cache_dir, schedule)
    device = schedule.placement.eval
    keys = jax.device_put(population.slot_keys(jax.random.key(seed), cfg), device)
    evaluate = make_seed_evaluate(schedule.algo, make_env(cfg.env, episodes, cfg.obs_keys), keys)
    actor = jax.device_put(actor, device)
    evaluate.compile(abstract_on(actor, device), programs)
    return jax.device_get(evaluate(actor, env_steps)), list(programs.loaded)
