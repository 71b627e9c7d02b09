"""Placement resolution and chunking on one device.

The compiled schedules are tested in test_split.py, whose two-device worker runs the fused
one-device chunk too (each chunk program traced and compiled once, counted with JAX's
own compile events; the staleness rule restated by hand, the policy lag, the counters):
one set of compiles serves both.
"""

from __future__ import annotations

import jax
import pytest

from jaxspreeze.core.errors import ConfigError
from jaxspreeze.schedules import chunking
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan


def test_auto_is_single_on_one_device():
    assert len(jax.devices()) == 1
    assert not devices.resolve("auto").split
    assert not devices.resolve("single").split


def test_split_on_one_device_fails_clearly():
    with pytest.raises(ConfigError, match="split needs 2 devices") as e:
        devices.resolve("split")
    assert e.value.field == "placement"
    with pytest.raises(ConfigError, match="choose auto, single or split"):
        devices.resolve("both")  # type: ignore[arg-type]


@pytest.mark.parametrize(("iters", "k"), [(1, 250), (10, 3), (250, 250), (251, 250)])
def test_chunking_covers_the_run(iters, k):
    cfg = resolve(
        RunConfig(
            total_steps=iters * 8 + 1000,
            num_envs=8,
            rollout_steps=1,
            learning_starts=1000,
            chunk_iterations=k,
        )
    )
    per_chunk, chunks = chunking(plan(cfg, on_devices=False))
    assert per_chunk <= k
    assert iters <= per_chunk * chunks < iters + chunks
