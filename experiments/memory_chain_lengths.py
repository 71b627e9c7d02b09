"""MemoryChain's memory length: where recurrent and feed-forward PPO each stop solving.

gymnax's ``MemoryChain-bsuite`` keeps the length in its ``EnvParams`` (``memory_length``,
5 by default), which the CLI's ``--env gymnax/MemoryChain-bsuite`` does not expose: this
script passes ``(env, params)`` to ``jaxspreeze.train`` (a user's JAX env, trained as
``jax/MemoryChain``) with the preset ``ppo_memory_chain.toml``'s sizes, for each length and
policy, the budget scaled to the same number of episodes (3,000: the preset solves length
5 by 20k env steps, 3,333 six-step episodes), 3 seeds vmapped in one run. "Solves": the
mean final return (the run's final evaluation, per seed) is at least 0.9 (the issue's bar);
chance is 0.

    python experiments/memory_chain_lengths.py --lengths 5 10 20 40 --out memory_chain.jsonl
    python experiments/memory_chain_lengths.py --lengths 40 --rollout-steps 64   # longer BPTT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import gymnax

import jaxspreeze
from jaxspreeze.setup.config import load

PRESET = Path(jaxspreeze.__file__).parent / "presets" / "ppo_memory_chain.toml"
EPISODES = 3_000  # the preset solves MemoryChain (length 5) by 20k env steps: 3,333 episodes


def run(length: int, memory: str, args: argparse.Namespace, logdir: str) -> dict:
    """Train one (length, policy) pair on 3 seeds; its final returns and walls."""
    env, params = gymnax.make("MemoryChain-bsuite")
    params = params.replace(memory_length=length)
    cfg = load(PRESET)
    per_rollout = cfg.num_envs * args.rollout_steps
    total = -(-EPISODES * (length + 1) // per_rollout) * per_rollout
    ppo = dataclasses.replace(cfg.ppo, memory=memory)
    cfg = dataclasses.replace(
        cfg,
        total_steps=total,
        rollout_steps=args.rollout_steps,
        batch_size=max(cfg.batch_size, args.rollout_steps * 4),
        num_seeds=args.seeds,
        eval_every=0,
        ppo=ppo,
        logdir=logdir,
        run_name=f"L{length}-{memory}-T{args.rollout_steps}",
        sinks=(),
    )
    start = time.perf_counter()
    res = jaxspreeze.train(cfg, env=(env, params), quiet=True, overwrite=True, save=False)
    wall = time.perf_counter() - start
    s = res.summary
    per_seed = [round(float(r), 3) for r in s["final_eval_return_per_seed"]]
    mean = sum(per_seed) / len(per_seed)
    return {
        "memory_length": length,
        "memory": memory,
        "rollout_steps": args.rollout_steps,
        "total_steps": total,
        "returns": per_seed,
        "mean": round(mean, 3),
        "solved": mean >= 0.9,
        "wall_s": round(wall, 1),
        "compile_s": round(s.get("compile_s", 0.0), 1),
        "train_s": round(s.get("train_s", 0.0), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[5, 10, 20, 40])
    p.add_argument("--memories", nargs="+", default=["gru", "none"])
    p.add_argument("--rollout-steps", type=int, default=32)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default="", help="append one JSON line per run here")
    args = p.parse_args()
    print(
        "| memory_length | policy | rollout_steps | env steps | final return per seed "
        "| mean | solved | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as logdir:
        for length in args.lengths:
            for memory in args.memories:  # interleaved: each length runs both policies
                r = run(length, memory, args, logdir)
                print(
                    f"| {length} | {memory} | {r['rollout_steps']} | {r['total_steps']:,} | "
                    f"{', '.join(f'{x:.2f}' for x in r['returns'])} | {r['mean']:.2f} | "
                    f"{'yes' if r['solved'] else 'no'} | {r['wall_s']:.0f} |",
                    flush=True,
                )
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
