"""Time the actor/critic device split against the fused one-device program, here.

    JAX_NUM_CPU_DEVICES=2 python experiments/split_bench.py      # CPU: fake devices
    python experiments/split_bench.py --rounds 15 --label gpu2   # a 2-GPU machine

Measures, on this machine, with SAC (2x256 MLPs, batch 256, 8 envs, G=8 by default;
every timing blocks until ready, compile excluded, medians over interleaved rounds):

- ``iteration_fused``: one iteration of the fused single-device ``lax.scan`` chunk;
- ``iteration_dispatched_1dev``: the split's host-dispatched schedule on one device
  (the fused program cut at the split's seams: the cost of the cuts and the dispatch);
- ``iteration_split``: the split schedule on two devices (when there are two);
- the pieces, each alone: ``collect``, ``critic`` (store + G critic updates), ``actor``
  (obs store + G actor updates), and the two transfers (packed rollout + actor view +
  key to the critic device; packed critic view to the actor device).

It writes ``experiments/results/split_<label>.json`` and ``.md`` with the projected
speedup of the updates ``(t_actor + t_critic) / (max(t_actor, t_critic) + transfer)``
and of the iteration (collect included) next to the measured one. Fake CPU devices
share the same cores, so on CPU the measured split says nothing about two GPUs; the
projection from the per-side times is the figure to read there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import jax

from jaxspreeze import schedules
from jaxspreeze.bench.record import matmul_peak_flops, versions
from jaxspreeze.core.types import Placement
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

RESULTS = Path(__file__).resolve().parent / "results"


def make_config(args: argparse.Namespace) -> RunConfig:
    """The measured run: SAC 2x256, batch 256, 8 envs, G=8 unless overridden."""
    cfg = RunConfig(
        algo=args.algo,
        num_envs=args.num_envs,
        batch_size=args.batch_size,
        grad_steps=args.grad_steps,
        chunk_iterations=args.chunk_iterations,
        num_seeds=args.num_seeds,
        learning_starts=1000,
        placement="single",
    ).replace(sac={"hidden": tuple(args.hidden)})
    sizes = plan(cfg, on_devices=False)
    total = sizes.warmup_steps + 4 * args.chunk_iterations * sizes.steps_per_iteration
    return resolve(cfg.replace(total_steps=total))


class ChunkTimer:
    """A schedule, its state and one timed chunk per call (seconds per iteration)."""

    def __init__(self, cfg: RunConfig, placement: Placement, dispatched: bool):
        self.loop = schedules.make(plan(cfg, placement), dispatched=dispatched)
        state = self.loop.init()
        t0 = time.perf_counter()
        self.loop.compile(state)
        self.compile_s = time.perf_counter() - t0
        self.state = jax.block_until_ready(self.loop.warmup(state))

    def __call__(self) -> float:
        t0 = time.perf_counter()
        self.state, metrics = self.loop.chunk(self.state)
        jax.block_until_ready((self.state, metrics))
        return (time.perf_counter() - t0) / self.loop.iterations_per_chunk


class PieceTimer:
    """Each piece of a dispatched schedule alone: collect, critic, actor, the two transfers."""

    def __init__(self, timer: ChunkTimer):
        self.t = timer
        loop = timer.loop
        self.f, self.p = loop.pieces, loop.placement
        s = jax.tree.map(lambda x: x.copy(), timer.state)  # the chunk timer keeps its own
        self.actor, self.critic = s.agent
        self.env, self.key, self.buffer, self.obs = s.env, s.key, s.buffer, s.obs_buffer
        self.counters = (s.env_steps, s.iteration, s.actor_updates)
        self._collect()  # fills the rollout, packed and view used by the others
        self.view_c = self.f.critic_view(self.critic)  # critic device
        self.view = jax.device_put(self.view_c, self.p.actor)
        jax.block_until_ready(self.view)

    def _collect(self) -> None:
        es, it, au = self.counters
        out = self.f.collect(self.actor, self.env, self.key, es, it, au)
        self.env, self.key, es, it, self.packed, self.for_actor, _ = out
        self.counters = (es, it, au)
        self.packed_c = jax.device_put(self.packed, self.p.critic)
        jax.block_until_ready((self.env, self.packed_c))

    def timed(self, name: str) -> float:
        """Seconds of one call of piece ``name`` (blocked before and after)."""
        put, p = jax.device_put, self.p
        t0 = time.perf_counter()
        if name == "collect":
            es, it, au = self.counters
            out = self.f.collect(self.actor, self.env, self.key, es, it, au)
            jax.block_until_ready(out)
            self.env, self.key = out[0], out[1]
        elif name == "critic":
            out = self.f.critic(self.critic, self.buffer, self.packed_c)
            jax.block_until_ready(out)
            self.critic, self.buffer = out[0], out[1]
        elif name == "actor":
            out = self.f.actor(self.actor, self.obs, self.for_actor, self.view, self.counters[2])
            jax.block_until_ready(out)
            self.actor, self.obs = out[0], out[1]
        elif name == "to_critic":
            jax.block_until_ready(put(self.packed, p.critic))
        elif name == "to_actor":
            jax.block_until_ready(put(self.view_c, p.actor))
        else:
            raise ValueError(name)
        return time.perf_counter() - t0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """All timings, interleaved round by round; medians in seconds."""
    cfg = make_config(args)
    d = jax.devices()
    one = devices.single(d[0])
    timers: dict[str, ChunkTimer] = {
        "iteration_fused": ChunkTimer(cfg, one, dispatched=False),
        "iteration_dispatched_1dev": ChunkTimer(cfg, one, dispatched=True),
    }
    if len(d) >= 2:
        timers["iteration_split"] = ChunkTimer(cfg, devices.resolve("split"), dispatched=True)
    pieces = PieceTimer(timers["iteration_split" if len(d) >= 2 else "iteration_dispatched_1dev"])
    piece_names = ["collect", "critic", "actor", "to_critic", "to_actor"]
    peak_before = matmul_peak_flops(fresh=True)
    samples: dict[str, list[float]] = {k: [] for k in [*timers, *piece_names]}
    for name in timers:  # one untimed call each
        timers[name]()
    for _ in range(args.rounds):
        for name, timer in timers.items():
            samples[name].append(timer())
        for name in piece_names:
            samples[name].append(pieces.timed(name))
    peak_after = matmul_peak_flops(fresh=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "config": {
            "algo": cfg.algo,
            "env": cfg.env,
            "num_envs": cfg.num_envs,
            "batch_size": cfg.batch_size,
            "grad_steps": cfg.grad_steps,
            "hidden": list(getattr(cfg, cfg.algo).hidden),
            "chunk_iterations": cfg.chunk_iterations,
            "num_seeds": cfg.num_seeds,
            "rounds": args.rounds,
        },
        "median_s": med,
        "samples_s": samples,
        "compile_s": {k: t.compile_s for k, t in timers.items()},
        "matmul_peak_flops_per_s": {"before": peak_before, "after": peak_after},
        "actor_steps_per_iteration": timers["iteration_fused"].loop.algo.actor_steps_per_iteration,
        "critic_steps_per_iteration": timers[
            "iteration_fused"
        ].loop.algo.critic_steps_per_iteration,
    }


def summarise(r: dict[str, Any]) -> dict[str, Any]:
    """Projected and measured speedups, and the throughput of each schedule."""
    m, c = r["median_s"], r["config"]
    t_a, t_c, t_col = m["actor"], m["critic"], m["collect"]
    transfer = m["to_critic"] + m["to_actor"]
    out: dict[str, Any] = {
        "t_actor_s": t_a,
        "t_critic_s": t_c,
        "t_collect_s": t_col,
        "t_transfer_s": transfer,
        "projected_update_speedup": (t_a + t_c) / (max(t_a, t_c) + transfer),
        "projected_iteration_speedup": (t_col + t_a + t_c) / (t_col + max(t_a, t_c) + transfer),
        "fused_vs_sum_of_pieces": (t_col + t_a + t_c) / m["iteration_fused"],
        "measured_dispatched_1dev_speedup": m["iteration_fused"] / m["iteration_dispatched_1dev"],
    }
    if "iteration_split" in m:
        out["measured_split_speedup"] = m["iteration_fused"] / m["iteration_split"]
    seeds = c["num_seeds"]
    out["rates"] = {}
    for name in ("iteration_fused", "iteration_dispatched_1dev", "iteration_split"):
        if name in m:
            t = m[name]
            env_rate = c["num_envs"] * seeds / t
            upd_rate = c["batch_size"] * r["critic_steps_per_iteration"] * seeds / t
            out["rates"][name] = {
                "env_steps_per_s": env_rate,
                "update_samples_per_s": upd_rate,
                "grad_steps_per_s": {
                    "critic": r["critic_steps_per_iteration"] * seeds / t,
                    "actor": r["actor_steps_per_iteration"] * seeds / t,
                },
                "replay_ratio": upd_rate / env_rate,
                "policy_lag": r["actor_steps_per_iteration"],
            }
    return out


def markdown(r: dict[str, Any]) -> str:
    """The results as a short markdown report."""
    c, m, s, hw = r["config"], r["median_s"], r["summary"], r["hardware"]
    ms = lambda x: f"{1e3 * x:.2f} ms"
    lines = [
        f"# Device split vs fused, {r['label']}",
        "",
        f"{c['algo']} on {c['env']}: {c['num_envs']} envs, batch {c['batch_size']}, "
        f"G={c['grad_steps']}, hidden {c['hidden']}, K={c['chunk_iterations']}, "
        f"{c['num_seeds']} seed(s); medians of {c['rounds']} interleaved rounds, "
        f"compile excluded. Hardware: {hw['backend']} x{hw['device_count']} "
        f"({hw['cpu_count']} CPU cores), jax {hw['jax']}. Dense matmul peak now: "
        f"{r['matmul_peak_flops_per_s']['before'] / 1e9:.0f} / "
        f"{r['matmul_peak_flops_per_s']['after'] / 1e9:.0f} GFLOP/s (before / after).",
        "",
        "| piece | median |",
        "|---|---|",
        *[f"| {k} | {ms(v)} |" for k, v in m.items()],
        "",
        "| figure | value |",
        "|---|---|",
        f"| projected update speedup (t_a + t_c) / (max + transfer) | "
        f"{s['projected_update_speedup']:.2f}x |",
        f"| projected iteration speedup (collect included) | "
        f"{s['projected_iteration_speedup']:.2f}x |",
        f"| measured split speedup (fused / split iteration) | "
        f"{s.get('measured_split_speedup', float('nan')):.2f}x |",
        f"| dispatched on 1 device vs fused | {s['measured_dispatched_1dev_speedup']:.2f}x |",
        f"| sum of pieces / fused iteration | {s['fused_vs_sum_of_pieces']:.2f} |",
        "",
        "| schedule | env steps/s | update samples/s | replay ratio | policy lag |",
        "|---|---|---|---|---|",
        *[
            f"| {k} | {v['env_steps_per_s']:,.0f} | {v['update_samples_per_s']:,.0f} | "
            f"{v['replay_ratio']:.0f} | {v['policy_lag']} |"
            for k, v in s["rates"].items()
        ],
        "",
    ]
    if hw["backend"] == "cpu":
        lines += [
            "Fake CPU devices (JAX_NUM_CPU_DEVICES) share the same cores: the measured split "
            "speedup here says nothing about two GPUs. Read the projection, which assumes "
            "each side gets a device of its own.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and write the JSON and markdown results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", default="sac")
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--grad-steps", type=int, default=8)
    ap.add_argument("--chunk-iterations", type=int, default=10)
    ap.add_argument("--num-seeds", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--label", default="")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    hw = devices.describe_hardware()
    label = args.label or f"{hw['backend']}{hw['device_count']}"
    r = measure(args)
    r.update(label=label, hardware=hw, versions=versions(), summary=summarise(r))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"split_{label}.json").write_text(json.dumps(r, indent=2))
    (out / f"split_{label}.md").write_text(markdown(r))
    print(markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
