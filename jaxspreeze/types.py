"""The shared vocabulary: transitions, environment specs and run counters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax

PyTree = Any


class Transition(NamedTuple):
    """One step of experience; in a rollout every leaf is shaped ``[T, N, ...]``.

    ``next_obs`` is the observation the action led to: on an episode end it is the
    final observation before the auto-reset, so a truncated step can bootstrap from it.
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array


class ObsOnly(NamedTuple):
    """What the actor side keeps of a transition: the policy loss needs states only."""

    obs: jax.Array


@dataclass(frozen=True)
class EnvSpec:
    """Static description of an environment: shapes, action space and time limit."""

    name: str
    obs_shape: tuple[int, ...]
    discrete: bool
    action_dim: int  # continuous: size of the action vector; discrete: number of actions
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    max_episode_steps: int = 1000

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one action: ``()`` for discrete actions, ``(action_dim,)`` otherwise."""
        return () if self.discrete else (self.action_dim,)
