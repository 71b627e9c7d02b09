"""DDPG's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.ddpg`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jaxspreeze.algos import deterministic_config
from jaxspreeze.algos import spec as base

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec


@dataclass(frozen=True)
class DDPGConfig(deterministic_config.DeterministicConfig):
    """DDPG's own hyperparameters."""


def supports(spec: EnvSpec) -> str | None:
    """Why DDPG cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return (
            "DDPG needs a continuous action space; use --algo ppo, --algo pqn or --algo dqn "
            "for discrete actions"
        )
    return None


def validate(cfg: DDPGConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad DDPG field."""
    deterministic_config.check_config(cfg, prefix, ("actor_lr", "critic_lr"), ("exploration_noise",))
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)


SPEC = base.AlgoSpec(
    "ddpg",
    DDPGConfig,
    False,
    base.OFF_POLICY_DEFAULTS,
    supports,
    validate,
    "jaxspreeze.algos.ddpg",
    member_fields=("actor_lr", "critic_lr", "gamma", "tau", "exploration_noise"),
)
