"""DDPG (Lillicrap et al., 2016): deterministic actor, one critic, target networks.

The maths lives in :mod:`jaxspreeze.algos.deterministic`, shared with TD3: DDPG is its
variant with one critic, no target smoothing and no delayed updates.
"""

from __future__ import annotations

from typing import Any

from jaxspreeze.algos import base, deterministic
from jaxspreeze.algos.ddpg_config import SPEC, DDPGConfig, supports, validate  # noqa: F401
from jaxspreeze.core.types import EnvSpec

VARIANT = deterministic.Variant("ddpg")


def make(cfg: DDPGConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind DDPG to its config, env spec and the run's per-iteration update sizes."""
    return deterministic.make(cfg, spec, run, VARIANT)


MEMBER_FIELDS = deterministic.MEMBER_FIELDS  # the fields a population may vary
