"""Devices: resolve the placement, name the hardware.

A :class:`~jaxspreeze.types.Placement` says which device holds the actor side, the
critic side and the evaluator (and, for data parallelism, the mesh of every device of
every process). This is the only module that calls ``jax.devices()``.
"""

from __future__ import annotations

import os
import platform
from typing import Literal

import jax
import numpy as np

from jaxspreeze.errors import PlacementError
from jaxspreeze.types import DATA_AXIS, Placement

Mode = Literal["auto", "single", "split", "data"]


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


def resolve(mode: Mode = "auto") -> Placement:
    """The placement for ``mode`` on the default backend.

    ``auto`` is data-parallel in a multi-process run, else splits when there are at least
    two devices. ``split`` puts the actor on device 0, the critic on device 1 and the
    evaluator on device 2 when there is one (else on the actor's device). ``data`` is
    data-parallel over every device of every process (:func:`data_parallel`).
    """
    if mode not in ("auto", "single", "split", "data"):
        raise PlacementError(
            f"unknown mode {mode!r}; choose auto, single or split, or data (data-parallel)"
        )
    if mode == "data" or (mode == "auto" and jax.process_count() > 1):
        return data_parallel()
    if jax.process_count() > 1:
        raise PlacementError(
            f"a multi-process run ({jax.process_count()} processes) is data-parallel: "
            f"use --placement data or auto, not {mode}"
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
