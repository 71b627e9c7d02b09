"""The two-device schedule: the host dispatches each iteration's pieces to their devices.

Per iteration: collect (actor device), one ``device_put`` of the rollout + actor view +
key (packed into one buffer) to the critic device, the critic side and the actor side
back to back without waiting, and one ``device_put`` of the new critic view to the actor
device for the next iteration. Data dependencies alone order the work: collect(i+1)
waits for actor(i), actor(i+1) for the critic view of critic(i); critic(i) and actor(i)
overlap. The pieces are those of :class:`~jaxspreeze.schedules.iteration.Iteration`, so the split
agrees with the fused chunk to float rounding (bitwise where XLA compiles the pieces
alike). On one device (``dispatched=True``) it is the fused program cut at the split's
seams, for measuring the pieces. Compile logs and profiles name the pieces
``split_collect``, ``split_critic``, ``split_actor`` and ``split_critic_view``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze.algos.base import AgentState
from jaxspreeze.core.programs import Piece
from jaxspreeze.core.types import PyTree
from jaxspreeze.data import replay, transfer
from jaxspreeze.data.rollout import EnvCarry
from jaxspreeze.schedules.base import DeviceSchedule, abstract_on
from jaxspreeze.schedules.iteration import Metrics, TrainState

ACTOR, CRITIC = "actor", "critic"  # the two sides
SHARD = "shard"  # an output with one value per data-parallel shard (see Split._lower)
METRICS = "metrics"  # an output holding the step's metrics (reduced over the shards)


class SplitFns(NamedTuple):
    """The compiled pieces of the split schedule (all vmapped over seeds)."""

    collect: Any  # actor device
    critic: Any  # critic device
    actor: Any  # actor device
    critic_view: Any  # critic device: the packed critic view of a critic state
    stack_actor: Any  # actor device: K per-iteration metric dicts -> [K, S]
    stack_critic: Any  # critic device


class Packers(NamedTuple):
    """What crosses devices, each packed into one buffer."""

    to_critic: transfer.Packer | transfer.Identity  # (rollout, actor view, critic key)
    to_actor: transfer.Packer | transfer.Identity  # the critic view


class ForActor(NamedTuple):
    """What collect keeps on the actor device for the actor side (one seed)."""

    data: Any  # the [T, N] rollout (on-policy) or its observations (off-policy)
    key: jax.Array
    acted: jax.Array  # actor_updates of the parameters that acted


class Warmup(NamedTuple):
    """The compiled warm-up pieces: collect and store on the actor side, store on the critic;
    ``observe`` merges the observations into the actor side (None: the algorithm has none)."""

    collect: Any
    store: Any
    store_obs: Any
    observe: Any = None


def _stack_metrics(ms: list[Metrics]) -> Metrics:
    """K per-iteration metric dicts ``[S]`` -> one dict ``[K, S]``."""
    return jax.tree.map(lambda *x: jnp.stack(x), *ms)


@dataclass(eq=False)
class Split(DeviceSchedule):
    """The actor side on ``placement.actor``, the critic side on ``placement.critic``."""

    split: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._split_init()

    def _split_init(self) -> None:
        """The split's own attributes (after ``per_seed`` is set)."""
        self._warmup: Warmup | None = None
        self._pieces: SplitFns | None = None

    @functools.cached_property
    def packers(self) -> Packers:
        """How the pieces pack what crosses between the devices (from shapes: traced only
        when a piece is, not when every piece comes from the program cache)."""
        return self._make_packers()

    @property
    def pieces(self) -> SplitFns:
        """The compiled pieces (after :meth:`compile`)."""
        if self._pieces is None:
            raise RuntimeError("the split's pieces exist after compile()")
        return self._pieces

    # ------------------------------------------------------------ per-seed pieces, packed
    def _make_packers(self) -> Packers:
        """Packers for (rollout, actor view, key) and for the critic view, from shapes."""
        it = dataclasses.replace(self.per_seed, shards=None)  # one shard's shapes, no axes
        one = jax.eval_shape(it.init, jax.random.key(0))
        c = jax.eval_shape(it.collect, *one.to_collect())[4]
        to_critic = transfer.packer((c.traj, c.actor_view, c.critic_key))
        to_actor = transfer.packer(jax.eval_shape(self.algo.critic_view, one.agent.critic))
        return Packers(to_critic, to_actor)

    def split_collect(
        self, *args: Any
    ) -> tuple[EnvCarry, jax.Array, jax.Array, jax.Array, jax.Array, ForActor, Metrics]:
        """:meth:`Iteration.collect` (per seed, its arguments), packing what the critic side
        needs into one buffer."""
        env, key, env_steps, iteration, c, metrics = self.per_seed.collect(*args)
        packed = self.packers.to_critic.pack((c.traj, c.actor_view, c.critic_key))
        actor_data = c.traj if self.algo.on_policy else c.traj.obs
        for_actor = ForActor(actor_data, c.actor_key, c.acted)
        return env, key, env_steps, iteration, packed, for_actor, metrics

    def split_critic(
        self, critic: PyTree, buffer: replay.ReplayState | None, packed: jax.Array
    ) -> tuple[PyTree, replay.ReplayState | None, jax.Array, Metrics]:
        """The critic side (per seed); also the new critic's packed view for the actor side."""
        traj, actor_view, key = self.packers.to_critic.unpack(packed)
        critic, buffer, metrics = self.per_seed.critic_side(critic, buffer, traj, actor_view, key)
        return critic, buffer, self.split_critic_view(critic), metrics

    def split_actor(
        self,
        actor: PyTree,
        obs_buffer: replay.ReplayState | None,
        for_actor: ForActor,
        packed_view: jax.Array,
        actor_updates: jax.Array,
    ) -> tuple[PyTree, replay.ReplayState | None, jax.Array, Metrics]:
        """The actor side (per seed): store observations (off-policy), then the actor phase."""
        data, key, acted = for_actor
        obs = data.obs if self.algo.on_policy else data
        if not self.algo.on_policy:
            obs_buffer = self.per_seed.store_obs(obs_buffer, data)
            data = obs_buffer
        view = self.packers.to_actor.unpack(packed_view)
        actor, actor_updates, metrics = self.per_seed.actor_side(
            actor, data, view, key, actor_updates, acted, obs
        )
        return actor, obs_buffer, actor_updates, metrics

    def split_critic_view(self, critic: PyTree) -> jax.Array:
        """The packed critic view of a critic state (per seed)."""
        return self.packers.to_actor.pack(self.algo.critic_view(critic))

    # ------------------------------------------------------------ warm-up
    def _compile_warmup(self, state: TrainState) -> None:
        it, s, low = self.per_seed, state, self._lower
        collect = low(it.warmup_collect, ACTOR, (s.env, s.key, s.env_steps), (0, 1, 2, SHARD),
                      donate=(0, 1))  # fmt: skip
        traj = collect.out_info[3]
        observe = None
        if self.algo.observe is not None:
            observe = low(it.observe, ACTOR, (s.agent.actor, traj.obs), 0, donate=(0,)).compile()
        self._warmup = Warmup(
            collect=collect.compile(),
            store=low(it.store, CRITIC, (s.buffer, traj), 0, donate=(0,)).compile(),
            store_obs=low(it.store_obs, ACTOR, (s.obs_buffer, traj.obs), 0, donate=(0,)).compile(),
            observe=observe,
        )

    def warmup(self, state: TrainState) -> TrainState:
        """Random-action warm-up (off-policy; a no-op otherwise).

        The rollout is collected on the actor device, stored in the obs-only buffer there
        and moved to the critic device's buffer: the same contents as the fused warm-up.
        """
        if not self._warms_up():
            return state
        if self._warmup is None:
            self._compile_warmup(state)
        w = self._warmup
        env, key, env_steps, traj = w.collect(state.env, state.key, state.env_steps)
        obs_buffer = w.store_obs(state.obs_buffer, traj.obs)
        if w.observe is not None:  # the warm-up's observations into the actor side
            actor = w.observe(state.agent.actor, traj.obs)
            state = state._replace(agent=state.agent._replace(actor=actor))
        buffer = w.store(state.buffer, self._to_critic(traj))
        return state._replace(
            env=env, buffer=buffer, obs_buffer=obs_buffer, key=key, env_steps=env_steps
        )

    # ------------------------------------------------------------ onto the devices
    def _abstract(self, tree: PyTree, side: str) -> PyTree:
        """Abstract arrays shaped like ``tree`` on ``side``'s device (``ACTOR``, ``CRITIC``)."""
        p = self.placement
        return abstract_on(tree, p.actor if side == ACTOR else p.critic)

    def _lower(
        self,
        fn: Callable[..., Any],
        side: str,
        args: tuple[PyTree, ...],
        outs: Any,
        donate: tuple[int, ...] = (),
    ) -> Piece:
        """``fn`` (one seed) vmapped over the seeds, lowered for ``args`` on ``side`` (or
        the program :attr:`programs` kept for them): ``out_info`` and ``compile()``.

        ``outs`` says what each output is (read by the data-parallel split, where the
        outputs are laid out over a mesh): an argument's index (laid out like that
        argument), ``SHARD`` (one value per data-parallel shard, e.g. a packed transfer)
        or ``METRICS`` (the step's metrics, reduced over the shards); one of them when
        ``fn`` returns a single value.
        """
        del outs  # one device: nothing to lay out
        name = getattr(fn, "__name__", "piece")
        args = tuple(self._abstract(a, side) for a in args)
        return Piece(self.programs, name, jax.vmap(fn), args, donate)

    def _to_critic(self, tree: PyTree) -> PyTree:
        """``tree`` (on the actor side) copied to the critic side."""
        return jax.device_put(tree, self.placement.critic)

    def _to_actor(self, tree: PyTree) -> PyTree:
        """``tree`` (on the critic side) copied to the actor side."""
        return jax.device_put(tree, self.placement.actor)

    # ------------------------------------------------------------ compile and dispatch
    def _compile_chunk(self, state: TrainState) -> None:
        """Ahead-of-time compile every piece of the chunk for ``state``'s shapes."""
        s, low = state, self._lower
        collect = low(self.split_collect, ACTOR, s.to_collect(),
                      (1, 2, 3, 4, SHARD, SHARD, METRICS), donate=(1, 2))  # fmt: skip
        _, _, _, _, packed, for_actor, m_env = collect.out_info
        view = low(self.split_critic_view, CRITIC, (s.agent.critic,), SHARD)
        critic = low(self.split_critic, CRITIC, (s.agent.critic, s.buffer, packed),
                     (0, 1, SHARD, METRICS), donate=(0, 1))  # fmt: skip
        actor = low(
            self.split_actor, ACTOR,
            (s.agent.actor, s.obs_buffer, for_actor, view.out_info, s.actor_updates),
            (0, 1, 4, METRICS), donate=(1,),
        )  # fmt: skip
        k = self.iterations_per_chunk
        m_actor = {**m_env, **actor.out_info[3]}

        def stack(metrics: list[Metrics], side: str) -> jax.stages.Compiled:
            args = (self._abstract([metrics] * k, side),)
            return Piece(self.programs, "stack_metrics", _stack_metrics, args).compile()

        self._pieces = SplitFns(
            collect=collect.compile(),
            critic=critic.compile(),
            actor=actor.compile(),
            critic_view=view.compile(),
            stack_actor=stack(m_actor, ACTOR),
            stack_critic=stack(critic.out_info[3], CRITIC),
        )

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations dispatched from the host: critic and actor phases run concurrently.

        Returns the new state and the metrics ``[K, S]``. Dispatch is asynchronous:
        nothing here waits for the devices.
        """
        if self._pieces is None:
            self.compile(state)
        f, s = self._pieces, state
        actor, critic = s.agent
        env, buffer, obs_buffer, key = s.env, s.buffer, s.obs_buffer, s.key
        env_steps, iteration, actor_updates = s.env_steps, s.iteration, s.actor_updates
        view = self._to_actor(f.critic_view(critic))  # the critic at the start of the chunk
        m_actor, m_critic = [], []
        for _ in range(self.iterations_per_chunk):
            # collect (actor device); rollout + actor view + key go to the critic device
            env, key, env_steps, iteration, packed, for_actor, m_env = f.collect(
                actor, env, key, env_steps, iteration, actor_updates
            )
            packed = self._to_critic(packed)
            # critic side (critic device) | actor side (actor device): no host wait between
            critic, buffer, next_view, m_c = f.critic(critic, buffer, packed)
            actor, obs_buffer, actor_updates, m_a = f.actor(
                actor, obs_buffer, for_actor, view, actor_updates
            )
            # the critic as at the end of this iteration, for the next actor side
            view = self._to_actor(next_view)
            m_actor.append({**m_env, **m_a})
            m_critic.append(m_c)
        state = TrainState(
            AgentState(actor, critic),
            env,
            buffer,
            obs_buffer,
            key,
            env_steps,
            iteration,
            actor_updates,
        )
        return state, {**f.stack_actor(m_actor), **f.stack_critic(m_critic)}
