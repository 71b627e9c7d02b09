"""TD3's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.td3`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jaxspreeze.algos import deterministic_config
from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec


ACTOR_Q = ("first", "min")  # the critic value the actor ascends: Q1, or the twins' smaller


@dataclass(frozen=True)
class TD3Config(deterministic_config.DeterministicConfig):
    """TD3's own hyperparameters."""

    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise (fraction of the half-width)."""
    target_noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (fraction of the half-width)."""
    actor_q: str = "first"
    """Which critic the actor ascends: ``first`` (Q1, Fujimoto et al.'s TD3, SB3's) or
    ``min`` (the smaller of the twin critics' values, SBX's TD3)."""
    delay_targets: bool = True
    """Move the target networks on the actor's updates only, every ``policy_delay``
    critic updates (Fujimoto et al.'s TD3, SB3's); False: the critic's target after every
    critic update and the actor's by ``policy_delay`` such steps at each actor update
    (SBX's TD3: both targets every gradient step)."""


def supports(spec: EnvSpec) -> str | None:
    """Why TD3 cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return (
            "TD3 needs a continuous action space; use --algo ppo, --algo pqn or --algo dqn "
            "for discrete actions"
        )
    return None


def validate(cfg: TD3Config, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad TD3 field (and grad_steps when ``run`` is given)."""
    deterministic_config.check_config(
        cfg,
        prefix,
        ("actor_lr", "critic_lr", "policy_delay"),
        ("exploration_noise", "target_noise", "target_noise_clip"),
    )
    if not isinstance(cfg.policy_delay, int):
        raise ConfigError(f"{prefix}policy_delay", f"must be an integer, got {cfg.policy_delay!r}")
    if cfg.actor_q not in ACTOR_Q:
        raise ConfigError(
            f"{prefix}actor_q", f"must be one of {', '.join(ACTOR_Q)}, got {cfg.actor_q!r}"
        )
    if not isinstance(cfg.delay_targets, bool):
        raise ConfigError(
            f"{prefix}delay_targets", f"must be true or false, got {cfg.delay_targets!r}"
        )
    if run is not None and run.grad_steps % cfg.policy_delay:
        raise ConfigError(
            "grad_steps",
            f"must be a multiple of {prefix}policy_delay ({cfg.policy_delay}) so the actor "
            f"updates every policy_delay critic updates; got {run.grad_steps}",
        )
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)


def grad_step_multiple(cfg: TD3Config) -> int:
    """Gradient steps per iteration must be a multiple of ``policy_delay``."""
    return cfg.policy_delay


SPEC = base.AlgoSpec(
    "td3",
    TD3Config,
    False,
    base.OFF_POLICY_DEFAULTS,
    supports,
    validate,
    "jaxspreeze.algos.td3",
    grad_step_multiple=grad_step_multiple,
    member_fields=(
        "actor_lr",
        "critic_lr",
        "gamma",
        "tau",
        "exploration_noise",
        "target_noise",
        "target_noise_clip",
    ),
)
