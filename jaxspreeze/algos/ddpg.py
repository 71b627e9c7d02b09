"""DDPG (Lillicrap et al., 2016): deterministic actor, one critic, target networks.

The maths lives in :mod:`jaxspreeze.algos.deterministic`, shared with TD3: DDPG is its
variant with one critic, no target smoothing and no delayed updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxspreeze.algos import base, deterministic, off_policy
from jaxspreeze.types import EnvSpec

VARIANT = deterministic.Variant("ddpg")


@dataclass(frozen=True)
class DDPGConfig(deterministic.DeterministicConfig):
    """DDPG's own hyperparameters."""


def supports(spec: EnvSpec) -> str | None:
    """Why DDPG cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return "DDPG needs a continuous action space; use --algo ppo for discrete actions"
    return None


def validate(cfg: DDPGConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad DDPG field."""
    deterministic.check_config(cfg, prefix, ("actor_lr", "critic_lr"), ("exploration_noise",))
    base.check_hidden(cfg, prefix)


def make(cfg: DDPGConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind DDPG to its config, env spec and the run's per-iteration update sizes."""
    return deterministic.make(cfg, spec, run, VARIANT)


SPEC = off_policy.spec(
    "ddpg", DDPGConfig, supports, validate, make, member_fields=deterministic.MEMBER_FIELDS
)
