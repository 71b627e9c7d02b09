"""The host-env probes: the sampling workers over workers x num_envs, the learner over batches.

For ``gymnasium/<id>`` and ``envpool/<task>`` runs (the host schedule,
:class:`~jaxspreeze.schedules.HostAsync`) the envs step on the host CPU in W worker
threads (:class:`~jaxspreeze.host.workers.WorkerPool`) while the learner updates on the
device, at the target replay ratio. :class:`HostProber` measures both sides:

- **sampling** (:meth:`HostProber.host_sampling`): a worker pool with W workers over n
  envs (n / W each), the algorithm's stochastic policy in the loop (jitted, compiled apart
  and reported as compile time), a consumer taking its blocks as the learner does: env
  steps delivered per second over ``REPS`` windows of ``HOST_REP_S`` after a warm-up of
  ``HOST_WARM_S`` (env resets, first calls); the rate is their median. Nothing else runs
  meanwhile: on a machine where the learner shares the CPU with the workers, the run's
  sampling is slower than this.
- **update**: the learner's critic-then-actor step over batch sizes, the device path's
  probe (:meth:`~jaxspreeze.autotune.probes.RealProber.update`).

:func:`plan_host_grids` lays out the grids: worker counts 1, 2, 4, ... up to the CPU count
(at most ``MAX_WORKERS``), and for each the device path's num_envs grid (n0, 4 n0, ... up
to the learning guards' bound) restricted to multiples of W.
"""

from __future__ import annotations

import os
import statistics
import time

import jax

from jaxspreeze import schedules
from jaxspreeze.autotune.choose import Point
from jaxspreeze.autotune.grid import geometric, plan_grids
from jaxspreeze.autotune.probes import REPS, RealProber
from jaxspreeze.data import replay
from jaxspreeze.host.workers import ParamSlot, WorkerPool
from jaxspreeze.schedules.host_async import AHEAD_ITERATIONS, QUEUE_BLOCKS
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

CHECK_S = 3.0  # seconds the check of the choice trains (after its first chunk)
CHECK_CHUNK_S = 0.5  # seconds per chunk in the check (the first one is not timed)
HOST_REP_S = 0.2  # seconds per timed window of a sampling point
HOST_WARM_S = 0.2  # untimed seconds before the windows (resets, first policy calls)
MAX_WORKERS = 16  # the largest worker count the grid tries
PROBE_STALL_S = 30.0  # a probe's worker silent this long is reported as stalled


def worker_grid(cfg: RunConfig, pinned: set[str], cpus: int | None = None) -> list[int]:
    """Worker counts to try: 1, 2, 4, ... up to the CPU count (or the pinned count)."""
    cfg = config.resolve(cfg)
    if "host_workers" in pinned:
        return [cfg.host_workers]
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return geometric(1, 2, max(1, min(cpus, MAX_WORKERS)))


def plan_host_grids(
    cfg: RunConfig, pinned: set[str], cpus: int | None = None
) -> tuple[dict[int, list[int]], list[int]]:
    """``{workers: [num_envs, ...]}`` and the batch grid for a host-env run.

    The num_envs values are the device path's (:func:`~jaxspreeze.autotune.grid.plan_grids`),
    each at least W and a multiple of it; a worker count left with none is dropped (a
    pinned num_envs keeps only the counts that divide it).
    """
    env_values, batches = plan_grids(cfg, pinned)
    grids: dict[int, list[int]] = {}
    for w in worker_grid(cfg, pinned, cpus):
        values = [n for n in env_values if n >= w and n % w == 0]
        if values:
            grids[w] = values
    if not grids:  # a pinned num_envs that no worker count divides: 1 worker always does
        grids[1] = env_values
    return grids, batches


class HostProber(RealProber):
    """Times the host path: the worker pool's sampling and the learner's update step."""

    def sampling_bytes(self, num_envs: int) -> int:
        """Device memory of sampling: the blocks in flight to the learner and the policy."""
        blocks = AHEAD_ITERATIONS + QUEUE_BLOCKS + 1
        rows = num_envs * self.cfg.rollout_steps * blocks
        return replay.nbytes(self.example, rows) + 4 * num_envs * self.width * 4

    def sampling(self, num_envs: int) -> Point | None:
        """env steps/s with one worker (the Prober protocol); see :meth:`host_sampling`."""
        return self.host_sampling(1, num_envs)

    def host_sampling(self, workers: int, num_envs: int) -> Point | None:
        """env steps/s delivered by ``workers`` threads over ``num_envs`` envs, policy in the loop."""
        cfg = self.cfg
        t_start = time.perf_counter()
        actor = self._agent(self.placement.actor).actor
        slot = ParamSlot(device=self.placement.actor)
        slot.publish(actor, 0)
        algo = self._algo0
        pool = WorkerPool(
            cfg.env,
            lambda params, carry, obs, key: algo.act(params, carry, obs, key, False),
            slot,
            num_workers=workers,
            envs_per_worker=num_envs // workers,
            rollout_steps=cfg.rollout_steps,
            queue_size=QUEUE_BLOCKS,
            seed=cfg.seed,
            key=jax.random.key(cfg.seed + 1),
            stall_timeout=PROBE_STALL_S,
            initial_carry=algo.initial_carry,
        )
        try:
            t0 = time.perf_counter()
            pool.compile()
            compile_s = time.perf_counter() - t0
            pool.start()
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < HOST_WARM_S:
                pool.get(timeout=PROBE_STALL_S)
            rates, block_s = [], []
            for _ in range(REPS):
                steps, blocks, t0 = 0, 0, time.perf_counter()
                while True:
                    steps += pool.get(timeout=PROBE_STALL_S).env_steps
                    blocks += 1
                    dt = time.perf_counter() - t0
                    if dt >= HOST_REP_S:
                        break
                rates.append(steps / dt)
                block_s.append(dt / blocks)
        finally:
            pool.close()
        return Point(
            num_envs,
            statistics.median(rates),
            compile_s,
            statistics.median(block_s),
            num_envs * cfg.rollout_steps,
            rates,
            self.sampling_bytes(num_envs),
            0,
            time.perf_counter() - t_start,
            workers,
        )

    def host_run(self, run: RunConfig, iteration_s: float, seconds: float = CHECK_S) -> dict:
        """Env steps/s of the host schedule itself at ``run``'s sizes: the check of a choice.

        A short training run (the trainer's schedule, :class:`~jaxspreeze.schedules.HostAsync`,
        without a run directory): compile (timed apart), a warm-up of one batch, one
        untimed chunk, then chunks of about CHECK_CHUNK_S (``iteration_s``: the predicted
        seconds per iteration) for ``seconds``. It measures what the probes leave out:
        the learner's work per iteration and the workers and the learner sharing the CPU.
        """
        spi = plan(run, self.placement).steps_per_iteration
        k = max(1, round(CHECK_CHUNK_S / max(iteration_s, 1e-6)))
        warmup = max(run.batch_size, spi)
        run = run.replace(
            learning_starts=warmup,
            chunk_iterations=k,
            total_steps=warmup + 10**6 * spi,
        )
        schedule = schedules.make(plan(run, self.placement))
        try:
            state = schedule.init()
            t0 = time.perf_counter()
            schedule.compile(state)
            compile_s = time.perf_counter() - t0
            state = schedule.warmup(state)
            state = jax.block_until_ready(schedule.chunk(state)[0])
            chunks, t0 = 0, time.perf_counter()
            while chunks == 0 or time.perf_counter() - t0 < seconds:
                state, _ = schedule.chunk(state)
                state = jax.block_until_ready(state)
                chunks += 1
            elapsed = time.perf_counter() - t0
        finally:
            schedule.close()
        steps = chunks * schedule.iterations_per_chunk * spi
        return {
            "env_steps_per_s": steps / elapsed,
            "seconds": elapsed,
            "compile_s": compile_s,
            "chunk_iterations": schedule.iterations_per_chunk,
        }

    def retime(self, kind: str, value: int) -> list[float]:
        """More repetitions of an update point (sampling points are not kept running)."""
        if kind != "update":
            raise ValueError("host sampling points are measured once (their pools are closed)")
        return super().retime(kind, value)
