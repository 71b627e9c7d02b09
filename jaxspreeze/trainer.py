"""The host side: ``train(config)`` drives the jitted chunks and everything that waits.

The main thread only dispatches chunks: it hands each chunk's metrics (device arrays,
not yet computed) to the metrics thread, which waits for them and feeds the sinks, and
every ``eval_every`` env steps it hands a copy of the actor to the evaluator thread. The
main thread waits for the device once, after the last chunk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np

from jaxspreeze import checkpoint, devices
from jaxspreeze import config as config_lib
from jaxspreeze.config import RunConfig
from jaxspreeze.envs import make_env
from jaxspreeze.errors import ConfigError, NonFiniteError
from jaxspreeze.evaluate import EvalResult, Evaluator, Snapshot, make_seed_evaluate
from jaxspreeze.guards import nonfinite_message
from jaxspreeze.loop import Loop, TrainState, buffer_nbytes
from jaxspreeze.metrics import MetricsThread, Record, Sink, clean, make_sinks
from jaxspreeze.policy import save_policy
from jaxspreeze.stopping import GracefulStop

SUMMED = ("episode_return_sum", "episode_length_sum", "episodes")


@dataclass
class RunResult:
    """What :func:`train` returns: the run directory, the summary and the final state."""

    run_dir: Path
    summary: dict[str, Any]
    state: TrainState | None = field(default=None, repr=False)
    loop: Loop | None = field(default=None, repr=False)


def enable_compile_cache(setting: str) -> str | None:
    """Turn on JAX's persistent compilation cache; returns the directory (None if off)."""
    if setting == "off":
        return None
    path = (
        setting
        or os.environ.get("JAXSPREEZE_CACHE_DIR")
        or str(
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jaxspreeze" / "xla"
        )
    )
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def default_run_name(cfg: RunConfig) -> str:
    """``<algo>-<env>-<YYYYmmdd-HHMMSS>``."""
    env = cfg.env.replace("/", "-")
    return f"{cfg.algo}-{env}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_run_dir(cfg: RunConfig) -> Path:
    """Create (or reuse) the run directory and write ``config.json`` into it."""
    run_dir = Path(cfg.logdir) / (cfg.run_name or default_run_name(cfg))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config_lib.to_dict(cfg), indent=2))
    return run_dir


def chunk_record(metrics: Any, cfg: RunConfig) -> Record:
    """Reduce one chunk's per-iteration metrics ``[K, S]`` to a flat record.

    Scalars are the mean over seeds; ``<name>_per_seed`` keeps each seed's value.
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
        if cfg.num_seeds > 1 and k != "env_steps":
            record[f"{k}_per_seed"] = v.tolist()
    return record


def default_sinks(cfg: RunConfig, run_dir: Path, quiet: bool = False) -> list[Sink]:
    """The sinks named in ``cfg.sinks`` that are available here."""
    return make_sinks(
        cfg.sinks,
        run_dir,
        total_steps=cfg.total_steps,
        config=config_lib.to_dict(cfg),
        num_seeds=cfg.num_seeds,
        quiet=quiet,
    )


def eval_record(snap: Snapshot, result: EvalResult, wall_s: float, eval_s: float, seeds: int):
    """An eval record: mean over seeds, plus ``<name>_per_seed`` when ``seeds`` > 1."""
    record: Record = {
        "kind": "eval",
        "env_steps": snap.env_steps,
        "chunk": snap.chunk,
        "wall_s": wall_s,
        "final": snap.final,
        "eval_s": eval_s,
    }
    fields = {
        "eval_return": result.return_mean,
        "eval_return_std": result.return_std,
        "eval_length": result.length_mean,
    }
    for name, value in fields.items():
        value = np.asarray(value, np.float64).reshape(-1)
        record[name] = float(value.mean())
        if seeds > 1:
            record[f"{name}_per_seed"] = value.tolist()
    return record


def eval_due(cfg: RunConfig, steps_before: int, steps_after: int) -> bool:
    """True when a multiple of ``eval_every`` lies in ``(steps_before, steps_after]``."""
    if cfg.eval_every <= 0:
        return False
    return steps_after // cfg.eval_every > steps_before // cfg.eval_every


def train(
    cfg: RunConfig,
    *,
    quiet: bool = False,
    sinks: list[Sink] | None = None,
    save: bool = True,
    resume: str | Path | None = None,
    signals: Literal["raise", "kill"] | None = "raise",
) -> RunResult:
    """Train an agent as configured; returns the run directory and summary.

    Validates ``cfg`` and checks its memory estimate first (raising
    :class:`~jaxspreeze.errors.ConfigError` before anything is compiled or allocated),
    then compiles, warms up and runs the chunks. A host thread turns each chunk's metrics
    into a record for the sinks named in ``cfg.sinks``; ``sinks`` are *added* to those
    (e.g. ``train(cfg, sinks=[plots.NotebookPlotSink()])`` in a notebook; pass
    ``cfg.replace(sinks=())`` to use only your own). Every ``cfg.eval_every`` env steps a
    copy of the actor goes to the evaluator thread; the final evaluation is awaited and
    written to ``summary.json``. ``quiet`` silences the console; ``save`` writes
    ``policy.msgpack`` (the final actor of every seed).

    Checkpoints (the whole run state) are written every ``cfg.checkpoint_every`` env
    steps at chunk boundaries and at the end. ``resume=RUN_DIR`` continues that run from
    its latest checkpoint (bitwise as if never interrupted, for the same config).
    ``signals``: SIGINT/SIGTERM stop at the next chunk boundary with a checkpoint
    (``summary["stopped"]`` names the signal); a second SIGINT raises
    ``KeyboardInterrupt`` (``"raise"``) or ends the process at once (``"kill"``, the
    CLI's choice); ``None`` leaves the signal handlers alone. A NaN/inf in a loss,
    gradient or parameter stops training with :class:`~jaxspreeze.errors.NonFiniteError`
    naming the step and the quantity; the last good checkpoint is kept.
    """
    t_start = time.perf_counter()
    config_lib.validate(cfg)
    placement = devices.resolve(cfg.placement)
    resume_from = None
    if resume is not None:
        resume_from, cfg = _resume_point(Path(resume), cfg, placement)
    memory = config_lib.check_memory(cfg, placement)
    enable_compile_cache(cfg.compile_cache)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))

    loop = Loop(cfg, placement)
    k_iter = loop.iterations_per_chunk
    run_dir = make_run_dir(cfg)
    all_sinks = default_sinks(cfg, run_dir, quiet) + list(sinks or [])
    say(
        f"jaxspreeze: {cfg.algo} on {cfg.env} | {cfg.num_seeds} seed(s) x {cfg.num_envs} envs | "
        f"{placement.describe()} | memory estimate {memory['total'] / 2**20:.1f} MiB "
        f"(replay buffer {buffer_nbytes(cfg, loop.env) / 2**20:.1f} MiB)"
    )

    state = loop.init()
    compile_s = loop.compile(state)
    if resume_from is not None:
        state, info = checkpoint.restore(resume_from, state)
        first_chunk, steps = int(info["chunk"]) + 1, int(info["env_steps"])
        say(f"  resumed from {resume_from} at {steps:,} env steps")
    else:
        state = loop.warmup(state)
        first_chunk, steps = 0, cfg.warmup_steps
    done_iterations = (steps - cfg.warmup_steps) // cfg.steps_per_iteration
    n_chunks = math.ceil(max(cfg.num_iterations - done_iterations, 0) / k_iter)
    say(f"  compiled in {compile_s:.1f}s ({n_chunks} chunks x {k_iter} iterations to run)")
    jax.block_until_ready(state)

    steps_per_iteration = cfg.steps_per_iteration  # per seed
    steps_per_chunk = k_iter * steps_per_iteration * cfg.num_seeds
    updates_per_chunk = k_iter * loop.algo.critic_steps_per_iteration * cfg.num_seeds
    actor_updates_per_chunk = k_iter * loop.algo.actor_steps_per_iteration * cfg.num_seeds

    # host threads: metrics -> sinks, snapshots -> evaluator -> metrics
    metrics_thread = MetricsThread(all_sinks)
    chunk_wall: dict[int, float] = {}
    nonfinite: list[str] = []  # set by the metrics thread, read by the main thread
    t_train = time.perf_counter()
    clock = {"prev": t_train}

    def build_chunk(metrics: Any, chunk: int) -> Record:
        # runs on the metrics thread: device_get waits for the chunk, not the main thread
        record = chunk_record(jax.device_get(metrics), cfg)
        now = time.perf_counter()
        dt = max(now - clock["prev"], 1e-9)
        clock["prev"] = now
        chunk_wall[chunk] = now - t_start
        record.update(
            chunk=chunk,
            wall_s=now - t_start,
            env_steps_per_s=steps_per_chunk / dt,
            update_samples_per_s=updates_per_chunk * cfg.batch_size / dt,
        )
        message = nonfinite_message(record)
        if message and not nonfinite:
            nonfinite.append(message)
        return record

    def on_eval(snap: Snapshot, result: EvalResult, eval_s: float) -> None:
        # runs on the evaluator thread; the record is built on the metrics thread, after
        # the record of the chunk the snapshot was taken at (FIFO), whose wall_s it reuses
        metrics_thread.submit(
            lambda: eval_record(
                snap,
                result,
                chunk_wall.get(snap.chunk, time.perf_counter() - t_start),
                eval_s,
                cfg.num_seeds,
            )
        )

    eval_env = make_env(cfg.env, cfg.eval_episodes)
    eval_keys = jax.device_put(
        jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds), placement.eval
    )
    evaluator = Evaluator(
        make_eval_fn(loop.algo.act, eval_env, eval_keys),
        device=placement.eval,
        on_result=on_eval,
    )

    def write_checkpoint(chunk: int, metrics: Any) -> None:
        if nonfinite:  # never overwrite the last good checkpoint with a broken state
            raise NonFiniteError(nonfinite[0])
        try:
            checkpoint.save(
                run_dir, state, env_steps=steps, chunk=chunk, keep=cfg.keep_checkpoints, config=cfg
            )
        except NonFiniteError as e:
            # name the quantity from this chunk's guard flags (the metrics thread may lag)
            record = chunk_record(jax.device_get(metrics), cfg) | {"chunk": chunk}
            message = nonfinite_message(record)
            raise NonFiniteError(f"{message} ({e})" if message else str(e)) from None

    stop = GracefulStop(second=signals) if signals else None
    stopped: str | None = None
    result = None
    chunks_run = 0
    try:
        with stop or contextlib.nullcontext():
            # the hot loop: dispatch, hand over, snapshot. The only wait is for chunk c-1
            # once chunk c is queued, so at most two chunks are in flight.
            in_flight = None
            chunk = first_chunk - 1
            for chunk in range(first_chunk, first_chunk + n_chunks):
                last = chunk == first_chunk + n_chunks - 1
                state, metrics = loop.chunk(state)
                chunks_run += 1
                metrics_thread.submit(functools.partial(build_chunk, metrics, chunk))
                steps_before, steps = steps, steps + k_iter * steps_per_iteration
                if not last and eval_due(cfg, steps_before, steps):
                    evaluator.submit(state.agent.actor, env_steps=steps, chunk=chunk)
                if in_flight is not None:
                    jax.block_until_ready(in_flight)
                in_flight = metrics
                if nonfinite:
                    raise NonFiniteError(nonfinite[0])
                stopped = stop.signal_name if stop is not None and stop.requested else None
                if not last and (stopped or checkpoint_due(cfg, steps_before, steps)):
                    write_checkpoint(chunk, in_flight)
                if stopped:
                    break
            jax.block_until_ready(state)
            train_s = time.perf_counter() - t_train
            if not stopped:  # (save refuses a non-finite state: the guard for the last chunk)
                write_checkpoint(chunk, in_flight)
                # final evaluation: deterministic policy, vmapped envs, every seed (awaited)
                final = evaluator.submit(
                    state.agent.actor, env_steps=steps, chunk=chunk, final=True
                )
                try:
                    _, result = final.result()
                except Exception:  # reported by the evaluator; the run still finishes
                    result = None
    except BaseException:
        # an error or Ctrl-C: flush what the sinks have and stop the live console (the
        # evaluator is a daemon thread and is left to the interpreter's exit)
        metrics_thread.close(timeout=10.0)
        raise
    evaluator.close()
    sink_drops = metrics_thread.close()

    env_steps = int(np.asarray(state.env_steps).sum())
    train_steps = steps_per_chunk * chunks_run
    train_s = max(train_s, 1e-9)
    final_eval = final_eval_fields(result, evaluator.errors)
    summary = {
        "algo": cfg.algo,
        "env": cfg.env,
        "num_seeds": cfg.num_seeds,
        **final_eval,
        "env_steps": env_steps,
        "wall_s": time.perf_counter() - t_start,
        "train_s": train_s,
        "compile_s": compile_s,
        "env_steps_per_s": train_steps / train_s,
        "update_samples_per_s": updates_per_chunk * chunks_run * cfg.batch_size / train_s,
        "grad_steps_per_s": {
            "critic": updates_per_chunk * chunks_run / train_s,
            "actor": actor_updates_per_chunk * chunks_run / train_s,
        },
        "replay_ratio": updates_per_chunk * cfg.batch_size / steps_per_chunk,
        "policy_lag": loop.policy_lag,
        **evaluator.stats(),
        "sink_drops": sink_drops,
        "sink_errors": metrics_thread.errors,
        "placement": placement.describe(),
        "hardware": devices.describe_hardware(),
        "memory_estimate_bytes": memory,
        "chunks": chunks_run,
        "iterations_per_chunk": k_iter,
        "resumed_from": str(resume_from) if resume_from else None,
        "stopped": stopped,
        "checkpoint": str(checkpoint.latest(run_dir)) if checkpoint.latest(run_dir) else None,
    }
    summary = clean(summary)
    if save:
        save_policy(run_dir, state.agent.actor)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    say(f"run directory: {run_dir}")
    if stopped:
        say(
            f"stopped by {stopped} at {steps:,} env steps; checkpoint written. Resume with: "
            f"jaxspreeze train --resume {run_dir}"
        )
        return RunResult(run_dir, summary, state, loop)
    ret = summary["final_eval_return"]
    say(
        f"final eval return: {'n/a' if ret is None else f'{ret:.1f}'} (mean over "
        f"{cfg.num_seeds} seed(s), {cfg.eval_episodes} episodes each) | "
        f"{summary['env_steps_per_s']:,.0f} env steps/s | wall {summary['wall_s']:.1f}s"
    )
    return RunResult(run_dir, summary, state, loop)


def checkpoint_due(cfg: RunConfig, steps_before: int, steps_after: int) -> bool:
    """True when a multiple of ``checkpoint_every`` lies in ``(steps_before, steps_after]``."""
    if cfg.checkpoint_every <= 0:
        return False
    return steps_after // cfg.checkpoint_every > steps_before // cfg.checkpoint_every


def _resume_point(run_dir: Path, cfg: RunConfig, placement: devices.Placement):
    """The checkpoint to resume ``run_dir`` from, and ``cfg`` pointed at that run dir."""
    path = checkpoint.latest(run_dir)
    if path is None:
        raise ConfigError(
            "resume",
            f"{run_dir} has no checkpoint (looked in {checkpoint.checkpoint_dir(run_dir)})",
        )
    saved_cfg = checkpoint.read_config(path) or config_lib.load(run_dir / "config.json")
    checkpoint.check_compatible(
        saved_cfg, cfg, saved_split=checkpoint.saved_split(path), split=placement.split
    )
    cfg = dataclasses.replace(cfg, logdir=str(run_dir.parent), run_name=run_dir.name)
    return path, cfg


def final_eval_fields(result: EvalResult | None, errors: list[str]) -> dict[str, Any]:
    """The summary's ``final_eval_*`` fields (``final_eval_error`` if it failed)."""
    if result is None:
        return {"final_eval_return": None, "final_eval_error": errors[-1] if errors else None}
    per_seed_return = np.asarray(result.return_mean).tolist()
    return {
        "final_eval_return": float(np.mean(per_seed_return)),
        "final_eval_return_std": float(np.std(per_seed_return)),
        "final_eval_return_per_seed": per_seed_return,
        "final_eval_episode_return_std": np.asarray(result.return_std).tolist(),
        "final_eval_length": float(np.mean(result.length_mean)),
    }


def make_eval_fn(act: Any, env: Any, keys: jax.Array):
    """The evaluator's function: every seed's deterministic return (tests replace this)."""
    return make_seed_evaluate(act, env, keys)
