"""Schedules: ways to run the same training iteration on the devices, chunk by chunk.

- :class:`Fused` (one device): ``scan(vmap(iteration))``, one program per chunk.
- :class:`Split` (two devices, or one for measuring the pieces): the host dispatches
  collect, the critic side and the actor side of every iteration to their devices.
- :class:`HostAsync` (host envs, ``gymnasium/<id>`` and ``envpool/<task>``, off-policy):
  sampling worker threads step the envs while the learner updates from the replay buffer.
- :class:`HostRollout` (host envs, on-policy: PPO): the workers collect rollout k+1 with
  the parameters one version behind while the learner trains on rollout k.
- :class:`DataParallel` (a mesh of every device of every process): the fused chunk on
  every device, each with its own envs and replay shard, gradients averaged.
- :class:`SplitDataParallel` (``split-data``: 2k devices): the split's pieces with each
  side data-parallel over k devices, each actor-side device paired with a critic-side one.

Every schedule has the same API: ``init``, ``place``, ``warmup``, ``compile``, ``chunk``,
and the attributes ``cfg placement algo env iterations_per_chunk num_chunks split
policy_lag host`` (``cfg`` and ``placement`` are the run plan's), and ``close()`` (the
host schedule's workers). :func:`make` builds the one a
:class:`~jaxspreeze.setup.plan.RunPlan` names (its ``schedule``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxspreeze.algos.base import Algorithm
from jaxspreeze.schedules.base import Schedule, chunking
from jaxspreeze.schedules.data_parallel import DataParallel
from jaxspreeze.schedules.fused import Fused
from jaxspreeze.schedules.host_async import HostAsync
from jaxspreeze.schedules.host_rollout import HostRollout
from jaxspreeze.schedules.split import Split
from jaxspreeze.schedules.split_data_parallel import SplitDataParallel

if TYPE_CHECKING:
    from jaxspreeze.setup.plan import RunPlan

__all__ = [
    "DataParallel",
    "Fused",
    "HostAsync",
    "HostRollout",
    "Schedule",
    "Split",
    "SplitDataParallel",
    "chunking",
    "make",
]


def make(plan: RunPlan, algo: Algorithm | None = None, dispatched: bool | None = None) -> Schedule:
    """The schedule of ``plan`` (a plan with a placement: ``plan.schedule`` names it).

    ``dispatched`` runs the split's host-dispatched schedule (default: exactly when the
    placement splits); on one device it is the fused program cut at the split's seams.
    A placement with a mesh (``devices.resolve("data")``) runs :class:`DataParallel`,
    one with an actor and a critic mesh (``devices.resolve("split-data")``)
    :class:`SplitDataParallel`; a host env (``gymnasium/...``, ``envpool/...``) runs
    :class:`HostAsync` (off-policy; its learner splits on a split placement) or
    :class:`HostRollout` (on-policy; also for a custom ``algo`` that is on-policy).
    """
    placement, kind = plan.placement, plan.schedule
    if placement is None:
        raise ValueError("a schedule runs a plan with a placement: plan(cfg) or plan.placed(p)")
    if kind in ("host-async", "host-rollout"):
        if placement.data_parallel or dispatched:
            raise ValueError(
                "host envs run a host schedule (HostAsync, HostRollout): not data-parallel, "
                "nor the device-env split (HostAsync splits its learner on a split placement)"
            )
        on_policy = algo.on_policy if algo is not None else plan.on_policy
        schedule = HostRollout if on_policy else HostAsync
        return schedule(plan, algo, stall_timeout=plan.cfg.host_stall_timeout_s)
    if kind == "split-data":
        if dispatched is False:
            raise ValueError("the split-data schedule is dispatched by the host")
        return SplitDataParallel(plan, algo)
    if kind == "data":
        if dispatched:
            raise ValueError("the data-parallel schedule is one fused program per chunk")
        return DataParallel(plan, algo)
    if dispatched is None:
        dispatched = kind == "split"
    if dispatched:
        return Split(plan, algo)
    if kind == "split":
        raise ValueError("the fused chunk runs on one device; a split placement is dispatched")
    return Fused(plan, algo)
