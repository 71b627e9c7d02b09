"""The critics: Q ensembles (scalar and categorical), the discrete-action Q-network and
the state value, each a torso then a head (:mod:`~jaxspreeze.networks.heads`).

A Q ensemble reads the observation through one torso whose features all its members
share (``mlp``: the columns ``obs_cols``, flattened, so each member is today's MLP of
``(obs, action)``); the members' MLPs are independent.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax

from jaxspreeze.core.types import Columns
from jaxspreeze.networks import heads
from jaxspreeze.networks.torsos import encode


class QEnsemble(nn.Module):
    """``num_qs`` independent Q(s, a) MLPs evaluated together: ``[num_qs, B]``."""

    hidden: Sequence[int]
    num_qs: int = 2
    obs_cols: Columns | None = None  # the observation columns it reads
    torso: str = "mlp"  # the torso before the heads (torsos.TORSOS)

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``(obs [B, ...], action [B, A]) -> Q [num_qs, B]``."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.q_ensemble(x, action, self.hidden, 1, self.num_qs)[..., 0]


class DistributionalQEnsemble(nn.Module):
    """``num_qs`` categorical critics (C51) evaluated together: logits ``[num_qs, B, num_atoms]``.

    Each is an MLP over the observation and action whose last layer gives the logits of
    the return's distribution over ``num_atoms`` fixed atoms (the algorithm holds them).
    """

    hidden: Sequence[int]
    num_atoms: int
    num_qs: int = 2
    obs_cols: Columns | None = None  # the observation columns it reads
    layer_norm: bool = False  # a LayerNorm after each hidden layer (MLP's)
    torso: str = "mlp"  # the torso before the heads (torsos.TORSOS)

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``(obs [B, ...], action [B, A]) -> logits [num_qs, B, num_atoms]``."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.q_ensemble(
            x, action, self.hidden, self.num_atoms, self.num_qs, self.layer_norm
        )


class DiscreteQNet(nn.Module):
    """Q(s, .) over a discrete action set: ``[B, num_actions]`` (PQN's network: a LayerNorm
    after each hidden layer when ``layer_norm``)."""

    hidden: Sequence[int]
    num_actions: int
    obs_cols: Columns | None = None  # the observation columns it reads
    layer_norm: bool = True  # a LayerNorm after each hidden layer (MLP's)
    torso: str = "mlp"  # the torso before the head (torsos.TORSOS)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> Q [B, num_actions]``."""
        x = encode(self.torso, obs, self.obs_cols)
        return heads.q_values(x, self.hidden, self.num_actions, self.layer_norm)


class ValueNet(nn.Module):
    """State value V(s): ``[B]``."""

    hidden: Sequence[int]
    obs_cols: Columns | None = None  # the observation columns it reads
    torso: str = "mlp"  # the torso before the head (torsos.TORSOS)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> V [B]``."""
        return heads.value(encode(self.torso, obs, self.obs_cols), self.hidden)
