"""The interface every algorithm implements, and the off-policy update plumbing.

An algorithm's state is split into an *actor side* and a *critic side* so the device
split can place them apart. Each side is updated by a *phase* that sees only a view of
the other side's parameters taken at the start of the iteration (the staleness rule:
each side sees the other's parameters from the end of the previous iteration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

# the registry's no-JAX half (algos/spec.py), re-exported: what an algorithm is to the registry
from jaxspreeze.algos.spec import (  # noqa: F401
    FIELD_KINDS,
    OFF_POLICY_DEFAULTS,
    RUN_SIZES,
    TORSOS,
    AlgoSpec,
    check_hidden,
    check_positive,
    check_torso,
    check_unit,
    defaults_on,
    family_of,
    fields_on,
    filled,
    kinds,
)
from jaxspreeze.core.types import Carry, PyTree, Transition, reset_carry
from jaxspreeze.data import replay

Metrics = dict[str, jax.Array]
Phase = Callable[[PyTree, PyTree, Any, jax.Array], tuple[PyTree, Metrics]]


class AgentState(NamedTuple):
    """An algorithm's whole state: the actor side and the critic side."""

    actor: PyTree
    critic: PyTree


class BehaviourRollout(NamedTuple):
    """An on-policy rollout collected away from the learner (host sampling workers).

    ``traj`` is the ``[T, N]`` rollout; ``extras`` holds what the behaviour policy (the
    parameters that acted, possibly older than the learner's) reported for each row
    through :attr:`Algorithm.behaviour`, ``[T, N, ...]`` (PPO: ``logp``).
    """

    traj: Transition
    extras: dict[str, jax.Array]


def no_carry(batch: int) -> Carry:
    """A feed-forward policy's carry: empty, for any batch."""
    return ()


class Sequences(NamedTuple):
    """An on-policy rollout ``[T, N]`` with the policy's carry at its first step (leaves
    ``[N, ...]``, the carry each env's first observation was acted on with): what a policy
    with memory replays its rollout from. Episode starts inside the rollout follow from the
    previous step's ``terminated | truncated`` (:func:`episode_starts`); built by the iteration for a policy with memory."""

    traj: Transition
    start: Carry


def episode_starts(traj: Transition) -> jax.Array:
    """``[T, N]`` bool: where an observation of the rollout starts an episode after the
    rollout's first step (the previous step ended one: a termination or a truncation);
    False at step 0, whose carry is the rollout's stored start (already reset)."""
    done = traj.terminated | traj.truncated
    return jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]], axis=0)


@dataclass(frozen=True, eq=False)
class Algorithm:
    """An algorithm bound to its config and env spec: pure functions, no state.

    - ``init(key) -> AgentState``
    - ``act(actor, carry, obs [N, ...], key, deterministic) -> (action [N, ...], carry)``:
      ``carry`` is the policy's state between steps (a recurrent policy's memory), a PyTree
      whose leaves are ``[N, ...]``; ``initial_carry(N)`` is its value at an episode's
      first step, and whoever steps envs resets a row to it where an episode starts (at
      the start, and after a termination or a truncation:
      :func:`~jaxspreeze.core.types.reset_carry`). A feed-forward policy's carry is ``()``
      (:func:`no_carry`, the default ``initial_carry``) and its ``act`` is
      :func:`feed_forward` of a stateless one: an empty carry adds nothing to a program.
    - ``actor_view(actor)``: what the critic side needs from the actor side (e.g. the
      policy parameters for target actions); ``critic_view(critic)`` likewise.
    - ``critic_phase(critic, actor_view, data, key) -> (critic, metrics)``
    - ``actor_phase(actor, critic_view, data, key) -> (actor, metrics)``

    ``data`` is the replay buffer for off-policy algorithms (the actor side may get an
    observation-only copy) and the fresh ``[T, N]`` rollout for on-policy ones: a
    ``Transition`` collected by the current actor (the device path), or a
    :class:`BehaviourRollout` collected by host workers with an older actor.
    ``observe(actor, obs [T, N, ...]) -> actor`` (off-policy algorithms whose actor side
    learns from the observations it collects, e.g. running observation statistics): merge
    newly collected observations into the actor side; the iteration calls it after the
    actor phase, and on the warm-up's observations; None where the algorithm needs none.
    ``behaviour(actor, carry, obs [N, ...], key) -> (action, extras, carry)`` (on-policy
    algorithms that train on host envs): act as ``act(..., deterministic=False)`` does and
    also return the per-row quantities ``[N, ...]`` the phases need of the behaviour policy
    (PPO: the log-probability of the action); None where the algorithm needs none
    (:func:`feed_forward_behaviour` builds it from a stateless one).
    Every phase reports a ``finite`` guard flag (1.0 when its losses and gradients were
    finite at every step); the gradient steps per iteration are the two ``*_steps_per_iteration``
    fields. ``layer_norm``: its learning network is an MLP with LayerNorms (PQN's; DQN's
    with ``--dqn.layer-norm``; FastTD3's and FastSAC's critic with
    ``--<algo>.critic-layer-norm``), whose gradients XLA's CPU backend runs 1.3-1.7x slower under
    a seed axis of size one: the fused schedule runs a one-seed chunk there without the
    axis (``unbatched`` in schedules/fused.py).
    """

    name: str
    on_policy: bool
    init: Callable[[jax.Array], AgentState]
    act: Callable[[PyTree, Carry, jax.Array, jax.Array, bool], tuple[jax.Array, Carry]]
    actor_view: Callable[[PyTree], PyTree]
    critic_view: Callable[[PyTree], PyTree]
    critic_phase: Phase
    actor_phase: Phase
    actor_steps_per_iteration: int
    critic_steps_per_iteration: int
    behaviour: (
        Callable[[PyTree, Carry, jax.Array, jax.Array], tuple[jax.Array, Metrics, Carry]] | None
    ) = None
    observe: Callable[[PyTree, jax.Array], PyTree] | None = None
    initial_carry: Callable[[int], Carry] = no_carry
    layer_norm: bool = False

    @property
    def has_memory(self) -> bool:
        """Whether the policy keeps a state between steps (its carry has leaves)."""
        return bool(jax.tree.leaves(jax.eval_shape(lambda: self.initial_carry(1))))

    def start_rows(self, carry: Carry, starts: jax.Array) -> Carry:
        """``carry [N, ...]`` reset to :attr:`initial_carry` where ``starts [N]`` (episodes
        start there): :func:`~jaxspreeze.core.types.reset_carry`."""
        return reset_carry(carry, self.initial_carry(starts.shape[0]), starts)


def feed_forward(
    act: Callable[[PyTree, jax.Array, jax.Array, bool], jax.Array],
) -> Callable[[PyTree, Carry, jax.Array, jax.Array, bool], tuple[jax.Array, Carry]]:
    """:attr:`Algorithm.act` of a policy without memory, from its stateless
    ``act(actor, obs, key, deterministic) -> action``: the carry passes through (the same
    ops and the same use of ``key``: the program is the stateless one's)."""

    def act_with_carry(
        actor: PyTree, carry: Carry, obs: jax.Array, key: jax.Array, deterministic: bool
    ):
        return act(actor, obs, key, deterministic), carry

    return act_with_carry


def feed_forward_behaviour(
    behaviour: Callable[[PyTree, jax.Array, jax.Array], tuple[jax.Array, Metrics]],
) -> Callable[[PyTree, Carry, jax.Array, jax.Array], tuple[jax.Array, Metrics, Carry]]:
    """:attr:`Algorithm.behaviour` of a policy without memory, from its stateless
    ``behaviour(actor, obs, key) -> (action, extras)`` (see :func:`feed_forward`)."""

    def behaviour_with_carry(actor: PyTree, carry: Carry, obs: jax.Array, key: jax.Array):
        action, extras = behaviour(actor, obs, key)
        return action, extras, carry

    return behaviour_with_carry


def replay_phase(
    update: Callable[[PyTree, PyTree, Any, jax.Array], tuple[PyTree, Metrics]],
    num_steps: int,
    batch_size: int,
    select: Callable[[Any], Any] = lambda batch: batch,
    sample: Callable[[replay.ReplayState, jax.Array, int], Any] = replay.sample,
) -> Phase:
    """A phase of ``num_steps`` updates, each on a fresh uniform batch from the buffer.

    ``select`` picks what the update needs from a sampled batch (the actor uses only
    ``batch.obs``, so it works on an observation-only buffer too). ``sample(buffer, key,
    batch_size)`` draws it (n-step critics: runs of consecutive transitions).
    """

    def phase(state: PyTree, view: PyTree, buffer: replay.ReplayState, key: jax.Array):
        def body(state, key):
            k_sample, k_update = jax.random.split(key)
            batch = select(sample(buffer, k_sample, batch_size))
            return update(state, view, batch, k_update)

        if num_steps == 0:
            return state, {}
        state, metrics = jax.lax.scan(body, state, jax.random.split(key, num_steps))
        metrics = {k: jnp.mean(v) for k, v in metrics.items()}
        metrics["finite"] = metrics["finite"] > 0.999  # all steps finite
        return state, metrics

    return phase
