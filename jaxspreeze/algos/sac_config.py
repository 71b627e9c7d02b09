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
    hidden: tuple[int, ...] | None = field(
        default=None, metadata=base.kinds("shape", absent=(128, 128))
    )
    """Hidden layer widths of the actor and the critic; default: the env family's (64 64
    on gymnax, whose tasks learn as well or better at that width, at a third of the
    training's cost; 128 128 elsewhere; the benchmarks use 256 256)."""
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
    """Raise ConfigError naming the first bad SAC field (one left unset, the env family's
    default: checked with the value it takes for ``run``'s env)."""
    cfg = base.filled(SPEC, cfg, base.family_of(run.env) if run is not None else "")
    base.check_positive(cfg, prefix, ("actor_lr", "critic_lr", "alpha_lr", "init_alpha"))
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)


# SACConfig's fields whose default depends on the env's family (None: the family's), with
# their value where no family says otherwise, and what differs per family. gymnax: 64 x 64
# (every continuous gymnax task, 3 seeds at the default job's 10k env steps and at 30k:
# as good or better than 128 x 128; the training's CPU seconds a third:
# experiments/results/sac_gymnax_width_cpu.md).
FIELD_DEFAULTS = {"hidden": (128, 128)}
FAMILY_DEFAULTS = {"gymnax": {"hidden": (64, 64)}}

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
    field_defaults=FIELD_DEFAULTS,
    family_defaults=FAMILY_DEFAULTS,
)
