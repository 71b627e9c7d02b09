"""The host side: ``train(config)`` drives the jitted chunks and everything that waits.

The device runs chunk c+1 while the host turns chunk c's metrics into a record and hands
it to the sinks; the host only blocks on a chunk that has already been overtaken.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze import config as config_lib
from jaxspreeze import devices
from jaxspreeze.config import RunConfig
from jaxspreeze.envs import make_env
from jaxspreeze.evaluate import make_evaluate
from jaxspreeze.loop import Loop, TrainState, buffer_nbytes
from jaxspreeze.metrics import ConsoleSink, JsonlSink, Record, Sink, clean

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
    if isinstance(metrics, list):  # split placement: one dict per iteration
        metrics = {k: np.stack([m[k] for m in metrics]) for k in metrics[0]}
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
    sinks: list[Sink] = []
    if "console" in cfg.sinks and not quiet:
        sinks.append(ConsoleSink(cfg.total_steps))
    if "jsonl" in cfg.sinks:
        sinks.append(JsonlSink(run_dir))
    return sinks


def train(cfg: RunConfig, *, quiet: bool = False, sinks: list[Sink] | None = None) -> RunResult:
    """Train an agent as configured; returns the run directory and summary.

    Validates ``cfg`` first (raising :class:`~jaxspreeze.config.ConfigError` before any
    compile), then compiles, warms up, runs the chunks and evaluates the final policy.
    """
    t_start = time.perf_counter()
    config_lib.validate(cfg)
    placement = devices.resolve(cfg.placement)
    enable_compile_cache(cfg.compile_cache)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))

    loop = Loop(cfg, placement)
    k_iter, n_chunks = loop.iterations_per_chunk, loop.num_chunks
    run_dir = make_run_dir(cfg)
    sinks = default_sinks(cfg, run_dir, quiet) if sinks is None else sinks
    say(
        f"jaxspreeze: {cfg.algo} on {cfg.env} | {cfg.num_seeds} seed(s) x {cfg.num_envs} envs | "
        f"{placement.describe()} | replay buffer {buffer_nbytes(cfg, loop.env) / 2**20:.1f} MiB"
    )

    state = loop.init()
    compile_s = loop.compile(state)
    say(f"  compiled in {compile_s:.1f}s ({n_chunks} chunks x {k_iter} iterations)")
    state = loop.warmup(state)
    jax.block_until_ready(state)

    steps_per_chunk = k_iter * cfg.steps_per_iteration * cfg.num_seeds
    updates_per_chunk = k_iter * loop.algo.critic_steps_per_iteration * cfg.num_seeds
    actor_updates_per_chunk = k_iter * loop.algo.actor_steps_per_iteration * cfg.num_seeds
    records: list[Record] = []

    def emit(metrics: Any, chunk: int, t_prev: float) -> float:
        record = chunk_record(jax.device_get(metrics), cfg)
        now = time.perf_counter()
        dt = max(now - t_prev, 1e-9)
        record.update(
            chunk=chunk,
            wall_s=now - t_start,
            env_steps_per_s=steps_per_chunk / dt,
            update_samples_per_s=updates_per_chunk * cfg.batch_size / dt,
        )
        records.append(record)
        for sink in sinks:
            sink.write(record)
        return now

    t_train = time.perf_counter()
    t_prev, pending = t_train, None
    for chunk in range(n_chunks):
        state, metrics = loop.chunk(state)
        if pending is not None:
            t_prev = emit(*pending, t_prev)
        pending = (metrics, chunk)
    jax.block_until_ready(state)
    train_s = time.perf_counter() - t_train
    if pending is not None:
        emit(*pending, t_prev)

    # final evaluation: deterministic policy, vmapped envs, every seed
    eval_env = make_env(cfg.env, cfg.eval_episodes)
    evaluate = jax.jit(jax.vmap(make_evaluate(loop.algo.act, eval_env)))
    actor = jax.device_put(state.agent.actor, placement.eval)
    keys = jax.device_put(
        jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds), placement.eval
    )
    result = jax.device_get(evaluate(actor, keys))
    per_seed_return = np.asarray(result.return_mean).tolist()

    env_steps = int(np.asarray(state.env_steps).sum())
    train_steps = steps_per_chunk * n_chunks
    summary = {
        "algo": cfg.algo,
        "env": cfg.env,
        "num_seeds": cfg.num_seeds,
        "final_eval_return": float(np.mean(per_seed_return)),
        "final_eval_return_std": float(np.std(per_seed_return)),
        "final_eval_return_per_seed": per_seed_return,
        "final_eval_episode_return_std": np.asarray(result.return_std).tolist(),
        "env_steps": env_steps,
        "wall_s": time.perf_counter() - t_start,
        "train_s": train_s,
        "compile_s": compile_s,
        "env_steps_per_s": train_steps / train_s,
        "update_samples_per_s": updates_per_chunk * n_chunks * cfg.batch_size / train_s,
        "grad_steps_per_s": {
            "critic": updates_per_chunk * n_chunks / train_s,
            "actor": actor_updates_per_chunk * n_chunks / train_s,
        },
        "replay_ratio": updates_per_chunk * cfg.batch_size / steps_per_chunk,
        "policy_lag": loop.algo.actor_steps_per_iteration,
        "placement": placement.describe(),
        "hardware": devices.describe_hardware(),
        "chunks": n_chunks,
        "iterations_per_chunk": k_iter,
    }
    summary = clean(summary)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for sink in sinks:
        sink.close()
    say(f"run directory: {run_dir}")
    say(
        f"final eval return: {summary['final_eval_return']:.1f} (mean over {cfg.num_seeds} seed(s), "
        f"{cfg.eval_episodes} episodes each) | {summary['env_steps_per_s']:,.0f} env steps/s | "
        f"wall {summary['wall_s']:.1f}s"
    )
    return RunResult(run_dir, summary, state, loop)
