"""Env steps to a return threshold, per seed: a preset's seeds vmapped in one program,
evaluated as the time-to-score rows are (``jaxspreeze score``: the deterministic policy,
128 fresh starts, synchronously after every ``--every`` env steps), for screening presets
by env steps (load-independent) before the yardstick's wall.

    python experiments/steps_to_threshold.py jaxspreeze/presets/pqn_breakout_minatar.toml \
        --threshold 5 --seeds 3 --seed 0 --out /tmp/pqn.json --set pqn.q_lambda=0.65

Stops once every seed has reached the threshold, or at ``--cap`` env steps (the budget,
the epsilon and learning-rate schedules stay the preset's); ``--full`` runs the budget. Prints each evaluation's
per-seed returns and writes them, the first env step at or above the threshold per seed,
the compile and training seconds to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import time

T_COMMAND = time.time()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxspreeze.bench.record import evaluated_chunks  # noqa: E402
from jaxspreeze.score.runners import start_compiled  # noqa: E402
from jaxspreeze.setup import config  # noqa: E402
from jaxspreeze.setup.plan import plan  # noqa: E402


def planned(args: argparse.Namespace):
    """The preset with the seeds, the evaluation and the ``--set`` changes; chunks aligned
    to the evaluations."""
    cfg = config.load(args.preset).replace(
        num_seeds=args.seeds, seed=args.seed, eval_every=args.every, eval_episodes=128
    )
    for item in args.set:
        key, _, value = item.partition("=")
        section, _, name = key.rpartition(".")
        value = json.loads(value)
        value = tuple(value) if isinstance(value, list) else value
        cfg = cfg.replace(**{section: {name: value}} if section else {name: value})
    first = plan(cfg, on_devices=False)
    k = max(1, args.every // first.steps_per_iteration)
    return plan(first.cfg.replace(chunk_iterations=k), on_devices=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("preset")
    p.add_argument("--threshold", type=float, required=True)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=20_480)
    p.add_argument("--cap", type=int, default=143_360)
    p.add_argument("--full", action="store_true", help="run the whole budget (no early stop)")
    p.add_argument("--set", action="append", default=[], help="field=JSON, e.g. pqn.lr=5e-4")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    run = planned(args)
    cfg = run.cfg
    schedule, state, evaluate, compile_s = start_compiled(run)  # as the yardstick starts

    t1 = time.perf_counter()
    state = jax.block_until_ready(schedule.warmup(state))
    train_s = time.perf_counter() - t1
    step_of = lambda s: int(np.asarray(s.env_steps).reshape(-1)[0])
    evaluated = lambda s: jax.device_get(evaluate(s.agent.actor, step_of(s)))
    curve: list[dict] = []
    first: list[int | None] = [None] * cfg.num_seeds
    for done in evaluated_chunks(schedule, state, evaluated):
        train_s += done.chunk_s
        steps = step_of(done.state)
        returns = [float(r) for r in np.asarray(done.result.return_mean).reshape(-1)]
        first = [
            f if f is not None or r < args.threshold else steps
            for f, r in zip(first, returns, strict=True)
        ]
        curve.append({"env_steps": steps, "returns": returns, "train_s": train_s})
        print(f"{steps:>9,} {train_s:7.1f}s " + " ".join(f"{r:6.2f}" for r in returns), flush=True)
        if not args.full and (None not in first or steps >= args.cap):
            break
    result = {
        "preset": args.preset,
        "set": args.set,
        "seeds": [cfg.seed + i for i in range(cfg.num_seeds)],
        "threshold": args.threshold,
        "first_at_threshold": first,
        "compile_s": compile_s,
        "train_s": train_s,
        "env_steps_per_s_per_seed": curve[-1]["env_steps"] / train_s,
        "command_s": time.time() - T_COMMAND,
        "curve": curve,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"first at >= {args.threshold} per seed: {first}; compile {compile_s:.1f}s, "
          f"train {train_s:.1f}s")  # fmt: skip


if __name__ == "__main__":
    main()
