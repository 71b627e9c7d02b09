"""Heads: a torso's features ``[B, F]`` to an algorithm's outputs.

Each head is the ``hidden`` MLP over the features and the output layer(s) of one kind of
network. A head is a function called inside a network's ``nn.compact`` method: the layers
it makes are that network's submodules (``MLP_0``, ``Dense_0``, ...), so a network's
parameter tree is exactly what it was before torsos and heads were split out of it.
Heads that own a bare parameter (a state-independent std) take the network (``module``)
to hold it.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxspreeze.networks.torsos import MLP

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def tanh_gaussian(
    x: jax.Array, hidden: Sequence[int], action_dim: int
) -> tuple[jax.Array, jax.Array]:
    """SAC's Gaussian: ``(mean [B, A], log_std [B, A])`` from two linear layers over the
    MLP, the log std squashed into ``[LOG_STD_MIN, LOG_STD_MAX]`` by a tanh."""
    h = MLP(hidden)(x)
    mean = nn.Dense(action_dim)(h)
    log_std = nn.Dense(action_dim)(h)
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(log_std) + 1)
    return mean, log_std


def deterministic(x: jax.Array, hidden: Sequence[int], action_dim: int) -> jax.Array:
    """TD3/DDPG's action in ``[-1, 1]``: ``tanh`` of the MLP's linear output ``[B, A]``."""
    return jnp.tanh(MLP(hidden, action_dim)(x))


def q_ensemble(
    x: jax.Array,
    action: jax.Array,
    hidden: Sequence[int],
    out: int,
    num_qs: int,
    layer_norm: bool = False,
) -> jax.Array:
    """``num_qs`` independent MLPs of (features, action) -> ``out``, stacked:
    ``[num_qs, B, out]`` (Q-values: ``out`` 1; C51 logits: ``out`` atoms). The features
    are shared: one torso feeds every member."""
    x = jnp.concatenate([x, action], axis=-1)
    ensemble = nn.vmap(
        MLP,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=0,
        axis_size=num_qs,
    )
    return ensemble(hidden, out, layer_norm=layer_norm)(x)


def value(x: jax.Array, hidden: Sequence[int]) -> jax.Array:
    """A state value ``[B]``: the MLP's one linear output."""
    return MLP(hidden, 1)(x)[..., 0]


def q_values(
    x: jax.Array, hidden: Sequence[int], num_actions: int, layer_norm: bool = False
) -> jax.Array:
    """A discrete Q-network's values ``[B, num_actions]``: the MLP (a LayerNorm after each
    hidden layer when ``layer_norm``) and one linear output per action."""
    return MLP(hidden, num_actions, layer_norm=layer_norm)(x)


def categorical(x: jax.Array, hidden: Sequence[int], num_actions: int) -> jax.Array:
    """A discrete policy's logits ``[B, num_actions]`` (the last layer starts small)."""
    return MLP(hidden, num_actions, out_scale=0.01)(x)


def gaussian(
    module: nn.Module, x: jax.Array, hidden: Sequence[int], action_dim: int
) -> tuple[jax.Array, jax.Array]:
    """A Gaussian with a state-independent std: ``(mean [B, A], log_std [A])``; the log
    std is ``module``'s parameter ``log_std`` (starting at 0)."""
    mean = MLP(hidden, action_dim, out_scale=0.01)(x)
    log_std = module.param("log_std", nn.initializers.zeros, (action_dim,))
    return mean, log_std


def squashed_gaussian(
    module: nn.Module, x: jax.Array, hidden: Sequence[int], action_dim: int, state_std: bool
) -> tuple[jax.Array, jax.Array]:
    """PPO's tanh policy before the squash: ``(mean [B, A], raw scale)``. ``state_std``:
    the raw scale is a second half of the MLP's output (``[B, A]``); otherwise ``module``'s
    parameter ``raw_std`` (``[A]``). Both start near 0."""
    if state_std:
        out = MLP(hidden, 2 * action_dim, out_scale=0.01)(x)
        return out[:, :action_dim], out[:, action_dim:]
    mean = MLP(hidden, action_dim, out_scale=0.01)(x)
    raw = module.param("raw_std", nn.initializers.zeros, (action_dim,))
    return mean, raw
