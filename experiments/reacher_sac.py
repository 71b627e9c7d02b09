"""SAC on brax/reacher at a fixed budget, with resets that explore vs the old first-state resets.

``--reset pool`` is jaxspreeze's auto-reset (every episode from a freshly drawn target);
``--reset first`` rebuilds the reset jaxspreeze had before (each env back to its own
first state: training saw only ``num_envs`` targets, evaluation draws fresh ones) by
swapping the brax family's ``make`` for this process only. Everything else is the CLI's
``jaxspreeze train --algo sac --env brax/reacher --total-steps 20000``.

    JAX_PLATFORMS=cpu python experiments/reacher_sac.py --reset pool --seed 0
    JAX_PLATFORMS=cpu python experiments/reacher_sac.py --reset first --seed 2 --num-seeds 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

from jaxspreeze.envs import brax as brax_family
from jaxspreeze.envs.base import EnvParts
from jaxspreeze.run import trainer
from jaxspreeze.setup import config

sys.path.insert(0, str(Path(__file__).parent))
from reset_cost import first_state_reset, raw_functions


def use_first_state_resets() -> None:
    """Make brax/<name> reset each env to its own first state (the old behaviour)."""
    new_make = brax_family.make

    def make(env_name: str) -> EnvParts:
        parts = new_make(env_name)
        reset, step = raw_functions(parts)
        r1, s1 = first_state_reset(reset, step, parts.spec.max_episode_steps)
        return EnvParts(parts.spec, r1, jax.vmap(s1), parts.render_state)

    brax_family.make = make


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reset", choices=("pool", "first"), default="pool")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-seeds", type=int, default=1, help="seeds seed..seed+n-1, vmapped")
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--out", default="experiments/results/reacher_sac_cpu.jsonl")
    a = p.parse_args()
    if a.reset == "first":
        use_first_state_resets()
    cfg = config.RunConfig(
        algo="sac",
        env="brax/reacher",
        total_steps=a.total_steps,
        seed=a.seed,
        num_seeds=a.num_seeds,
        logdir="/tmp/reacher_sac_runs",
        run_name=f"{a.reset}_s{a.seed}_{int(time.time())}",
        sinks=("jsonl",),
    )
    t = time.perf_counter()
    result = trainer.train(cfg, quiet=True, save=False)
    s = result.summary
    row = {
        "reset": a.reset,
        "seed": a.seed,
        "num_seeds": a.num_seeds,
        "total_steps": a.total_steps,
        "final_eval_return": s.get("final_eval_return"),
        "final_eval_return_per_seed": s.get("final_eval_return_per_seed"),
        "final_eval_length": s.get("final_eval_length"),
        "wall_s": time.perf_counter() - t,
        "compile_s": s.get("compile_s"),
        "run_dir": str(result.run_dir),
    }
    print(json.dumps(row), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
