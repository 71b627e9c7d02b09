"""SAC's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.sac`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jaxspreeze.algos import spec as base

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec


@dataclass(frozen=True)
class SACConfig:
    """SAC's own hyperparameters (the loop's sizes live in RunConfig)."""

    actor_lr: float = 1e-3
    """Actor learning rate (Adam)."""
    critic_lr: float = 1e-3
    """Critic learning rate (Adam)."""
    alpha_lr: float = 1e-3
    """Entropy-temperature learning rate (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the soft target update."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    target_entropy_scale: float = 1.0
    """Target entropy is ``-scale * action_dim``."""
    hidden: tuple[int, ...] = field(default=(128, 128), metadata=base.kinds("shape"))
    """Hidden layer widths of the actor and the critic (2x128 keeps the default run short
    on a CPU; the benchmarks use 2x256)."""
    torso: base.Torso = field(
        default="auto", metadata=base.kinds("shape", absent="mlp")
    )
    """The networks' torso before the hidden layers: auto = minatar for an image
    observation (H, W, C) under 32 a side, nature for a larger one, mlp otherwise; mlp
    flattens the observation (docs/algorithms.md, Network torsos)."""
    normalize_obs: bool = field(default=False, metadata=base.kinds("shape"))
    """Normalise observations by running statistics (mean, variance) of those collected,
    kept on the actor side and saved with the policy (the buffer keeps raw ones)."""


def supports(spec: EnvSpec) -> str | None:
    """Why SAC cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return (
            "SAC needs a continuous action space; use --algo ppo, --algo pqn or --algo dqn "
            "for discrete actions"
        )
    return None


def validate(cfg: SACConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad SAC field."""
    base.check_positive(cfg, prefix, ("actor_lr", "critic_lr", "alpha_lr", "init_alpha"))
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)


SPEC = base.AlgoSpec(
    "sac",
    SACConfig,
    False,
    base.OFF_POLICY_DEFAULTS,
    supports,
    validate,
    "jaxspreeze.algos.sac",
    member_fields=(
        "actor_lr",
        "critic_lr",
        "gamma",
        "alpha_lr",
        "init_alpha",
        "target_entropy_scale",
        "tau",
    ),
)
