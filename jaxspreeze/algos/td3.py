"""TD3 (Fujimoto et al., 2018). Placeholder config until the algorithm lands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TD3Config:
    """TD3's own hyperparameters."""

    actor_lr: float = 1e-3
    """Actor learning rate (Adam)."""
    critic_lr: float = 1e-3
    """Critic learning rate (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target updates."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range half-width."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise (fraction of the half-width)."""
    target_noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (fraction of the half-width)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and the critic."""
