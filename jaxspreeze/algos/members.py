"""Member fields: the hyperparameters a population may vary per member (``jaxspreeze sweep``).

A member field is a float field of an algorithm's config whose value lives in a leaf of
the training state (a learning rate in its optimiser state, gamma and tau in the critic's
leaves, the initial temperature in ``log_alpha``, the noise scales, clip ranges and loss
coefficients in float32 scalar leaves of the side whose update reads them), so members
that differ only in it run the same program. Each algorithm's :class:`~jaxspreeze.algos.base.AlgoSpec` lists its
member fields and how a value is written into a fresh ``AgentState``
(``setter(agent, value) -> agent``, one slot, ``value`` a float32 scalar).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze.algos import common
from jaxspreeze.algos.base import AgentState

Setter = Callable[[AgentState, jax.Array], AgentState]


def _on(side: str, name: str, value: Callable[[jax.Array, jax.Array], jax.Array]) -> Setter:
    """Replace leaf ``name`` of the ``side`` ('actor' or 'critic') by ``value(old, v)``.

    A side wrapped around the algorithm's own state (``off_policy.ObsNormActor``: its
    ``inner`` state and the observation statistics) is set inside the wrapper.
    """

    def replace(part: Any, v: jax.Array) -> Any:
        if not hasattr(part, name) and hasattr(part, "inner"):
            return part._replace(inner=replace(part.inner, v))
        return part._replace(**{name: value(getattr(part, name), v)})

    def setter(agent: AgentState, v: jax.Array) -> AgentState:
        return agent._replace(**{side: replace(getattr(agent, side), v)})

    return setter


def leaf(side: str, name: str) -> Setter:
    """Set a float32 scalar leaf (``gamma``, ``tau``, ...) to the value."""
    return _on(side, name, lambda old, v: jnp.asarray(v, old.dtype))


def log_leaf(side: str, name: str) -> Setter:
    """Set a leaf that holds the log of the value (``log_alpha`` from ``init_alpha``)."""
    return _on(side, name, lambda old, v: jnp.log(jnp.asarray(v, old.dtype)))


def learning_rate(side: str, opt_state: str = "opt_state") -> Setter:
    """Set the learning rate held in an optimiser state (``common.adam`` / ``adamw``)."""
    return _on(side, opt_state, lambda old, v: common.set_learning_rate(old, v))


def all_of(*setters: Setter) -> Setter:
    """One value written by every setter (tau of both sides' targets, PPO's lr leaves)."""

    def setter(agent: AgentState, v: jax.Array) -> AgentState:
        for s in setters:
            agent = s(agent, v)
        return agent

    return setter


# the hyperparameter leaves added to the states after runs were saved without them (each
# named as its config field): a checkpoint or a policy file that lacks one takes it from a
# fresh state of the run's own config (the value the run trained with: a constant of its
# program then)
ADDED_LEAVES = frozenset(
    {
        "target_entropy_scale",  # SAC, FastSAC: actor side
        "exploration_noise",  # DDPG, TD3: actor side
        "noise_min",  # FastTD3: actor side
        "noise_max",
        "target_noise",  # TD3, FastTD3: critic side
        "target_noise_clip",
        "clip_eps",  # PPO: actor side
        "ent_coef",
        "vf_coef",  # PPO: critic side
        "reward_scaling",
    }
)


def is_added(path: str) -> bool:
    """Whether a leaf's path (``jax.tree_util.keystr``: ``.agent.actor.clip_eps``, or a
    policy file's key) ends in one of :data:`ADDED_LEAVES`."""
    return path.rsplit(".", 1)[-1].strip("[]'\"") in ADDED_LEAVES


def leaves(side: str, *names: str) -> dict[str, Setter]:
    """Member fields each held in the leaf of its own name on ``side``."""
    return {name: leaf(side, name) for name in names}


# what every algorithm with an actor and a critic optimiser shares
ACTOR_CRITIC_LR = {
    "actor_lr": learning_rate("actor"),
    "critic_lr": learning_rate("critic"),
    "gamma": leaf("critic", "gamma"),
}
# SAC and FastSAC: the temperature's learning rate and its first value
TEMPERATURE = {
    "alpha_lr": learning_rate("actor", "alpha_opt_state"),
    "init_alpha": log_leaf("actor", "log_alpha"),
    "target_entropy_scale": leaf("actor", "target_entropy_scale"),
}
