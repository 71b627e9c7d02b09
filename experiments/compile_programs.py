"""Compile time of each program a device run builds, one after the other (no overlap).

For an algorithm and env with its defaults: the init, the warm-up, the chunk and the
evaluation, each traced + lowered and then compiled by XLA, timed apart, with no
persistent cache (every compile is a real one). Wall and CPU seconds (this process's, all
threads): on a shared machine the CPU seconds are the steadier figure. The trainer compiles some of them beside
each other on threads; here they run in turn so each figure is that program's own.

    JAX_PLATFORMS=cpu python experiments/compile_programs.py --algo td3 --env brax/inverted_pendulum
    ... --out experiments/results/compile_programs_cpu.jsonl   (appends one JSON line)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time

import jax

from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import make_seed_evaluate
from jaxspreeze.envs import make_env
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def measure(algo: str, env: str) -> dict:
    jax.config.update("jax_enable_compilation_cache", False)
    cfg = resolve(dataclasses.replace(RunConfig(), algo=algo, env=env))
    t0 = time.perf_counter()
    schedule = schedules.make(plan(cfg, devices.single()))
    build_s = time.perf_counter() - t0
    rows: dict[str, dict[str, float]] = {}

    def program(name: str, jitted, *args) -> object:
        lowered, lower_s, lower_cpu = _timed(lambda: jitted.lower(*args))
        compiled, compile_s, compile_cpu = _timed(lowered.compile)
        rows[name] = {
            "trace_lower_s": round(lower_s, 2),
            "xla_compile_s": round(compile_s, 2),
            "trace_lower_cpu_s": round(lower_cpu, 2),
            "xla_compile_cpu_s": round(compile_cpu, 2),
        }
        return compiled

    keys = jax.random.split(jax.random.key(0), cfg.num_seeds)
    init = program("init", schedule._init(), keys)
    state = init(keys)
    if not schedule.algo.on_policy and schedule.plan.warmup_steps:
        program("warmup", jax.jit(jax.vmap(schedule.per_seed.warmup), donate_argnums=0), state)
    program("chunk", jax.jit(schedule.fused_chunk, donate_argnums=0), state)
    # the start's compile phase as the trainer runs it: the warm-up on a thread beside the
    # chunk (fresh jit objects: nothing above is reused, the cache is off)
    _, phase_s, phase_cpu = _timed(lambda: schedule.compile(state))
    serial = sum(rows[n]["trace_lower_s"] + rows[n]["xla_compile_s"] for n in rows if n != "init")
    phase = {
        "wall_s": round(phase_s, 2),
        "cpu_s": round(phase_cpu, 2),
        "serial_wall_s": round(serial, 2),
    }
    eval_env = make_env(cfg.env, cfg.eval_episodes)
    ev = make_seed_evaluate(schedule.algo.act, eval_env, jax.random.split(jax.random.key(1), 1))
    program("evaluation", ev._jit, abstract_on(state.agent.actor, jax.devices()[0]), ev._keys)
    total = sum(r["trace_lower_s"] + r["xla_compile_s"] for r in rows.values())
    total_cpu = sum(r["trace_lower_cpu_s"] + r["xla_compile_cpu_s"] for r in rows.values())
    return {
        "algo": algo,
        "env": env,
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "env_build_s": round(build_s, 2),
        "programs": rows,
        "compile_phase": phase,  # warm-up beside chunk, vs the two compiled in turn
        "total_s": round(total, 2),
        "total_cpu_s": round(total_cpu, 2),
        "load_1min": os.getloadavg()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="td3")
    p.add_argument("--env", default="brax/inverted_pendulum")
    p.add_argument("--label", default="", help="a name for this variant of the code")
    p.add_argument("--out", default=None, help="append the JSON line to this file")
    a = p.parse_args(argv)
    row = {"label": a.label, **measure(a.algo, a.env)}
    line = json.dumps(row)
    print(line)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
