"""TD3 (Fujimoto et al., 2018): twin critics, clipped double-Q, smoothing, delayed updates.

The maths lives in :mod:`jaxspreeze.algos.deterministic`, shared with DDPG: TD3 is DDPG
with twin critics, target policy smoothing and actor and target updates delayed by
``policy_delay``.
"""

from __future__ import annotations

from typing import Any

from jaxspreeze.algos import base, deterministic
from jaxspreeze.algos.td3_config import (  # noqa: F401
    SPEC,
    TD3Config,
    grad_step_multiple,
    supports,
    validate,
)
from jaxspreeze.core.types import EnvSpec


def make(cfg: TD3Config, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind TD3 to its config, env spec and the run's per-iteration update sizes."""
    variant = deterministic.Variant(
        "td3",
        num_qs=2,
        smoothing=True,
        policy_delay=cfg.policy_delay,
        actor_q=cfg.actor_q,
        delay_targets=cfg.delay_targets,
    )
    return deterministic.make(cfg, spec, run, variant)


MEMBER_FIELDS = deterministic.TD3_MEMBER_FIELDS  # the fields a population may vary
