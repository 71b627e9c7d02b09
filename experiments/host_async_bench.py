"""The host schedule (async workers) vs a synchronous step-then-update loop of the same pieces.

    JAX_PLATFORMS=cpu python experiments/host_async_bench.py
    JAX_PLATFORMS=cpu python experiments/host_async_bench.py --env envpool/HalfCheetah-v5 \
        --grad-steps 1 2 8 --seconds 20

Both modes train SAC from a warm buffer for ``--seconds`` (after one untimed chunk) at
the same replay ratio (``grad_steps x batch_size`` update samples per ``num_envs x
rollout_steps`` env steps) with the same compiled pieces: the schedule's jitted update
(``grad_steps`` gradient steps), its buffer store and its policy (SAC's actor, sampled):

- ``async``: :class:`jaxspreeze.schedules.HostAsync`'s ``chunk()``: one worker thread steps
  the envs while the learner updates (the throttle holds the ratio);
- ``sync``: one thread: step the envs ``rollout_steps`` times (policy in the loop), store
  the block, update, in turn (the classic loop; written here, outside the library; an
  envpool next-step reset row is stored as if it were a transition: same cost, 1 row in
  an episode's length).

Env steps/s counts transitions stored (sync) or delivered (async); update samples/s the
learner's. The process uses the CPU settings of host-env runs (:func:`cpu_settings`:
one XLA thread per computation, no CPU async dispatch) for both modes unless
``--xla-threads`` keeps XLA's defaults. Rounds alternate the modes; medians are reported,
with the process's CPU-seconds (``cpu_s``) to tell machine load from the method.
Writes ``experiments/results/<out>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from jaxspreeze.schedules.host_async import cpu_settings
from jaxspreeze.setup.plan import plan

RESULTS = Path(__file__).resolve().parent / "results"


def build(env: str, grad_steps: int, args: argparse.Namespace):
    """A compiled host schedule with a warm buffer (no workers started yet)."""
    import jax

    from jaxspreeze import schedules
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import RunConfig

    cfg = RunConfig().replace(
        algo="sac",
        env=env,
        num_envs=args.num_envs,
        rollout_steps=args.rollout_steps,
        grad_steps=grad_steps,
        batch_size=args.batch_size,
        buffer_size=200_000,
        learning_starts=2_000,
        total_steps=10**7,
        chunk_iterations=args.chunk,
        host_workers=1,
        sac={"hidden": tuple(args.hidden)},
    )
    cfg = plan(cfg, on_devices=False).cfg
    schedule = schedules.make(plan(cfg, devices.resolve("single")))
    state = schedule.init()
    schedule.compile(state)
    return schedule, jax.block_until_ready(state)


def run_async(schedule, state, seconds: float):
    """Chunks of the host schedule for ``seconds``: (env steps/s, update samples/s, cpu_s)."""
    import jax

    state, m = schedule.chunk(state)  # untimed: workers up, queues full
    jax.block_until_ready(m)
    pool = schedule.pool
    steps0, updates0 = pool.delivered, schedule.throttle.units
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        state, m = schedule.chunk(state)
        jax.block_until_ready(m)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return state, (pool.delivered - steps0) / dt, (schedule.throttle.units - updates0) / dt, dc


def run_sync(schedule, state, env, obs, seconds: float):
    """Step, store, update in turn for ``seconds``: (env steps/s, update samples/s, cpu_s)."""
    import jax
    import numpy as np

    from jaxspreeze.core.types import Transition

    update, store, copy, _ = schedule._fns
    act = jax.jit(lambda actor, obs, key: schedule.policy((actor, False), obs, key))
    key = jax.random.key(1)
    T, N = schedule.cfg.rollout_steps, schedule.cfg.num_envs
    spec = schedule.env.spec
    steps = updates = 0

    def one_iteration(state, obs, key):
        actor = copy(state.agent.actor)
        rows = []
        for _ in range(T):
            key, k = jax.random.split(key)
            action = np.asarray(act(actor, obs, k))
            out = env.step(action)
            rows.append((obs, action, out.reward, out.terminated, out.truncated, out.final_obs))
            obs = out.obs
        block = Transition(*(np.stack(x)[None] for x in zip(*rows, strict=True)))
        block = block._replace(action=block.action.reshape(1, T, N, *spec.action_shape))
        buffer = store(state.buffer, jax.device_put(block, schedule.learner))
        state, m = update(state._replace(buffer=buffer))
        jax.block_until_ready(m)
        return state, obs, key

    for _ in range(schedule.iterations_per_chunk):  # untimed, like async's first chunk
        state, obs, key = one_iteration(state, obs, key)
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for _ in range(schedule.iterations_per_chunk):
            state, obs, key = one_iteration(state, obs, key)
            steps += T * N
            updates += schedule.units
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return state, obs, steps / dt, updates / dt, dc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="gymnasium/Pendulum-v1")
    p.add_argument("--grad-steps", type=int, nargs="+", default=[1, 8])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--rollout-steps", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--chunk", type=int, default=25)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--xla-threads", action="store_true", help="keep XLA's CPU defaults")
    p.add_argument(
        "--sync-dispatch-only",
        action="store_true",
        help="XLA's CPU threads as by default, only JAX's CPU async dispatch off",
    )
    p.add_argument("--out", default="host_async_cpu")
    args = p.parse_args()
    if args.sync_dispatch_only:
        import jax

        jax.config.update("jax_cpu_enable_async_dispatch", False)
    elif not args.xla_threads:
        cpu_settings()
    import jax

    from jaxspreeze.host.hostenvs import make_host_env

    rows = []
    for g in args.grad_steps:
        schedule, state = build(args.env, g, args)
        try:
            state = schedule.warmup(state)
            env = make_host_env(args.env, args.num_envs, seed=123)
            obs = env.reset(123)
            rounds = {"async": [], "sync": []}
            for _ in range(args.repeats):
                state, obs, s_env, s_upd, s_cpu = run_sync(schedule, state, env, obs, args.seconds)
                rounds["sync"].append((s_env, s_upd, s_cpu))
                state, a_env, a_upd, a_cpu = run_async(schedule, state, args.seconds)
                rounds["async"].append((a_env, a_upd, a_cpu))
                print(g, "sync", rounds["sync"][-1], "async", rounds["async"][-1], flush=True)
            env.close()
        finally:
            schedule.close()
        med = {
            mode: [statistics.median(r[i] for r in rs) for i in range(3)]
            for mode, rs in rounds.items()
        }
        rows.append(
            {
                "grad_steps": g,
                "replay_ratio": schedule.ratio,
                **{
                    f"{m}_{k}": v
                    for m, vals in med.items()
                    for k, v in zip(
                        ("env_steps_per_s", "update_samples_per_s", "cpu_s"), vals, strict=True
                    )
                },
                "rounds": rounds,
            }
        )
    meta = {
        "command": "python experiments/host_async_bench.py " + " ".join(sys.argv[1:]),
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}, jax {jax.__version__}",
        "load_before": os.getloadavg(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "cpu_async_dispatch": bool(jax.config.read("jax_cpu_enable_async_dispatch")),
        "seconds": args.seconds,
        "repeats": args.repeats,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        f"# Host schedule (async workers) vs step-then-update, SAC on {args.env} (CPU)",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {meta['machine']}; load average at the end {os.getloadavg()}; "
        f"XLA_FLAGS={meta['xla_flags']!r}, JAX CPU async dispatch "
        f"{meta['cpu_async_dispatch']}. num_envs {args.num_envs}, rollout_steps "
        f"{args.rollout_steps}, batch {args.batch_size}, hidden {args.hidden}; medians of "
        f"{args.repeats} alternating rounds of {args.seconds} s; cpu_s: process CPU-seconds "
        "per round.",
        "",
        "| grad_steps | replay ratio | sync env steps/s | async env steps/s | async / sync "
        "| sync update samples/s | async update samples/s | sync cpu_s | async cpu_s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['grad_steps']} | {r['replay_ratio']:.0f} | {r['sync_env_steps_per_s']:,.0f} | "
            f"{r['async_env_steps_per_s']:,.0f} | "
            f"{r['async_env_steps_per_s'] / r['sync_env_steps_per_s']:.2f} | "
            f"{r['sync_update_samples_per_s']:,.0f} | {r['async_update_samples_per_s']:,.0f} | "
            f"{r['sync_cpu_s']:.1f} | {r['async_cpu_s']:.1f} |"
        )
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
