"""PPO (Schulman et al., 2017). Placeholder config until the algorithm lands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PPOConfig:
    """PPO's own hyperparameters (rollout = num_envs x rollout_steps of RunConfig)."""

    lr: float = 3e-4
    """Learning rate of the policy and the value function (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_eps: float = 0.2
    """Clip range of the probability ratio."""
    vf_coef: float = 0.5
    """Value-loss coefficient."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    epochs: int = 4
    """Passes over each rollout."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    anneal_lr: bool = False
    """Anneal the learning rate linearly to 0 over training."""
    normalize_obs: bool = False
    """Normalise observations with running statistics."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and the value network."""
