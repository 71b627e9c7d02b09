"""Env steps/s of a JAX suite stepped by jaxspreeze against a bare vmapped scan of the suite.

The programs are the bench's (``jaxspreeze bench --only suite``, jaxspreeze/bench/: the
suite rows, ``references.suite_stepper`` and ``cases.suite_stepper``, each scanned by
``suite.scanned``); this script keeps the earlier sections of
experiments/results/suites_cpu.md reproducible and adds the ablations the bench does not
run. Each program is ``jit(scan(T steps of N envs))`` with uniform random legal actions
and nothing else (no policy), compiled apart from the timing:

- ``bare``: the suite's transition alone, vmapped (no reset ever: the upper bound; the
  bench's ``bound``);
- ``own-reset``: the suite's own auto-reset, vmapped (Craftax's default ``auto_reset=True``
  env, the bench's ``builtin``; XLand-MiniGrid's ``GymAutoResetWrapper``, Navix's
  ``env.step``, Jumanji's ``VmapAutoResetWrapper``: the bench's ``own``);
- ``optimistic`` (Craftax): Craftax_Baselines' optimistic resets (the bench's ``own``);
- ``jaxspreeze``: ``make_env(id, N).step`` (the adapter: the suite's transition, the shared
  auto-reset with starts drawn ahead, the episode bookkeeping): what the training chunk runs;
- ``jaxspreeze-general``: the same adapter with ``auto_reset(..., skip_fixed=False)``: every
  leaf of the state selected at a reset and drawn ahead (bitwise the same transitions;
  ``tests/test_auto_reset.py``);
- ``jaxspreeze-rolled``: the same adapter with its draws' keys hashed by JAX's own threefry
  (a loop on a CPU), the rest of the lean order kept (Navix, Craftax:
  ``auto_reset(..., lean=True)``): what the unrolled hash alone saves;
- ``jaxspreeze-plain``, ``jaxspreeze-lean``: the same adapter built in the plain or the
  lean order of ``auto_reset``, whichever its family chose.

``--rounds`` timed calls per program, interleaved across programs; the median is reported,
as env steps per wall second and per CPU second of this process (``time.process_time``:
on a machine shared with other work the wall time is mostly the others' load), and the
ratios of the fastest calls (``over_bare_cpu_best``: on a loaded machine the median of
one program may fall on a disturbed call where another's does not).
``--variants`` picks the programs (Craftax's ``own-reset`` alone compiles for minutes).
``--reverse`` interleaves them in the reverse order (an order's bias shows between the two).

    JAX_PLATFORMS=cpu python experiments/suite_step_rate.py --envs xminigrid/MiniGrid-Empty-8x8
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
from typing import Any

import jax

from jaxspreeze.bench import cases, references, suite
from jaxspreeze.bench.record import Workload
from jaxspreeze.envs import VecEnv, base, make_env

VARIANTS = (
    "bare",
    "own-reset",
    "optimistic",
    "jaxspreeze",
    "jaxspreeze-general",
    "jaxspreeze-rolled",
    "jaxspreeze-plain",
    "jaxspreeze-lean",
)


def _built(name: str, n: int, **options: Any) -> VecEnv:
    """The adapter of ``name`` built with ``auto_reset(..., **options)``."""
    family, _, task = name.partition("/")
    module = importlib.import_module(f"jaxspreeze.envs.{family}")
    real = module.auto_reset
    try:
        module.auto_reset = lambda *a, **k: real(*a, **{**k, **options})
        return VecEnv.from_parts(module.make(task), n)
    finally:
        module.auto_reset = real


def _sides(name: str, n: int, variant: str) -> tuple[Any, Any]:
    """``(carry, step)`` of one variant (see the module's docstring)."""
    family = name.partition("/")[0]
    if variant == "bare":
        return references.suite_stepper(name, n, references.BOUND)
    if variant == "own-reset":
        return references.suite_stepper(name, n, "builtin" if family == "craftax" else "own")
    if variant == "optimistic":
        return references.suite_stepper(name, n, "own")
    if variant == "jaxspreeze-general":
        return cases.suite_stepper(name, n, env=_built(name, n, skip_fixed=False))
    if variant in ("jaxspreeze-plain", "jaxspreeze-lean"):
        lean = variant == "jaxspreeze-lean"
        return cases.suite_stepper(name, n, env=_built(name, n, lean=lean))
    return cases.suite_stepper(name, n)


def _programs(name: str, n: int, steps: int, variants: list[str]) -> dict[str, Workload]:
    """The compiled workload of each variant (bare always) for the env id ``name``."""
    out: dict[str, Workload] = {}
    for variant in VARIANTS:
        if variant != "bare" and variant not in variants:
            continue
        if variant == "optimistic" and not name.startswith("craftax/"):
            continue
        real = base._threefry_keys
        try:
            if variant == "jaxspreeze-rolled":  # JAX's own hash while it traces
                base._threefry_keys = lambda keys: False
            out[variant] = suite.scanned(variant, *_sides(name, n, variant), n, steps, {})
        finally:
            base._threefry_keys = real
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["xminigrid/MiniGrid-Empty-8x8"])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, help="programs to time"
    )
    parser.add_argument("--reverse", action="store_true", help="interleave in reverse order")
    args = parser.parse_args()
    for name in args.envs:
        make_env(name, 1)  # the suite installed and the id known: its one line if not
        programs = _programs(name, args.num_envs, args.steps, args.variants)
        if args.reverse:
            programs = dict(reversed(programs.items()))
        load = os.getloadavg()[0]
        timed = suite.time_interleaved(list(programs.values()), args.rounds, warmup=1)
        times = dict(zip(programs, timed, strict=True))
        frames = args.num_envs * args.steps
        rates = {v: frames / statistics.median(wall) for v, (wall, _) in times.items()}
        cpu_rates = {v: frames / statistics.median(cpu) for v, (_, cpu) in times.items()}
        best_rates = {v: frames / min(cpu) for v, (_, cpu) in times.items()}
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
                    "compile_s": {v: round(w.compile_s, 1) for v, w in programs.items()},
                    "device": str(jax.devices()[0]),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
