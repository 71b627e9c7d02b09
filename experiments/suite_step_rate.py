"""Env steps/s of a JAX suite stepped by jaxspreeze against a bare vmapped scan of the suite.

Three programs per env id, each ``jit(scan(T steps of N envs))`` with uniform random
actions and nothing else (no policy), compiled apart from the timing:

- ``bare``: the suite's transition alone, vmapped (no reset ever: an upper bound, and what
  the issue's "bare vmapped scan" measures: Craftax's ``auto_reset=False`` env, XLand-MiniGrid's
  ``env.step``, Navix's ``_step``);
- ``own-reset``: the suite's own auto-reset, vmapped (Craftax's default ``auto_reset=True``
  env, XLand-MiniGrid's ``GymAutoResetWrapper``, Navix's ``env.step``): what a user who
  vmaps the suite as shipped gets;
- ``jaxspreeze``: ``make_env(id, N).step`` (the adapter: the suite's transition, the shared
  auto-reset with starts drawn ahead, the episode bookkeeping): what the training chunk runs;
- ``jaxspreeze-general``: the same adapter with ``auto_reset(..., skip_fixed=False)``: every
  leaf of the state selected at a reset and drawn ahead, as before the fixed leaves were
  skipped (bitwise the same transitions; ``tests/test_auto_reset.py``);
- ``jaxspreeze-rolled``: the same adapter with its draws' keys split for every env and
  hashed by JAX's own threefry (a loop on a CPU), the rest of the lean order kept (Navix,
  Craftax: ``auto_reset(..., lean=True)``): what the unrolled hash alone saves (bitwise
  the same transitions; ``tests/test_auto_reset.py``).

``--rounds`` timed calls per program, interleaved across programs; the median is reported,
as env steps per wall second and per CPU second of this process (``time.process_time``:
on a machine shared with other work the wall time is mostly the others' load), and the
ratios of the fastest calls (``over_bare_cpu_best``: on a loaded machine the median of
one program may fall on a disturbed call where another's does not).
``--variants`` picks the programs (Craftax's ``own-reset`` alone compiles for minutes).

    JAX_PLATFORMS=cpu python experiments/suite_step_rate.py --envs xminigrid/MiniGrid-Empty-8x8
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

from jaxspreeze.envs import VecEnv, base, make_env

VARIANTS = ("bare", "own-reset", "jaxspreeze", "jaxspreeze-general", "jaxspreeze-rolled")


def _general(name: str, n: int) -> VecEnv:
    """The adapter of ``name`` built with ``auto_reset(..., skip_fixed=False)``."""
    family, _, task = name.partition("/")
    module = importlib.import_module(f"jaxspreeze.envs.{family}")
    real = module.auto_reset
    try:
        module.auto_reset = lambda *a, **k: real(*a, **k, skip_fixed=False)
        return VecEnv.from_parts(module.make(task), n)
    finally:
        module.auto_reset = real


def _programs(name: str, n: int, steps: int) -> dict[str, tuple[Callable, Any]]:
    """(jitted program, its first argument) per variant, for the env id ``name``."""
    env = make_env(name, n)
    family, _, task = name.partition("/")
    actions = env.spec.action_dim

    def scan(step: Callable, state: Any) -> tuple[Callable, Any]:
        def run(state, key):
            def body(state, k):
                k_act, k_step = jax.random.split(k)
                action = jax.random.randint(k_act, (n,), 0, actions)
                state, reward = step(k_step, state, action)
                return state, reward.sum()

            state, rewards = jax.lax.scan(body, state, jax.random.split(key, steps))
            return state, rewards.sum()

        return jax.jit(run), state

    keys = jax.random.split(jax.random.key(0), n)
    out: dict[str, tuple[Callable, Any]] = {}
    if family == "craftax":
        from craftax.craftax_env import make_craftax_env_from_name

        for variant, auto in (("bare", False), ("own-reset", True)):
            lib = make_craftax_env_from_name(task, auto_reset=auto)
            params = lib.default_params
            state = jax.vmap(lambda k: lib.reset(k, params)[1])(keys)

            def step(key, state, action, lib=lib, params=params):
                ks = jax.random.split(key, n)
                _, state, reward, _, _ = jax.vmap(lib.step, (0, 0, 0, None))(
                    ks, state, action, params
                )
                return state, reward

            out[variant] = scan(step, state)
    elif family == "xminigrid":
        import xminigrid
        from xminigrid.wrappers import GymAutoResetWrapper

        lib, params = xminigrid.make(task)
        for variant, stepper in (("bare", lib), ("own-reset", GymAutoResetWrapper(lib))):
            state = jax.vmap(lambda k: lib.reset(params, k))(keys)

            def step(key, ts, action, stepper=stepper, params=params):
                ts = jax.vmap(stepper.step, (None, 0, 0))(params, ts, action)
                return ts, ts.reward

            out[variant] = scan(step, state)
    elif family == "navix":
        import navix

        lib = navix.make(task)
        state = jax.vmap(lib.reset)(keys)
        for variant, fn in (("bare", lib._step), ("own-reset", lib.step)):

            def step(key, ts, action, fn=fn):
                ts = jax.vmap(fn)(ts, action)
                return ts, ts.reward

            out[variant] = scan(step, state)
    else:
        raise SystemExit(f"{name}: a craftax/, xminigrid/ or navix/ id")

    variants = ("jaxspreeze", env), ("jaxspreeze-general", _general(name, n)), ("rolled", env)
    for variant, vec in variants:

        def ours(key, state, action, vec=vec):
            _, state, reward, *_ = vec.step(key, state, action)
            return state, reward

        out[variant] = scan(ours, vec.reset(jax.random.key(1))[1])
    out["jaxspreeze-rolled"] = _rolled(*out.pop("rolled"))  # a program of its own
    return out


def _rolled(fn: Callable, state: Any) -> tuple[Callable, Any]:
    """``fn`` (the adapter's scan) compiled with the draws hashed by JAX's own threefry:
    the keys taken for JAX's own (``base._threefry_keys`` false while it traces)."""
    compiled: list[Callable] = []

    def call(state: Any, key: jax.Array) -> Any:
        if not compiled:  # at the first call, as the other programs compile
            real = base._threefry_keys
            try:
                base._threefry_keys = lambda keys: False
                compiled.append(fn.lower(state, key).compile())
            finally:
                base._threefry_keys = real
        return compiled[0](state, key)

    return call, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["xminigrid/MiniGrid-Empty-8x8"])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, help="programs to time"
    )
    args = parser.parse_args()
    for name in args.envs:
        programs = _programs(name, args.num_envs, args.steps)
        programs = {v: p for v, p in programs.items() if v in args.variants or v == "bare"}
        states, compile_s = {}, {}
        for variant, (fn, state) in programs.items():
            t = time.perf_counter()
            states[variant] = jax.block_until_ready(fn(state, jax.random.key(2)))[0]
            compile_s[variant] = time.perf_counter() - t
            # once more untimed, from the state a step returns (a reset's weak-typed leaves
            # would make the first timed call compile again)
            states[variant] = jax.block_until_ready(fn(states[variant], jax.random.key(3)))[0]
        times: dict[str, list[float]] = {v: [] for v in programs}
        cpu: dict[str, list[float]] = {v: [] for v in programs}
        load = os.getloadavg()[0]
        for r in range(args.rounds):
            for variant, (fn, _) in programs.items():
                t, c = time.perf_counter(), time.process_time()
                states[variant] = jax.block_until_ready(fn(states[variant], jax.random.key(4 + r)))[
                    0
                ]
                times[variant].append(time.perf_counter() - t)
                cpu[variant].append(time.process_time() - c)
        frames = args.num_envs * args.steps
        rates = {v: frames / statistics.median(ts) for v, ts in times.items()}
        cpu_rates = {v: frames / statistics.median(ts) for v, ts in cpu.items()}
        best_rates = {v: frames / min(ts) for v, ts in cpu.items()}
        over_bare = lambda r: {v: round(x / r["bare"], 3) for v, x in r.items() if v != "bare"}
        print(
            json.dumps(
                {
                    "env": name,
                    "num_envs": args.num_envs,
                    "steps": args.steps,
                    "env_steps_per_s": {v: round(x) for v, x in rates.items()},
                    "over_bare": over_bare(rates),
                    "env_steps_per_cpu_s": {v: round(x) for v, x in cpu_rates.items()},
                    "over_bare_cpu": over_bare(cpu_rates),
                    # the fastest call of each (the one least disturbed by other work)
                    "over_bare_cpu_best": over_bare(best_rates),
                    "load_before": round(load, 1),
                    "load_after": round(os.getloadavg()[0], 1),
                    "first_call_s": {v: round(x, 1) for v, x in compile_s.items()},
                    "device": str(jax.devices()[0]),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
