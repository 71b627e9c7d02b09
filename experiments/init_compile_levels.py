"""The init program compiled with XLA CPU's full, quick and level-0 options: compile
seconds and whether the initial states agree bitwise (experiments/results/cold_start_cpu.md).

    JAX_PLATFORMS=cpu taskset -c 1 python experiments/init_compile_levels.py
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from jaxspreeze import schedules
from jaxspreeze.core.programs import QUICK_OPTIONS
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

LEVEL0 = {**QUICK_OPTIONS, "xla_backend_optimization_level": 0}
CASES = (
    ("sac", "gymnax/Pendulum-v1"),
    ("ppo", "gymnax/CartPole-v1"),
    ("pqn", "gymnax/Acrobot-v1"),
    ("dqn", "gymnax/CartPole-v1"),
    ("td3", "brax/inverted_pendulum"),
    ("ppo", "gymnax/Breakout-MinAtar"),
)


def floats(tree) -> list[np.ndarray]:
    """The floating-point leaves of ``tree`` (PRNG keys and integers left out)."""
    out = []
    for leaf in jax.tree.leaves(jax.device_get(tree)):
        try:
            a = np.asarray(leaf)
        except TypeError:
            continue
        if a.dtype.kind == "f":
            out.append(a)
    return out


def main() -> None:
    jax.config.update("jax_enable_compilation_cache", False)
    for algo, env in CASES:
        cfg = resolve(dataclasses.replace(RunConfig(), algo=algo, env=env))
        schedule = schedules.make(plan(cfg, devices.single()))
        keys = jax.random.split(jax.random.key(0), cfg.num_seeds)
        lowered = schedule._init().lower(keys)
        seconds, states = {}, {}
        for name, options in (("full", None), ("quick", QUICK_OPTIONS), ("level0", LEVEL0)):
            t0 = time.perf_counter()
            program = lowered.compile(compiler_options=options)
            seconds[name] = round(time.perf_counter() - t0, 2)
            states[name] = floats(program(keys))
        level0, full = states["level0"], states["full"]
        differ = sum(not np.array_equal(x, y, equal_nan=True) for x, y in zip(level0, full, strict=True))
        largest = max(float(np.max(np.abs(x - y.astype(np.float64)))) for x, y in zip(level0, full, strict=True) if x.size)
        print(f"{algo} {env}: compile s {seconds}; level 0 against full: {differ} of {len(full)} "
              f"float leaves differ, largest {largest:.2e}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
