"""Sampling throughput of host envs: the worker pool vs a bare loop, workers x envs, GIL.

    JAX_PLATFORMS=cpu python experiments/host_sampling_bench.py            # everything
    JAX_PLATFORMS=cpu python experiments/host_sampling_bench.py --sections ratio --seconds 2
    JAX_PLATFORMS=cpu python experiments/host_sampling_bench.py --sync-dispatch \
        --out host_sampling_cpu_syncdispatch      # policy calls run in the calling thread

Every rate is env steps/s (real transitions: next-step reset rows are not counted),
measured over ``--seconds`` after a warm-up, with the policy compiled beforehand (compile
apart) and every action fetched to the host (``np.asarray`` blocks until ready); each
figure is the median of ``--repeats`` interleaved rounds. The policy is SAC's actor
(2x128 tanh-Gaussian MLP, sampled with a fresh key each step) on the CPU.

Sections:
- ``ratio``: :class:`jaxspreeze.host.workers.WorkerPool` (1 worker, policy in the loop, a
  consumer taking its blocks) vs a bare loop over the same envs with the same jitted policy
  (written here, outside the library), for gymnasium and envpool (sync, and envpool's
  async send/recv with half the envs per recv) on HalfCheetah-v5 and Pendulum-v1. Goal:
  pool / bare >= 0.9.
- ``grid``: pool throughput against workers x envs per worker on HalfCheetah-v5 (a plot).
- ``switch``: envpool HalfCheetah-v5 (bare loop, and the pool) alone and beside a busy
  Python thread (a learner's host work) at several ``sys.setswitchinterval`` values; the
  busy thread's own loop rate is reported too (what the switching costs it).

Writes ``experiments/results/<out>.md`` (+ ``.json``, ``.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxspreeze import networks
from jaxspreeze.host.hostenvs import host_env_spec
from jaxspreeze.host.workers import ParamSlot, WorkerPool

RESULTS = Path(__file__).resolve().parent / "results"
HIDDEN = (128, 128)


class Rate(NamedTuple):
    """Env steps per wall-clock second, and per CPU-second of this process (all threads)."""

    wall: float
    cpu: float


# --- the policy (SAC's actor) -------------------------------------------------------------


def make_policy(env_name: str, seed: int = 0) -> tuple[Callable, Any]:
    """SAC's stochastic actor for the env: ``policy_fn(params, obs, key) -> actions`` and params."""
    spec = host_env_spec(env_name)
    actor = networks.TanhGaussianActor(HIDDEN, spec.action_dim)
    low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
    scale, bias = (high - low) / 2, (high + low) / 2
    params = actor.init(jax.random.key(seed), np.zeros((1, *spec.obs_shape), np.float32))

    def policy_fn(params, obs, key):
        mean, log_std = actor.apply(params, obs)
        return networks.tanh_gaussian_sample(mean, log_std, key, scale, bias)[0]

    return policy_fn, params


def jitted_act(policy_fn: Callable) -> Callable:
    """The bare loop's policy call, built like the pool's: split the key inside the jit."""

    def act(params, obs, key):
        key, sub = jax.random.split(key)
        return policy_fn(params, obs, sub), key

    return jax.jit(act)


# --- the bare loops (the reference, outside the library) ----------------------------------


def bare_gymnasium(env_id: str, n: int, seconds: float, warmup: float) -> Rate:
    """gymnasium make_vec (sync, same-step autoreset) + the jitted policy, nothing else."""
    import gymnasium as gym

    policy_fn, params = make_policy(f"gymnasium/{env_id}")
    act = jitted_act(policy_fn)
    vec = gym.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    obs, _ = vec.reset(seed=0)
    key = jax.random.key(0)
    jax.block_until_ready(act(params, obs.astype(np.float32), key))  # compile apart

    def step() -> int:
        nonlocal obs, key
        a, key = act(params, obs.astype(np.float32), key)
        obs, _, _, _, _ = vec.step(np.asarray(a))
        return n

    rate = _timed(step, seconds, warmup)
    vec.close()
    return rate


def bare_envpool(
    task: str, n: int, seconds: float, warmup: float, batch: int | None = None
) -> Rate:
    """envpool sync ``step`` (or async send/recv with ``batch`` envs per recv) + the policy."""
    import envpool

    policy_fn, params = make_policy(f"envpool/{task}")
    act = jitted_act(policy_fn)
    batch = batch or n
    pool = envpool.make(task, env_type="gymnasium", num_envs=n, batch_size=batch, seed=0)
    key = jax.random.key(0)
    reset_next = np.ones(n, bool)
    pool.async_reset()
    obs, _, _, _, info = pool.recv()
    ids = info["env_id"]
    jax.block_until_ready(act(params, obs.astype(np.float32), key))

    def step() -> int:
        nonlocal obs, key, ids
        a, key = act(params, obs.astype(np.float32), key)
        pool.send(np.asarray(a), ids)
        obs, _, term, trunc, info = pool.recv()
        ids = info["env_id"]
        valid = ~reset_next[ids]
        reset_next[ids] = term | trunc
        return int(valid.sum())

    rate = _timed(step, seconds, warmup)
    pool.close()
    return rate


def _timed(step: Callable[[], int], seconds: float, warmup: float) -> Rate:
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        step()
    count, t0, c0 = 0, time.perf_counter(), time.process_time()
    end = t0 + seconds
    while time.perf_counter() < end:
        count += step()
    return Rate(count / (time.perf_counter() - t0), count / (time.process_time() - c0))


# --- the pool -----------------------------------------------------------------------------


def pool_rate(
    env_name: str,
    workers: int,
    n: int,
    seconds: float,
    warmup: float,
    *,
    batch: int | None = None,
    rollout_steps: int = 8,
    switch_interval: float | None = None,
) -> tuple[Rate, list[float]]:
    """Delivered env steps/s of a WorkerPool whose consumer takes and drops every block."""
    policy_fn, params = make_policy(env_name)
    slot = ParamSlot()
    slot.publish(params, 0)
    kwargs: dict[str, Any] = {}
    if batch and batch != n:
        kwargs["batch_size"] = batch
    pool = WorkerPool(
        env_name,
        policy_fn,
        slot,
        num_workers=workers,
        envs_per_worker=n,
        rollout_steps=rollout_steps,
        queue_size=2 * workers,
        env_kwargs=kwargs,
        **({} if switch_interval is None else {"switch_interval": switch_interval}),
    )
    pool.compile()  # compile apart
    pool.start()
    try:
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            pool.get(timeout=120)
        start = pool.delivered
        t0, c0 = time.perf_counter(), time.process_time()
        end = t0 + seconds
        while time.perf_counter() < end:
            pool.get(timeout=120)
        steps = pool.delivered - start
        rate = Rate(steps / (time.perf_counter() - t0), steps / (time.process_time() - c0))
        per_worker = [pool.stats()[f"worker{w}_steps_per_second"] for w in range(workers)]
    finally:
        left = pool.close()
        assert not left, left
    return rate, per_worker


# --- sections -----------------------------------------------------------------------------


def _median(rates: list[Rate]) -> dict[str, Any]:
    return {
        "wall": statistics.median(r.wall for r in rates),
        "cpu": statistics.median(r.cpu for r in rates),
        "wall_all": [round(r.wall) for r in rates],
    }


def section_ratio(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pool (1 worker) vs bare loop, interleaved, per env and library."""
    rows = []
    n, sec, warm = args.envs, args.seconds, args.warmup
    cases: list[tuple[str, int | None, Callable[[], Rate]]] = []
    for task in args.tasks:
        cases.append((f"gymnasium/{task}", None, lambda t=task: bare_gymnasium(t, n, sec, warm)))
        if _has_envpool():
            cases.append((f"envpool/{task}", None, lambda t=task: bare_envpool(t, n, sec, warm)))
            cases.append(
                (f"envpool/{task}", n // 2, lambda t=task: bare_envpool(t, n, sec, warm, n // 2))
            )
    for name, batch, bare in cases:
        b_rates, p_rates = [], []
        for _ in range(args.ratio_repeats):  # interleaved: bare, pool, bare, pool, ...
            b_rates.append(bare())
            rate, _ = pool_rate(
                name, 1, n, sec, warm, batch=batch, rollout_steps=args.rollout_steps
            )
            p_rates.append(rate)
        row = {
            "env": name,
            "mode": "sync" if batch is None else f"async (recv {batch} of {n})",
            "envs": n,
            "bare": _median(b_rates),
            "pool": _median(p_rates),
            # per round, pool / the bare loop of the same round: drift of the load cancels
            "ratio_rounds": [p.wall / q.wall for p, q in zip(p_rates, b_rates, strict=True)],
        }
        row["ratio"] = statistics.median(row["ratio_rounds"])
        row["ratio_cpu"] = row["pool"]["cpu"] / row["bare"]["cpu"]
        print(
            f"ratio {name} {row['mode']}: bare {row['bare']['wall']:.0f} "
            f"pool {row['pool']['wall']:.0f} x{row['ratio']:.2f} (cpu x{row['ratio_cpu']:.2f})",
            flush=True,
        )
        rows.append(row)
    return rows


def section_grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pool throughput against workers x envs per worker on HalfCheetah-v5."""
    rows = []
    libs = ["gymnasium"] + (["envpool"] if _has_envpool() else [])
    for lib in libs:
        for n in args.grid_envs:
            for w in args.grid_workers:
                rates = []
                for _ in range(args.repeats):
                    batch = n // 2 if lib == "envpool" and n >= 2 else None
                    r, _ = pool_rate(
                        f"{lib}/HalfCheetah-v5",
                        w,
                        n,
                        args.seconds,
                        args.warmup,
                        batch=batch,
                        rollout_steps=args.rollout_steps,
                    )
                    rates.append(r)
                row = {"lib": lib, "workers": w, "envs": n, **_median(rates)}
                print(f"grid {lib} W={w} N={n}: {row['wall']:.0f}", flush=True)
                rows.append(row)
    return rows


class _Spinner:
    """A busy Python thread (a learner's host work): counts its loops."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.loops = 0
        self.thread = threading.Thread(target=self._spin, daemon=True)

    def _spin(self) -> None:
        x = 0
        while not self.stop.is_set():
            x += 1
            if x % 1000 == 0:
                self.loops = x
        self.loops = x

    def __enter__(self) -> _Spinner:
        self.t0 = time.perf_counter()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.rate = self.loops / (time.perf_counter() - self.t0)


def section_switch(args: argparse.Namespace) -> list[dict[str, Any]]:
    """envpool HalfCheetah beside a busy Python thread at several switch intervals."""
    if not _has_envpool():
        return []
    rows = []
    n = args.envs
    old = sys.getswitchinterval()
    for interval in args.intervals:
        for busy in (False, True):
            for what in ("bare", "pool"):
                rates, spins = [], []
                for _ in range(args.repeats):
                    sys.setswitchinterval(interval)
                    with _Spinner() if busy else contextlib.nullcontext() as spinner:
                        if what == "bare":
                            r = bare_envpool("HalfCheetah-v5", n, args.seconds, args.warmup)
                        else:
                            r, _ = pool_rate(
                                "envpool/HalfCheetah-v5",
                                1,
                                n,
                                args.seconds,
                                args.warmup,
                                rollout_steps=args.rollout_steps,
                                switch_interval=interval,
                            )
                    sys.setswitchinterval(old)
                    rates.append(r)
                    if spinner is not None:
                        spins.append(spinner.rate)
                row = {
                    "interval_ms": interval * 1e3,
                    "busy_thread": busy,
                    "loop": what,
                    **_median(rates),
                    "busy_loops_per_s": statistics.median(spins) if spins else None,
                }
                print(
                    f"switch {interval * 1e3:g} ms busy={busy} {what}: {row['wall']:.0f}",
                    flush=True,
                )
                rows.append(row)
    return rows


def _version(lib: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(lib)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _has_envpool() -> bool:
    import importlib.util

    return importlib.util.find_spec("envpool") is not None


# --- report -------------------------------------------------------------------------------


def write_report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Markdown (+ json, png) under experiments/results/."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / args.out
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    m = results["machine"]
    lines = [
        "# Host env sampling throughput (CPU)",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}, jax {m['jax']}, "
        f"envpool {m['envpool']}, gymnasium {m['gymnasium']}, mujoco {m['mujoco']}; load average "
        f"(1, 5, 15 min) before the run {m['load_before']}, after {m['load_after']}; "
        f"XLA_FLAGS={m['xla_flags']!r}, JAX CPU async dispatch {m['cpu_async_dispatch']}. "
        "Env steps/s (real transitions), medians of "
        f"{args.repeats} interleaved rounds of {args.seconds} s each after {args.warmup} s of "
        "warm-up; policy: SAC's 2x128 tanh-Gaussian actor sampled with a fresh key each "
        "step, compiled beforehand, actions fetched to the host every step; pool blocks of "
        f"{args.rollout_steps} steps x envs, taken by a consumer thread. 'per CPU-s': env "
        "steps per CPU-second of the whole process, which the other processes' load "
        "disturbs less than the wall-clock rate.",
        "",
    ]
    if results.get("ratio"):
        lines += [
            "## The worker pool (1 worker, policy in the loop) vs a bare loop",
            "",
            f"{args.ratio_repeats} rounds; pool / bare: the median over rounds of the pool's "
            "rate over the bare loop's rate measured just before it.",
            "",
            "| env | mode | envs | bare loop | pool | pool / bare | per CPU-s: bare, pool |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in results["ratio"]:
            lines.append(
                f"| {r['env']} | {r['mode']} | {r['envs']} | {r['bare']['wall']:,.0f} | "
                f"{r['pool']['wall']:,.0f} | {r['ratio']:.2f} | "
                f"{r['bare']['cpu']:,.0f}, {r['pool']['cpu']:,.0f} |"
            )
        lines.append("")
    if results.get("grid"):
        ws = args.grid_workers
        lines += [
            "## Throughput against workers x envs per worker (HalfCheetah-v5, pool)",
            "",
            "envpool workers use async send/recv (half their envs per recv); gymnasium "
            "workers step a sync vector env in their thread.",
            "",
            "| library | envs/worker | " + " | ".join(f"W={w}" for w in ws) + " |",
            "|---|---:|" + "---:|" * len(ws),
        ]
        for lib in dict.fromkeys(r["lib"] for r in results["grid"]):
            for n in args.grid_envs:
                cells = [
                    f"{r['wall']:,.0f}"
                    for w in ws
                    for r in results["grid"]
                    if r["lib"] == lib and r["envs"] == n and r["workers"] == w
                ]
                lines.append(f"| {lib} | {n} | " + " | ".join(cells) + " |")
        lines += ["", f"![throughput]({out.with_suffix('.png').name})", ""]
        _plot(args, results["grid"], out.with_suffix(".png"))
    if results.get("switch"):
        lines += [
            f"## Python's switch interval (envpool HalfCheetah-v5, {args.envs} envs, sync)",
            "",
            "| switch interval | busy Python thread | bare loop | pool | busy thread loops/s "
            "(beside bare, pool) |",
            "|---:|---|---:|---:|---:|",
        ]
        sw = results["switch"]

        def pick(interval: float, busy: bool, loop: str) -> dict[str, Any]:
            return next(
                r
                for r in sw
                if r["interval_ms"] == interval and r["busy_thread"] == busy and r["loop"] == loop
            )

        for interval in dict.fromkeys(r["interval_ms"] for r in sw):
            for busy in (False, True):
                b, p = pick(interval, busy, "bare"), pick(interval, busy, "pool")
                spin = (
                    f"{b['busy_loops_per_s'] / 1e6:.1f}M, {p['busy_loops_per_s'] / 1e6:.1f}M"
                    if busy
                    else ""
                )
                lines.append(
                    f"| {interval:g} ms | {'yes' if busy else 'no'} | {b['wall']:,.0f} | "
                    f"{p['wall']:,.0f} | {spin} |"
                )
        lines.append("")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.md')}")


def _plot(args: argparse.Namespace, grid: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # lazy: optional heavy dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lib in dict.fromkeys(r["lib"] for r in grid):
        for n in args.grid_envs:
            pts = sorted(
                (r["workers"], r["wall"]) for r in grid if r["lib"] == lib and r["envs"] == n
            )
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"{lib}, {n} envs/worker")
    ax.set_xlabel("workers")
    ax.set_ylabel("env steps/s (HalfCheetah-v5)")
    ax.set_xticks(args.grid_workers)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    """Run the chosen sections and write the report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sections", nargs="+", default=["ratio", "grid", "switch"])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ratio-repeats", type=int, default=5, help="rounds of the 'ratio' section")
    p.add_argument("--envs", type=int, default=8, help="envs per worker in 'ratio' and 'switch'")
    p.add_argument("--tasks", nargs="+", default=["HalfCheetah-v5", "Pendulum-v1"])
    p.add_argument("--rollout-steps", type=int, default=16, help="steps per env in a pool block")
    p.add_argument("--grid-workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--grid-envs", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--intervals", type=float, nargs="+", default=[0.005, 0.001, 0.0005, 0.0001])
    p.add_argument("--out", default="host_sampling_cpu")
    p.add_argument(
        "--sync-dispatch",
        action="store_true",
        help="jax_cpu_enable_async_dispatch=False: CPU computations run in the calling thread",
    )
    args = p.parse_args()
    if args.sync_dispatch:  # before the CPU backend exists (it reads the flag when created)
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    results: dict[str, Any] = {
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "cpu_async_dispatch": bool(jax.config.values["jax_cpu_enable_async_dispatch"]),
            **{lib: _version(lib) for lib in ("envpool", "gymnasium", "mujoco")},
            "load_before": [round(x, 2) for x in os.getloadavg()],
        },
    }
    for name in args.sections:
        results[name] = globals()[f"section_{name}"](args)
    results["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    write_report(args, results)


if __name__ == "__main__":
    main()
