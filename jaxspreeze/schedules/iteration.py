"""One training iteration for one seed: the training state and the pure pieces, written once.

One iteration (per seed) is three pieces::

    # collect      rollout T steps x N envs with the current policy; take the actor view
    #              (actor device)
    # critic side  store the rollout in the replay buffer, then the critic phase against
    #              the actor view                                     (critic device)
    # actor side   (split: store the observations in the obs-only buffer), then the
    #              actor phase against the critic view                (actor device)

Staleness rule: in iteration i each side updates against the other side's parameters as
they were at the start of iteration i (the end of iteration i-1): the critic's target
actions use the policy that collected iteration i's rollout, and the actor's Q(s, pi(s))
uses the critic from before iteration i's critic phase. The two phases therefore do not
depend on each other and can run at the same time on two devices.
:func:`update_step` is that critic-then-actor step on its own (one batch of data, one
key), for the probes and benchmarks that time the update without collecting.

The schedules (:mod:`jaxspreeze.schedules`) run these pieces: fused into one
``lax.scan`` program on one device, or dispatched piece by piece to two devices. Both run
the same per-seed functions on the same inputs. ``policy_lag`` is derived from counters:
``actor_updates`` after the actor phase minus ``actor_updates`` of the parameters that
acted, i.e. ``actor_steps_per_iteration`` under this rule.

Everything here is written for one seed; the schedules vmap it over the seed axis ``[S]``
that every leaf of :class:`TrainState` has. Nothing here touches threads, files or clocks.

Data parallelism (:class:`Shards`): the same per-seed pieces, written for one shard of D.
A shard steps its own ``num_envs / D`` envs and keeps its own ``buffer_size / D`` replay
rows; its random keys are the single-device ones folded with the shard's index (the
agent's init key is not: every shard starts from the same parameters); the optimisers
average their gradients over the shards (:func:`jaxspreeze.algos.common.data_parallel`);
the step counters count the env steps of all shards; :func:`reduce_metrics` makes the
metrics those of the whole step. With ``shards=None`` nothing of this is traced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze.algos.base import AgentState, Algorithm, Sequences
from jaxspreeze.core.types import Carry, ObsOnly, PyTree, Transition
from jaxspreeze.data import replay
from jaxspreeze.data.rollout import EnvCarry, env_init, random_policy, rollout
from jaxspreeze.envs.base import VecEnv

Metrics = dict[str, jax.Array]


class TrainState(NamedTuple):
    """Everything a run carries between chunks; each leaf is ``[S, ...]`` (seeds)."""

    agent: AgentState  # .actor on the actor device, .critic on the critic device
    env: EnvCarry  # actor device; .policy: the policy's carry (a recurrent policy's memory)
    buffer: replay.ReplayState | None  # critic device (off-policy only)
    obs_buffer: replay.ReplayState | None  # actor device (off-policy, split only)
    key: jax.Array  # actor device
    env_steps: jax.Array  # env steps taken by this seed, warm-up included (actor device)
    iteration: jax.Array  # iterations done (actor device)
    actor_updates: jax.Array  # actor gradient steps applied so far (actor device)

    def to_collect(self) -> tuple[PyTree, EnvCarry, jax.Array, jax.Array, jax.Array, jax.Array]:
        """What :meth:`Iteration.collect` takes from this state (all on the actor device)."""
        s = self
        return s.agent.actor, s.env, s.key, s.env_steps, s.iteration, s.actor_updates


class Collected(NamedTuple):
    """What collect hands to the two sides of one iteration (one seed)."""

    traj: Transition  # [T, N, ...]
    actor_view: PyTree  # the acting policy's view for the critic side
    critic_key: jax.Array
    actor_key: jax.Array
    acted: jax.Array  # actor_updates of the parameters that acted
    start: Carry = ()  # the policy's carry at the rollout's first step (() without memory)


# the env metrics that add up over shards; the others are means, flags or counters
SUMMED_METRICS = ("episode_return_sum", "episode_length_sum", "episodes")
SHARED_METRICS = ("env_steps", "policy_lag")  # the same on every shard already


@dataclass(frozen=True)
class Shards:
    """The data-parallel shards one step is traced for: named axes, outermost first.

    ``axes`` are the names the collectives reduce over (a mesh axis, and a vmap axis when
    one device carries several shards); ``sizes`` their lengths. Shard ``index()`` is
    the row-major position over them.
    """

    axes: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def count(self) -> int:
        """Number of shards (D)."""
        return math.prod(self.sizes)

    def index(self) -> jax.Array:
        """This shard's index in ``[0, D)`` (traced: valid inside the mapped step)."""
        index = jnp.zeros((), jnp.int32)
        for axis, size in zip(self.axes, self.sizes, strict=True):
            index = index * size + jax.lax.axis_index(axis)
        return index

    def key(self, key: jax.Array) -> jax.Array:
        """This shard's own stream of ``key``."""
        return jax.random.fold_in(key, self.index())


def reduce_metrics(metrics: Metrics, shards: Shards | None) -> Metrics:
    """One step's metrics over all shards: env sums add up, flags all, the rest averaged."""
    if shards is None:
        return metrics
    out = {}
    for name, value in metrics.items():
        if name in SHARED_METRICS:
            out[name] = value
        elif name in SUMMED_METRICS:
            out[name] = jax.lax.psum(value, shards.axes)
        elif name.endswith("_finite"):
            bad = jax.lax.psum(jnp.logical_not(value).astype(jnp.int32), shards.axes)
            out[name] = bad == 0
        else:
            out[name] = jax.lax.pmean(value, shards.axes)
    return out


def _phase_metrics(metrics: Metrics, prefix: str) -> Metrics:
    """A phase's metrics with its ``finite`` flag renamed ``<prefix>_finite``."""
    m = {k: v for k, v in metrics.items() if k != "finite"}
    m[f"{prefix}_finite"] = jnp.asarray(metrics.get("finite", True)).astype(bool)
    return m


# ------------------------------------------------------------ the critic-then-actor step
def critic_update(
    algo: Algorithm, critic: PyTree, actor_view: PyTree, data: Any, key: jax.Array
) -> tuple[PyTree, Metrics]:
    """The critic phase against ``actor_view``; its ``finite`` flag named ``critic_finite``."""
    critic, metrics = algo.critic_phase(critic, actor_view, data, key)
    return critic, _phase_metrics(metrics, "critic")


def actor_update(
    algo: Algorithm, actor: PyTree, critic_view: PyTree, data: Any, key: jax.Array
) -> tuple[PyTree, Metrics]:
    """The actor phase against ``critic_view``; its ``finite`` flag named ``actor_finite``."""
    actor, metrics = algo.actor_phase(actor, critic_view, data, key)
    return actor, _phase_metrics(metrics, "actor")


def update_step(
    algo: Algorithm, agent: AgentState, data: Any, key: jax.Array
) -> tuple[AgentState, Metrics]:
    """One critic-then-actor step on ``data``, each side against the other's old view."""
    k_critic, k_actor = jax.random.split(key)
    # both views as at the start of the step (the staleness rule)
    actor_view = algo.actor_view(agent.actor)
    critic_view = algo.critic_view(agent.critic)
    critic, m_critic = critic_update(algo, agent.critic, actor_view, data, k_critic)
    actor, m_actor = actor_update(algo, agent.actor, critic_view, data, k_actor)
    return AgentState(actor, critic), {**m_critic, **m_actor}


# ------------------------------------------------------------ the pieces of one iteration
@dataclass(frozen=True, eq=False)
class Iteration:
    """The per-seed pieces of one training iteration for one algorithm, env and sizes.

    ``obs_buffer``: keep an observation-only copy of the buffer on the actor side (the
    two-device split). Every method is a pure function of its arguments, for one seed.
    ``shards``: the pieces of one data-parallel shard (``env``, ``buffer_size`` and
    ``warmup_steps`` are then the shard's own; the step counters count all shards').
    """

    algo: Algorithm
    env: VecEnv
    rollout_steps: int
    buffer_size: int
    warmup_steps: int
    obs_buffer: bool = False
    shards: Shards | None = None

    @classmethod
    def from_plan(cls, plan: Any, algo: Algorithm, env: VecEnv, obs_buffer: bool) -> Iteration:
        """The pieces for a run plan (its rollout, buffer and warm-up sizes)."""
        cfg = plan.cfg
        return cls(algo, env, cfg.rollout_steps, cfg.buffer_size, plan.warmup_steps, obs_buffer)

    @property
    def num_shards(self) -> int:
        """Data-parallel shards stepping together (1 without data parallelism)."""
        return 1 if self.shards is None else self.shards.count

    @property
    def steps_per_iteration(self) -> int:
        """Env steps per iteration (num_envs x rollout_steps, over all shards)."""
        return self.env.num_envs * self.rollout_steps * self.num_shards

    def shard_key(self, key: jax.Array) -> jax.Array:
        """``key`` for this shard's own envs and samples (``key`` itself without shards)."""
        return key if self.shards is None else self.shards.key(key)

    def init(self, key: jax.Array) -> TrainState:
        """A fresh state for one seed: agent, env, empty buffer(s), zero counters."""
        k_agent, k_env, key = jax.random.split(key, 3)
        agent = self.algo.init(k_agent)
        env = env_init(self.env, self.shard_key(k_env), self.algo.initial_carry(self.env.num_envs))
        buffer = obs_buffer = None
        if not self.algo.on_policy:
            example = replay.example_transition(self.env.spec)
            buffer = replay.init(example, self.buffer_size)
            if self.obs_buffer:
                obs_buffer = replay.init(ObsOnly(example.obs), self.buffer_size)
        zero = jnp.zeros((), jnp.int32)
        return TrainState(agent, env, buffer, obs_buffer, key, zero, zero, zero)

    def collect(
        self,
        actor: PyTree,
        env: EnvCarry,
        key: jax.Array,
        env_steps: jax.Array,
        iteration: jax.Array,
        actor_updates: jax.Array,
    ) -> tuple[EnvCarry, jax.Array, jax.Array, jax.Array, Collected, Metrics]:
        """Actor side: roll out the policy; returns the rollout and this iteration's keys."""
        key, k_roll, k_critic, k_actor = jax.random.split(key, 4)
        k_roll, k_critic, k_actor = map(self.shard_key, (k_roll, k_critic, k_actor))
        policy = lambda carry, obs, k: self.algo.act(actor, carry, obs, k, False)
        initial = self.algo.initial_carry(self.env.num_envs)
        start = env.policy  # the carry the rollout's first step acts with (stored, replayed)
        env, traj, eps = rollout(self.env, policy, env, k_roll, self.rollout_steps, initial)
        env_steps = env_steps + self.steps_per_iteration
        metrics = {
            "episode_return_sum": jnp.where(eps.done, eps.returns, 0.0).sum(),
            "episode_length_sum": jnp.where(eps.done, eps.lengths, 0).sum().astype(jnp.float32),
            "episodes": eps.done.sum().astype(jnp.float32),
            "env_steps": env_steps,
        }
        collected = Collected(
            traj, self.algo.actor_view(actor), k_critic, k_actor, actor_updates, start
        )
        return env, key, env_steps, iteration + 1, collected, metrics

    def rollout_data(self, c: Collected) -> Transition | Sequences:
        """What the on-policy phases train on: the rollout, with its starting carry
        (:class:`~jaxspreeze.algos.base.Sequences`) for a policy with memory."""
        return Sequences(c.traj, c.start) if self.algo.has_memory else c.traj

    def critic_side(
        self,
        critic: PyTree,
        buffer: replay.ReplayState | None,
        traj: Transition | Sequences,
        actor_view: PyTree,
        key: jax.Array,
    ) -> tuple[PyTree, replay.ReplayState | None, Metrics]:
        """Critic side: store the new transitions, then the critic phase (on-policy: on
        the rollout, :meth:`rollout_data`)."""
        if self.algo.on_policy:
            data = traj
        else:
            buffer = self.store(buffer, traj)
            data = buffer
        critic, metrics = critic_update(self.algo, critic, actor_view, data, key)
        return critic, buffer, metrics

    def actor_side(
        self,
        actor: PyTree,
        data: Any,
        critic_view: PyTree,
        key: jax.Array,
        actor_updates: jax.Array,
        acted: jax.Array,
        obs: jax.Array | None = None,
    ) -> tuple[PyTree, jax.Array, Metrics]:
        """Actor side: the actor phase on the rollout (on-policy) or the (obs) buffer, then
        the iteration's collected observations ``obs [T, N, ...]`` merged into the actor
        (:meth:`observe`)."""
        actor, metrics = actor_update(self.algo, actor, critic_view, data, key)
        if obs is not None:
            actor = self.observe(actor, obs)
        actor_updates = actor_updates + self.algo.actor_steps_per_iteration
        metrics["policy_lag"] = (actor_updates - acted).astype(jnp.float32)
        return actor, actor_updates, metrics

    def observe(self, actor: PyTree, obs: jax.Array) -> PyTree:
        """Actor side: merge collected observations ``[T, N, ...]`` into the actor side
        (the algorithm's ``observe``, e.g. running observation statistics; under
        :class:`Shards` merged over every shard's); ``actor`` itself without one."""
        return actor if self.algo.observe is None else self.algo.observe(actor, obs)

    def __call__(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """One whole iteration for one seed on one device, composed of the pieces above."""
        # the critic view as at the start of the iteration (staleness rule)
        critic_view = self.algo.critic_view(s.agent.critic)
        # collect
        env, key, env_steps, iteration, c, m_env = self.collect(*s.to_collect())
        # store + update critic
        rollout_data = self.rollout_data(c) if self.algo.on_policy else c.traj
        critic, buffer, m_critic = self.critic_side(
            s.agent.critic, s.buffer, rollout_data, c.actor_view, c.critic_key
        )
        # update actor (independent of the critic phase: same inputs as on two devices)
        data = rollout_data if self.algo.on_policy else buffer
        actor, actor_updates, m_actor = self.actor_side(
            s.agent.actor, data, critic_view, c.actor_key, s.actor_updates, c.acted, c.traj.obs
        )
        state = TrainState(
            AgentState(actor, critic),
            env,
            buffer,
            s.obs_buffer,
            key,
            env_steps,
            iteration,
            actor_updates,
        )
        return state, {**m_env, **m_critic, **m_actor}

    def warmup_collect(
        self, env: EnvCarry, key: jax.Array, env_steps: jax.Array
    ) -> tuple[EnvCarry, jax.Array, jax.Array, Transition]:
        """Random-action rollout of ``warmup_steps`` env steps (actor side)."""
        num_envs = self.env.num_envs
        steps = self.warmup_steps // num_envs
        key, k = jax.random.split(key)
        initial = self.algo.initial_carry(num_envs)
        policy = random_policy(self.env)
        env, traj, _ = rollout(self.env, policy, env, self.shard_key(k), steps, initial)
        return env, key, env_steps + steps * num_envs * self.num_shards, traj

    def store(self, buffer: replay.ReplayState, traj: Transition) -> replay.ReplayState:
        """Critic side: add a ``[T, N, ...]`` rollout to the replay buffer."""
        return replay.add_rollout(buffer, traj)

    def store_obs(self, obs_buffer: replay.ReplayState, obs: jax.Array) -> replay.ReplayState:
        """Actor side of the split: add ``[T, N, ...]`` observations to the obs-only buffer."""
        return replay.add_rollout(obs_buffer, ObsOnly(obs))

    def warmup(self, s: TrainState) -> TrainState:
        """Fill the buffer(s) with random-action transitions (off-policy only)."""
        env, key, env_steps, traj = self.warmup_collect(s.env, s.key, s.env_steps)
        buffer = self.store(s.buffer, traj)
        obs_buffer = s.obs_buffer
        if obs_buffer is not None:
            obs_buffer = self.store_obs(obs_buffer, traj.obs)
        s = s._replace(agent=s.agent._replace(actor=self.observe(s.agent.actor, traj.obs)))
        return s._replace(
            env=env, buffer=buffer, obs_buffer=obs_buffer, key=key, env_steps=env_steps
        )
