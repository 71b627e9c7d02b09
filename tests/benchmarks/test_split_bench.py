"""The training chunk with the single and the split placement (opt-in: ``-m benchmark``).

    JAX_NUM_CPU_DEVICES=2 pytest -n 0 -m benchmark tests/benchmarks/test_split_bench.py \\
        --benchmark-enable --benchmark-json out.json

The split case needs two devices (skipped otherwise). Fake CPU devices share the same
cores: on CPU these figures prove the schedule runs, not that it is faster; see
experiments/split_bench.py for the per-side times and the projected speedup.
"""

from __future__ import annotations

import os
import statistics
import time

import jax
import pytest

from jaxspreeze import schedules
from jaxspreeze.bench.record import Workload, throughput_record
from jaxspreeze.schedules import Schedule
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

pytestmark = pytest.mark.benchmark

ROUNDS = int(os.environ.get("JAXSPREEZE_BENCH_ROUNDS", "5"))
WARMUP = int(os.environ.get("JAXSPREEZE_BENCH_WARMUP", "1"))
K = 8


def workload(placement: str) -> tuple[Workload, Schedule]:
    """One chunk of SAC (2x256, batch 256, 8 envs, G=8) with ``placement``."""
    if placement == "split" and len(jax.devices()) < 2:
        pytest.skip("the split needs two devices (JAX_NUM_CPU_DEVICES=2 on CPU)")
    cfg = RunConfig(chunk_iterations=K, placement=placement).replace(sac={"hidden": (256, 256)})
    sizes = plan(cfg, on_devices=False)
    cfg = resolve(cfg.replace(total_steps=sizes.warmup_steps + 4 * K * sizes.steps_per_iteration))
    loop = schedules.make(plan(cfg, devices.resolve(placement)))
    state = loop.init()
    t0 = time.perf_counter()
    loop.compile(state)
    compile_s = time.perf_counter() - t0
    holder = [jax.block_until_ready(loop.warmup(state))]

    def run() -> None:
        holder[0], metrics = loop.chunk(holder[0])
        jax.block_until_ready((holder[0], metrics))

    k, s, algo = loop.iterations_per_chunk, cfg.num_seeds, loop.algo
    w = Workload(
        name=f"chunk[sac-{placement}]",
        run=run,
        env_steps=k * sizes.steps_per_iteration * s,
        update_samples=k * algo.critic_steps_per_iteration * s * cfg.batch_size,
        grad_steps={
            "critic": k * algo.critic_steps_per_iteration * s,
            "actor": k * algo.actor_steps_per_iteration * s,
        },
        compile_s=compile_s,
        policy_lag=float(loop.policy_lag),
        params={"kind": "chunk", "placement": loop.placement.describe(), "chunk_iterations": k},
    )
    return w, loop


@pytest.mark.parametrize("placement", ["single", "split"])
def test_chunk_placement(benchmark, placement) -> None:
    """Env steps/s, update samples/s, grad steps/s, replay ratio and policy lag per chunk."""
    w, _ = workload(placement)
    benchmark.pedantic(w.run, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        times = list(stats.stats.data)
    else:  # --benchmark-disable: time one call here
        w.run()
        t0 = time.perf_counter()
        w.run()
        times = [time.perf_counter() - t0]
    record = throughput_record(w, statistics.median(times), None, times)
    benchmark.extra_info.update(record)
    assert record["env_steps_per_s"] > 0
    assert record["policy_lag"] == 8.0
    for field in (
        "env_steps_per_s",
        "update_samples_per_s",
        "grad_steps_per_s",
        "replay_ratio",
        "policy_lag",
        "compile_s",
        "hardware",
    ):
        assert field in benchmark.extra_info
