"""Env steps/s of recurrent PPO (--ppo.memory gru|lstm) against feed-forward PPO, same sizes.

One fused chunk program (``lax.scan`` over K iterations of the one-seed iteration: collect,
the critic phase and the actor phase) per variant, compiled once, then timed over
``--repeats`` calls with ``block_until_ready``; the median wall gives env steps/s.

    python experiments/recurrent_ppo_speed.py --env gymnax/MemoryChain-bsuite \\
        --num-envs 16 --rollout-steps 64 --batch-size 256 --hidden 64 64 --memory-size 64
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax

from jaxspreeze import envs
from jaxspreeze.schedules.iteration import Iteration
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan


def steps_per_second(
    args: argparse.Namespace, memory: str
) -> tuple[float, list[float], float, float]:
    """The median env steps/s of one chunk of ``args.iterations`` iterations (wall), the
    walls, env steps per process CPU second (median), and the first call's wall (compile
    and one warm call)."""
    cfg = RunConfig(
        algo="ppo",
        env=args.env,
        num_envs=args.num_envs,
        rollout_steps=args.rollout_steps,
        batch_size=args.batch_size,
        total_steps=args.num_envs * args.rollout_steps * args.iterations * 100,
        placement="single",
    )
    ppo = dataclasses.replace(
        cfg.ppo,
        memory=memory,
        memory_size=args.memory_size,
        hidden=tuple(args.hidden),
        epochs=args.epochs,
        recurrent_chunk=args.chunk,
        torso=args.torso,
    )
    planned = plan(dataclasses.replace(cfg, ppo=ppo), on_devices=False)
    algo = planned.make_algorithm()
    env = envs.make_env(args.env, args.num_envs)
    it = Iteration.from_plan(planned, algo, env, obs_buffer=False)
    chunk = jax.jit(lambda s: jax.lax.scan(lambda s, _: it(s), s, None, length=args.iterations))
    state = jax.jit(it.init)(jax.random.key(0))
    t0 = time.perf_counter()
    state, _ = jax.block_until_ready(chunk(state))  # compile and warm
    compile_s = time.perf_counter() - t0
    walls, cpus = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        state, _ = jax.block_until_ready(chunk(state))
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    steps = args.num_envs * args.rollout_steps * args.iterations
    return steps / statistics.median(walls), walls, steps / statistics.median(cpus), compile_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="gymnax/MemoryChain-bsuite")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--rollout-steps", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--memory-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--chunk", type=int, default=0, help="--ppo.recurrent-chunk")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--memories", nargs="+", default=["none", "gru", "lstm"])
    p.add_argument("--torso", default="auto", help="--ppo.torso (auto: the CNN on MinAtar's grids)")
    args = p.parse_args()
    base = None
    for memory in args.memories:
        sps, walls, per_cpu_s, first = steps_per_second(args, memory)
        base = base or sps
        print(
            f"memory={memory:5s} {sps:10,.0f} env steps/s  ({base / sps:.2f}x the first's wall)"
            f"  {per_cpu_s:10,.0f} env steps per CPU s  first call {first:.1f} s"
            f"  walls {', '.join(f'{w:.3f}' for w in walls)}",
            flush=True,
        )
    print(f"load {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
