"""The two-device schedule: the host dispatches each iteration's pieces to their devices.

Per iteration: collect (actor device), one ``device_put`` of the rollout + actor view +
key (packed into one buffer) to the critic device, the critic side and the actor side
back to back without waiting, and one ``device_put`` of the new critic view to the actor
device for the next iteration. Data dependencies alone order the work: collect(i+1)
waits for actor(i), actor(i+1) for the critic view of critic(i); critic(i) and actor(i)
overlap. The pieces are those of :class:`~jaxspreeze.iteration.Iteration`, so the split
agrees with the fused chunk to float rounding (bitwise where XLA compiles the pieces
alike). On one device (``dispatched=True``) it is the fused program cut at the split's
seams, for measuring the pieces. Compile logs and profiles name the pieces
``split_collect``, ``split_critic``, ``split_actor`` and ``split_critic_view``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import replay, transfer
from jaxspreeze.algos.base import AgentState
from jaxspreeze.iteration import Metrics, TrainState
from jaxspreeze.rollout import EnvCarry
from jaxspreeze.schedules.base import Schedule, abstract_on
from jaxspreeze.types import PyTree


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
    """The compiled warm-up pieces: collect and store on the actor side, store on the critic."""

    collect: Any
    store: Any
    store_obs: Any


def _stack_metrics(ms: list[Metrics]) -> Metrics:
    """K per-iteration metric dicts ``[S]`` -> one dict ``[K, S]``."""
    return jax.tree.map(lambda *x: jnp.stack(x), *ms)


@dataclass(eq=False)
class Split(Schedule):
    """The actor side on ``placement.actor``, the critic side on ``placement.critic``."""

    split: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.packers = self._make_packers()
        self._warmup: Warmup | None = None
        self._pieces: SplitFns | None = None

    @property
    def pieces(self) -> SplitFns:
        """The compiled pieces (after :meth:`compile`)."""
        if self._pieces is None:
            raise RuntimeError("the split's pieces exist after compile()")
        return self._pieces

    # ------------------------------------------------------------ per-seed pieces, packed
    def _make_packers(self) -> Packers:
        """Packers for (rollout, actor view, key) and for the critic view, from shapes."""
        it = self.per_seed
        one = jax.eval_shape(it.init, jax.random.key(0))
        c = jax.eval_shape(
            it.collect,
            one.agent.actor,
            one.env,
            one.key,
            one.env_steps,
            one.iteration,
            one.actor_updates,
        )[4]
        to_critic = transfer.packer((c.traj, c.actor_view, c.critic_key))
        to_actor = transfer.packer(jax.eval_shape(self.algo.critic_view, one.agent.critic))
        return Packers(to_critic, to_actor)

    def split_collect(
        self,
        actor: PyTree,
        env: EnvCarry,
        key: jax.Array,
        env_steps: jax.Array,
        iteration: jax.Array,
        actor_updates: jax.Array,
    ) -> tuple[EnvCarry, jax.Array, jax.Array, jax.Array, jax.Array, ForActor, Metrics]:
        """Collect (per seed), packing what the critic side needs into one buffer."""
        env, key, env_steps, iteration, c, metrics = self.per_seed.collect(
            actor, env, key, env_steps, iteration, actor_updates
        )
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
        if not self.algo.on_policy:
            obs_buffer = self.per_seed.store_obs(obs_buffer, data)
            data = obs_buffer
        actor, actor_updates, metrics = self.per_seed.actor_side(
            actor, data, self.packers.to_actor.unpack(packed_view), key, actor_updates, acted
        )
        return actor, obs_buffer, actor_updates, metrics

    def split_critic_view(self, critic: PyTree) -> jax.Array:
        """The packed critic view of a critic state (per seed)."""
        return self.packers.to_actor.pack(self.algo.critic_view(critic))

    # ------------------------------------------------------------ warm-up
    def _compile_warmup(self, state: TrainState) -> None:
        p, v, it = self.placement, jax.vmap, self.per_seed
        a = lambda t: abstract_on(t, p.actor)
        collect = jax.jit(v(it.warmup_collect), donate_argnums=(0, 1))
        collect = collect.lower(a(state.env), a(state.key), a(state.env_steps))
        traj = collect.out_info[3]
        store = jax.jit(v(it.store), donate_argnums=0)
        store_obs = jax.jit(v(it.store_obs), donate_argnums=0)
        self._warmup = Warmup(
            collect=collect.compile(),
            store=store.lower(
                abstract_on(state.buffer, p.critic), abstract_on(traj, p.critic)
            ).compile(),
            store_obs=store_obs.lower(a(state.obs_buffer), a(traj.obs)).compile(),
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
        buffer = w.store(state.buffer, jax.device_put(traj, self.placement.critic))
        return state._replace(
            env=env, buffer=buffer, obs_buffer=obs_buffer, key=key, env_steps=env_steps
        )

    # ------------------------------------------------------------ compile and dispatch
    def compile(self, state: TrainState) -> None:
        """Ahead-of-time compile every piece (and the warm-up) for ``state``'s shapes."""
        if self._warms_up():
            self._compile_warmup(state)
        p, v, s = self.placement, jax.vmap, state
        a = lambda t: abstract_on(t, p.actor)
        c = lambda t: abstract_on(t, p.critic)
        collect = jax.jit(v(self.split_collect), donate_argnums=(1, 2)).lower(
            a(s.agent.actor), a(s.env), a(s.key), a(s.env_steps), a(s.iteration),
            a(s.actor_updates),
        )  # fmt: skip
        _, _, _, _, packed, for_actor, m_env = collect.out_info
        view = jax.jit(v(self.split_critic_view)).lower(c(s.agent.critic))
        critic = jax.jit(v(self.split_critic), donate_argnums=(0, 1))
        critic = critic.lower(c(s.agent.critic), c(s.buffer), c(packed))
        actor = jax.jit(v(self.split_actor), donate_argnums=(1,)).lower(
            a(s.agent.actor), a(s.obs_buffer), a(for_actor), a(view.out_info),
            a(s.actor_updates),
        )  # fmt: skip
        k = self.iterations_per_chunk
        stack = jax.jit(_stack_metrics)
        m_actor = {**m_env, **actor.out_info[3]}
        self._pieces = SplitFns(
            collect=collect.compile(),
            critic=critic.compile(),
            actor=actor.compile(),
            critic_view=view.compile(),
            stack_actor=stack.lower(a([m_actor] * k)).compile(),
            stack_critic=stack.lower(c([critic.out_info[3]] * k)).compile(),
        )

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations dispatched from the host: critic and actor phases run concurrently.

        Returns the new state and the metrics ``[K, S]``. Dispatch is asynchronous:
        nothing here waits for the devices.
        """
        if self._pieces is None:
            self.compile(state)
        f, p, put, s = self._pieces, self.placement, jax.device_put, state
        actor, critic = s.agent
        env, buffer, obs_buffer, key = s.env, s.buffer, s.obs_buffer, s.key
        env_steps, iteration, actor_updates = s.env_steps, s.iteration, s.actor_updates
        view = put(f.critic_view(critic), p.actor)  # the critic at the start of the chunk
        m_actor, m_critic = [], []
        for _ in range(self.iterations_per_chunk):
            # collect (actor device); rollout + actor view + key go to the critic device
            env, key, env_steps, iteration, packed, for_actor, m_env = f.collect(
                actor, env, key, env_steps, iteration, actor_updates
            )
            packed = put(packed, p.critic)
            # critic side (critic device) | actor side (actor device): no host wait between
            critic, buffer, next_view, m_c = f.critic(critic, buffer, packed)
            actor, obs_buffer, actor_updates, m_a = f.actor(
                actor, obs_buffer, for_actor, view, actor_updates
            )
            # the critic as at the end of this iteration, for the next actor side
            view = put(next_view, p.actor)
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
