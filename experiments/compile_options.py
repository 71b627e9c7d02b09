"""XLA compile options per program: each device program of a run compiled with each option
set, its CPU seconds to compile and to run once, and whether its outputs are bitwise those
of full optimisation.

    JAX_PLATFORMS=cpu python experiments/compile_options.py --algo sac \
        --env gymnax/Pendulum-v1 [--chunk]

(experiments/results/cold_start_cpu.md). No persistent cache; one compile per option set.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import numpy as np

from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import make_seed_evaluate
from jaxspreeze.envs import make_env
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

OPTIONS = (
    {},
    {"xla_llvm_disable_expensive_passes": True},
    {"xla_backend_optimization_level": 1},
    {"xla_backend_optimization_level": 1, "xla_llvm_disable_expensive_passes": True},
    {"xla_backend_optimization_level": 0},
    {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True},
    {"xla_cpu_use_fusion_emitters": False},
    {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1},
    {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0},
)


def _data(x):
    is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    return np.asarray(jax.random.key_data(x) if is_key else x)


def _same(a, b) -> bool:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return all(np.array_equal(_data(x), _data(y)) for x, y in pairs)


def bench(name: str, lowered, args: tuple, sets: tuple = OPTIONS) -> None:
    """Compile ``lowered`` with each option set; print CPU seconds and bitwise equality."""
    reference = None
    for options in sets:
        c0 = time.process_time()
        program = lowered.compile(compiler_options=options or None)
        compile_cpu = time.process_time() - c0
        out = jax.block_until_ready(program(*args))
        c0 = time.process_time()
        jax.block_until_ready(program(*args))
        run_cpu = time.process_time() - c0
        reference = out if reference is None else reference
        print(
            f"{name} {options}: compile cpu {compile_cpu:.2f} s, run cpu {run_cpu:.3f} s, "
            f"bitwise {_same(reference, out)}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="sac")
    p.add_argument("--env", default="gymnax/Pendulum-v1")
    p.add_argument("--chunk", action="store_true", help="the chunk too (slow)")
    p.add_argument("--only-chunk", action="store_true", help="the chunk alone")
    p.add_argument("--sets", type=int, nargs="*", help="indices into OPTIONS (default all)")
    a = p.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    cfg = resolve(dataclasses.replace(RunConfig(), algo=a.algo, env=a.env))
    s = schedules.make(plan(cfg, devices.single()))
    sets = tuple(OPTIONS[i] for i in a.sets) if a.sets else OPTIONS
    keys = jax.random.split(jax.random.key(0), cfg.num_seeds)
    state = s._init()(keys)
    print(
        f"{cfg.algo} {cfg.env}: {s.plan.num_iterations} iterations in the run, {cfg.chunk_iterations} a chunk",
        flush=True,
    )
    if not a.only_chunk:
        bench("init", s._init().lower(keys), (keys,), sets)
        if s.plan.warmup_steps and not s.algo.on_policy:
            warmup = jax.jit(jax.vmap(s.per_seed.warmup))
            bench("warmup", warmup.lower(state), (state,), sets)
        env = make_env(cfg.env, cfg.eval_episodes)
        ev = make_seed_evaluate(s.algo, env, jax.random.split(jax.random.key(1), 1))
        step = ev._step(0)
        args = (state.agent.actor, ev._keys, step)
        bench("evaluate", ev._jit.lower(*args), args, sets)
    if a.chunk or a.only_chunk:
        bench("chunk", jax.jit(s.fused_chunk).lower(state), (state,), sets)


if __name__ == "__main__":
    main()
