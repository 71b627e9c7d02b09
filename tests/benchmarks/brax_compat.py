"""Let brax 0.14's training agents run on jax >= 0.10 (benchmark-only shim).

brax.training.agents.{sac,ppo}.train call ``jax.device_put_replicated``, which jax 0.10
removed. :func:`install` puts back an equivalent built on ``jax.device_put`` with a
``NamedSharding`` over the given devices. It changes nothing when jax still has the
function, and it is never imported by the library: jax is never pinned for brax.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def device_put_replicated(x: Any, devices: Sequence[jax.Device]) -> Any:
    """Stack ``len(devices)`` copies of every leaf of ``x``, one copy per device."""
    devices = list(devices)
    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))

    def put(leaf: Any) -> jax.Array:
        stacked = jnp.stack([jnp.asarray(leaf)] * len(devices))
        return jax.device_put(stacked, sharding)

    return jax.tree.map(put, x)


def install() -> bool:
    """Add ``jax.device_put_replicated`` if jax lacks it; True when the shim was installed."""
    if hasattr(jax, "device_put_replicated"):
        return False
    jax.device_put_replicated = device_put_replicated  # type: ignore[attr-defined]
    return True
