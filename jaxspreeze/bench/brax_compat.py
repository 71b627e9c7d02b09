"""Let brax 0.14's training agents run on jax >= 0.10 (benchmark-only shim).

brax.training.agents.{sac,ppo}.train call ``jax.device_put_replicated``, which jax 0.10
removed. :func:`install` puts back an equivalent (an identity ``jax.pmap`` over stacked
copies). It changes nothing when jax still has the
function, and only the benchmark references call it: jax is never pinned for brax.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp


def device_put_replicated(x: Any, devices: Sequence[jax.Device]) -> Any:
    """Stack ``len(devices)`` copies of every leaf of ``x``, one copy per device.

    The copies go through an identity ``jax.pmap`` so that they carry the very sharding
    pmap's own outputs carry: brax feeds a training epoch's outputs back into it, and a
    different input sharding would make its second call compile again.
    """
    devices = list(devices)
    stacked = jax.tree.map(lambda leaf: jnp.stack([jnp.asarray(leaf)] * len(devices)), x)
    return jax.pmap(lambda tree: tree, devices=devices)(stacked)


def install() -> bool:
    """Add ``jax.device_put_replicated`` if jax lacks it; True when the shim was installed."""
    if hasattr(jax, "device_put_replicated"):
        return False
    jax.device_put_replicated = device_put_replicated  # type: ignore[attr-defined]
    return True
