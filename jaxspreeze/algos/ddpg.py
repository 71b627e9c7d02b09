"""DDPG (Lillicrap et al., 2016). Placeholder config until the algorithm lands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DDPGConfig:
    """DDPG's own hyperparameters."""

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
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and the critic."""
