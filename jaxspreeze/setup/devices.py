"""Devices: resolve the placement, name the hardware.

A :class:`~jaxspreeze.core.types.Placement` says which device holds the actor side, the
critic side and the evaluator (and, for data parallelism, the mesh of every device of
every process). This is the only module that calls ``jax.devices()``.
"""

from __future__ import annotations

import os
import platform
from typing import Literal

import jax
import numpy as np

from jaxspreeze.core.errors import PlacementError
from jaxspreeze.core.types import DATA_AXIS, Placement

Mode = Literal["auto", "single", "split", "data", "split-data"]
MODES = ("auto", "single", "split", "data", "split-data")


def single(device: jax.Device | None = None) -> Placement:
    """Everything on one device (the default device if none is given)."""
    device = device or jax.devices()[0]
    return Placement(device, device, device)


def data_parallel(devices: list[jax.Device] | None = None) -> Placement:
    """Data parallelism over ``devices`` (default: every device of every process).

    The mesh lists the devices in ``jax.devices()`` order (process by process), so shard
    i lives on the same device index whatever the process layout; this process's first
    device holds its evaluator.
    """
    devices = list(jax.devices() if devices is None else devices)
    local = [d for d in devices if d.process_index == jax.process_index()]
    if not local:
        raise PlacementError("a data-parallel mesh must include a device of this process")
    mesh = jax.sharding.Mesh(np.array(devices), (DATA_AXIS,))
    return Placement(local[0], local[0], local[0], mesh)


def split_data_parallel(devices: list[jax.Device] | None = None) -> Placement:
    """The split composed with data parallelism over ``devices`` (default: all of them).

    Each process's devices (in ``jax.devices()`` order) are cut in two halves: the first
    carry the actor side, the second the critic side, and device i of one half is paired
    with device i of the other (their transfers stay inside the process). With 2k
    devices in all, both sides are data-parallel over k. PlacementError (a ConfigError
    naming ``placement``: exit 2) unless every process has an even number of them.
    """
    devices = list(jax.devices() if devices is None else devices)
    actor: list[jax.Device] = []
    critic: list[jax.Device] = []
    for process in sorted({d.process_index for d in devices}):
        mine = [d for d in devices if d.process_index == process]
        if len(mine) % 2:
            raise PlacementError(
                f"split-data pairs an actor-side with a critic-side device in each process, "
                f"but process {process} has {len(mine)} {mine[0].platform} device(s); give "
                "every process an even number of devices (on CPU, JAX_NUM_CPU_DEVICES=4 "
                "fakes four), or use --placement data or split",
            )
        actor += mine[: len(mine) // 2]
        critic += mine[len(mine) // 2 :]
    here = jax.process_index()
    local = [d for d in actor if d.process_index == here]
    local_critic = [d for d in critic if d.process_index == here]
    if not local:
        raise PlacementError("a split-data placement must include a device of this process")
    return Placement(
        local[0],
        local_critic[0],
        local[0],
        jax.sharding.Mesh(np.array(actor), (DATA_AXIS,)),
        jax.sharding.Mesh(np.array(critic), (DATA_AXIS,)),
    )


def resolve(mode: Mode = "auto") -> Placement:
    """The placement for ``mode`` on the default backend.

    ``auto`` is data-parallel in a multi-process run, else splits when there are at least
    two devices. ``split`` puts the actor on device 0, the critic on device 1 and the
    evaluator on device 2 when there is one (else on the actor's device). ``data`` is
    data-parallel over every device of every process (:func:`data_parallel`); ``split-data``
    the actor/critic split with each side data-parallel over half of them
    (:func:`split_data_parallel`). ``auto`` never picks ``split-data``: it changes the
    per-device sizes and needs an even device count, so it is asked for.
    """
    if mode not in MODES:
        raise PlacementError(
            f"unknown mode {mode!r}; choose auto, single or split, data (data-parallel) or "
            "split-data"
        )
    if mode == "split-data":
        return split_data_parallel()
    if mode == "data" or (mode == "auto" and jax.process_count() > 1):
        return data_parallel()
    if jax.process_count() > 1:
        raise PlacementError(
            f"a multi-process run ({jax.process_count()} processes) is data-parallel: "
            f"use --placement data, split-data or auto, not {mode}"
        )
    devices = jax.devices()
    if mode == "single" or (mode == "auto" and len(devices) < 2):
        return single(devices[0])
    if len(devices) < 2:
        raise PlacementError(
            f"split needs 2 devices but the {devices[0].platform} backend has "
            f"{len(devices)}; use --placement single or auto (on CPU, "
            "JAX_NUM_CPU_DEVICES=2 fakes two devices, for testing only)"
        )
    eval_device = devices[2] if len(devices) > 2 else devices[0]
    return Placement(devices[0], devices[1], eval_device)


def device_count() -> int:
    """Number of devices of the default backend (of every process)."""
    return len(jax.devices())


def describe_hardware() -> dict[str, object]:
    """Backend, device kinds and count (and processes), for throughput records."""
    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in devices],
        "device_count": len(devices),
        "process_count": jax.process_count(),
        "local_device_count": jax.local_device_count(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
    }
