"""Where the fused one-device SAC iteration spends its time, A/B in one process.

    python experiments/profile_fused.py --rounds 20

Times, interleaved round by round (medians, compile excluded, each call blocked):
the fused chunk (per iteration), collect alone, the critic side alone (store + G
updates), the actor side alone (G updates), the bare reference SAC update of
jaxspreeze/bench/references.py (G steps of critic + actor + temperature + target on one
shared batch, plain optax/flax, no metrics) and a 1024^3 matmul (the machine's dense
peak at that moment). Writes experiments/results/profile_fused_<backend>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxspreeze import schedules
from jaxspreeze.bench import references
from jaxspreeze.bench.record import versions
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Measure and write the profile."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--chunk-iterations", type=int, default=4)
    ap.add_argument("--out-dir", default=str(ROOT / "experiments" / "results"))
    args = ap.parse_args(argv)
    k = args.chunk_iterations
    cfg = RunConfig(chunk_iterations=k, placement="single").replace(sac={"hidden": (256, 256)})
    sizes = plan(cfg, on_devices=False)
    cfg = resolve(cfg.replace(total_steps=sizes.warmup_steps + 4 * k * sizes.steps_per_iteration))
    g, b = cfg.grad_steps, cfg.batch_size
    one = devices.single()

    fused = schedules.make(plan(cfg, one))
    s = fused.init()
    fused.compile(s)
    s = jax.block_until_ready(fused.warmup(s))
    pieces = schedules.make(plan(cfg, one), dispatched=True)  # the fused program cut at the seams
    p = pieces.init()
    pieces.compile(p)
    p = jax.block_until_ready(pieces.warmup(p))
    f = pieces.pieces
    es, it, au = p.env_steps, p.iteration, p.actor_updates
    env, key, _, _, packed, for_actor, _ = jax.block_until_ready(
        f.collect(p.agent.actor, p.env, p.key, es, it, au)
    )
    view = jax.block_until_ready(f.critic_view(p.agent.critic))
    ref = references.sac_update(b, g, hidden=cfg.sac.hidden)
    a = jnp.ones((1024, 1024), jnp.float32)
    mm = jax.jit(jnp.matmul).lower(a, a).compile()
    st = {"s": s, "p": p, "env": env, "key": key}

    def run_fused() -> float:
        t0 = time.perf_counter()
        st["s"], m = fused.chunk(st["s"])
        jax.block_until_ready((st["s"], m))
        return (time.perf_counter() - t0) / k

    def run_collect() -> float:
        q = st["p"]
        t0 = time.perf_counter()
        out = f.collect(q.agent.actor, st["env"], st["key"], es, it, au)
        jax.block_until_ready(out)
        st["env"], st["key"] = out[0], out[1]
        return time.perf_counter() - t0

    def run_critic() -> float:
        q = st["p"]
        t0 = time.perf_counter()
        out = f.critic(q.agent.critic, q.buffer, packed)
        jax.block_until_ready(out)
        st["p"] = q._replace(agent=q.agent._replace(critic=out[0]), buffer=out[1])
        return time.perf_counter() - t0

    def run_actor() -> float:
        q = st["p"]
        t0 = time.perf_counter()
        out = f.actor(q.agent.actor, q.obs_buffer, for_actor, view, au)
        jax.block_until_ready(out)
        st["p"] = q._replace(agent=q.agent._replace(actor=out[0]), obs_buffer=out[1])
        return time.perf_counter() - t0

    def run_ref() -> float:
        t0 = time.perf_counter()
        ref.run()
        return time.perf_counter() - t0

    def run_mm() -> float:
        t0 = time.perf_counter()
        mm(a, a).block_until_ready()
        return time.perf_counter() - t0

    cases = {
        "fused_iteration": run_fused,
        "collect": run_collect,
        "critic_side": run_critic,
        "actor_side": run_actor,
        "reference_update": run_ref,
        "matmul_1024": run_mm,
    }
    for fn in cases.values():
        fn()
    samples: dict[str, list[float]] = {n: [] for n in cases}
    for _ in range(args.rounds):
        for n, fn in cases.items():
            samples[n].append(fn())
    med = {n: statistics.median(v) for n, v in samples.items()}
    peak = 2 * 1024**3 / med["matmul_1024"]
    ref_flops = ref.flops  # G steps
    per_sample = ref_flops / (g * b) if ref_flops else None
    upd = lambda t: g * b / t
    result = {
        "config": {"grad_steps": g, "batch_size": b, "num_envs": cfg.num_envs, "K": k},
        "median_s": med,
        "samples_s": samples,
        "matmul_peak_flops_per_s": peak,
        "flops_per_update_sample": per_sample,
        "ceiling_update_samples_per_s": peak / per_sample if per_sample else None,
        "update_samples_per_s": {
            "fused_iteration": upd(med["fused_iteration"]),
            "critic_plus_actor_alone": upd(med["critic_side"] + med["actor_side"]),
            "reference_update": upd(med["reference_update"]),
        },
        "sum_of_pieces_over_fused": (med["collect"] + med["critic_side"] + med["actor_side"])
        / med["fused_iteration"],
        "hardware": devices.describe_hardware(),
        "versions": versions(),
    }
    ceiling = result["ceiling_update_samples_per_s"]
    if ceiling:
        result["fraction_of_ceiling"] = {
            n: v / ceiling for n, v in result["update_samples_per_s"].items()
        }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"profile_fused_{result['hardware']['backend']}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# Fused one-device SAC iteration: where the time goes",
        "",
        f"G={g}, batch {b}, {cfg.num_envs} envs, 2x256; medians of {args.rounds} "
        "interleaved rounds, compile excluded.",
        "",
        "| piece | median |",
        "|---|---|",
        *[f"| {n} | {1e3 * v:.2f} ms |" for n, v in med.items()],
        "",
        f"Dense matmul now: {peak / 1e9:.0f} GFLOP/s; "
        f"{(per_sample or 0) / 1e6:.2f} MFLOP per update sample; ceiling "
        f"{(ceiling or 0):,.0f} update samples/s.",
        "",
        "| schedule | update samples/s | fraction of ceiling |",
        "|---|---|---|",
        *[
            f"| {n} | {v:,.0f} | {result.get('fraction_of_ceiling', {}).get(n, float('nan')):.2f} |"
            for n, v in result["update_samples_per_s"].items()
        ],
        "",
        f"(collect + critic + actor alone) / fused iteration = "
        f"{result['sum_of_pieces_over_fused']:.2f}",
        "",
    ]
    (out / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
