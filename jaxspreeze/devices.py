"""Placement: which device holds the actor side, the critic side and the evaluator.

This is the only module that calls ``jax.devices()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import jax

from jaxspreeze.errors import PlacementError


@dataclass(frozen=True)
class Placement:
    """Devices for the actor side (envs, policy, obs buffer), critic side (buffer) and eval."""

    actor: jax.Device
    critic: jax.Device
    eval: jax.Device

    @property
    def split(self) -> bool:
        """True when the actor and the critic live on different devices."""
        return self.actor != self.critic

    def describe(self) -> str:
        """One line naming the devices."""
        if not self.split:
            return f"single device {self.actor}"
        return f"split: actor on {self.actor}, critic on {self.critic}, eval on {self.eval}"


def single(device: jax.Device | None = None) -> Placement:
    """Everything on one device (the default device if none is given)."""
    device = device or jax.devices()[0]
    return Placement(device, device, device)


def resolve(mode: Literal["auto", "single", "split"] = "auto") -> Placement:
    """The placement for ``mode`` on the default backend.

    ``auto`` splits when there are at least two devices. ``split`` puts the actor on
    device 0, the critic on device 1 and the evaluator on device 2 when there is one
    (else on the actor's device).
    """
    if mode not in ("auto", "single", "split"):
        raise PlacementError(f"unknown mode {mode!r}; choose auto, single or split")
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
    """Number of devices of the default backend."""
    return len(jax.devices())


def describe_hardware() -> dict[str, object]:
    """Backend, device kinds and count, for throughput records."""
    devices = jax.devices()
    import os
    import platform

    return {
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in devices],
        "device_count": len(devices),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
    }
