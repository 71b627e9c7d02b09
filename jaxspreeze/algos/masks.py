"""Legal-action masks for discrete actions: where they ride, and how a policy obeys them.

An env that says which actions are legal in each state (``EnvSpec.action_mask``) gives
the mask as the last ``action_dim`` entries of its observation flattened to one vector
(1 legal, 0 illegal); its ``actor_obs`` / ``critic_obs`` columns leave those entries out,
so the networks never read them. Riding in the observation, the mask goes wherever the
observation goes (rollouts, the replay buffer, the host workers, evaluation, predict)
with nothing else to carry. A policy reads it back with :func:`legal` and never picks an
illegal action: logits and Q-values of illegal actions are pushed to the lowest value
(:func:`masked`), random actions are drawn among the legal ones (:func:`random_legal`).
A state with no legal action is treated as all legal (nothing to obey).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxspreeze.core.types import EnvSpec, legal_actions


def legal(spec: EnvSpec, obs: jax.Array) -> jax.Array | None:
    """``bool [B, action_dim]``: the legal actions of each observation of the batch
    ``obs [B, ...]``, or None for an env without masks (every action legal).

    ``obs`` as the env gives it: read it before any normalisation (PPO's
    ``--ppo.normalize-obs`` shifts the mask's columns too). One definition with the env
    side's random warm-up (:func:`jaxspreeze.core.types.legal_actions`)."""
    return legal_actions(spec, obs)


def masked(values: jax.Array, ok: jax.Array | None) -> jax.Array:
    """Logits or Q-values ``[B, A]`` with the illegal ones at the dtype's lowest finite
    value (so a softmax gives them 0 and an argmax never picks them); as they are when
    ``ok`` is None."""
    if ok is None:
        return values
    return jnp.where(ok, values, jnp.finfo(values.dtype).min)


def random_legal(key: jax.Array, ok: jax.Array | None, shape: tuple[int, ...], n: int) -> jax.Array:
    """Uniform random actions ``int32 shape`` among the legal ones (all ``n`` when ``ok``
    is None; ``ok`` has ``shape + (n,)``)."""
    if ok is None:
        return jax.random.randint(key, shape, 0, n, dtype=jnp.int32)
    logits = jnp.where(ok, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
