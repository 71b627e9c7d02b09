"""What DDPG and TD3 share without JAX: their config's common fields and checks
(the maths: :mod:`jaxspreeze.algos.deterministic`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError


@dataclass(frozen=True)
class DeterministicConfig:
    """The hyperparameters DDPG and TD3 share."""

    actor_lr: float = 1e-3
    """Actor learning rate (Adam)."""
    critic_lr: float = 1e-3
    """Critic learning rate (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target updates."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range half-width."""
    hidden: tuple[int, ...] = field(default=(256, 256), metadata=base.kinds("shape"))
    """Hidden layer widths of the actor and the critic."""
    torso: base.Torso = field(
        default="auto", metadata=base.kinds("shape", absent="mlp")
    )
    """The networks' torso before the hidden layers: auto = minatar for an image
    observation (H, W, C) under 32 a side, nature for a larger one, mlp otherwise; mlp
    flattens the observation (docs/algorithms.md, Network torsos)."""
    normalize_obs: bool = field(default=False, metadata=base.kinds("shape"))
    """Normalise observations by running statistics (mean, variance) of those collected,
    kept on the actor side and saved with the policy (the buffer keeps raw ones)."""


def check_config(
    cfg: DeterministicConfig, prefix: str, positive: tuple[str, ...], non_negative: tuple[str, ...]
) -> None:
    """ConfigError naming the first bad field of the shared checks, in this order.

    ``positive`` > 0, gamma and tau in [0, 1], ``non_negative`` >= 0; the algorithm
    checks its own fields and then the hidden widths (``base.check_hidden``) after these.
    """
    base.check_positive(cfg, prefix, positive)
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    for name in non_negative:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{prefix}{name}", f"must be >= 0, got {value!r}")
