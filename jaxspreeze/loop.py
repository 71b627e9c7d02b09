"""The device side: the training iteration and the jitted chunk, for a Placement.

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
depend on each other and run at the same time on two devices.

- ``single`` placement: the three pieces are composed into one function, vmapped over
  seeds and fused over K iterations into one ``lax.scan`` program.
- ``split`` placement: the host dispatches, per iteration, collect (actor device), one
  ``device_put`` of the rollout + actor view + key (packed into one buffer) to the critic
  device, the critic side and the actor side back to back without waiting, and one
  ``device_put`` of the new critic view to the actor device for the next iteration.
  Data dependencies alone order the work: collect(i+1) waits for actor(i), actor(i+1)
  for the critic view of critic(i); critic(i) and actor(i) overlap.

Both placements run the same per-seed functions on the same inputs, so they agree to
float rounding (bitwise where XLA compiles the pieces alike). ``policy_lag`` is derived
from counters: ``actor_updates`` after the actor phase minus ``actor_updates`` of the
parameters that acted, i.e. ``actor_steps_per_iteration`` under this rule.

Every leaf of :class:`TrainState` has a leading seed axis ``[S]``: the functions here are
written for one seed and vmapped. Nothing here touches threads, files or clocks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import algos, replay, transfer
from jaxspreeze.algos.base import AgentState, Algorithm
from jaxspreeze.config import RunConfig
from jaxspreeze.devices import Placement
from jaxspreeze.envs import VecEnv, make_env
from jaxspreeze.rollout import EnvCarry, env_init, random_policy, rollout
from jaxspreeze.types import ObsOnly, PyTree, Transition

Metrics = dict[str, jax.Array]


class TrainState(NamedTuple):
    """Everything a run carries between chunks; each leaf is ``[S, ...]`` (seeds)."""

    agent: AgentState  # .actor on the actor device, .critic on the critic device
    env: EnvCarry  # actor device
    buffer: replay.ReplayState | None  # critic device (off-policy only)
    obs_buffer: replay.ReplayState | None  # actor device (off-policy, split only)
    key: jax.Array  # actor device
    env_steps: jax.Array  # env steps taken by this seed, warm-up included (actor device)
    iteration: jax.Array  # iterations done (actor device)
    actor_updates: jax.Array  # actor gradient steps applied so far (actor device)


class Collected(NamedTuple):
    """What collect hands to the two sides of one iteration (one seed)."""

    traj: Transition  # [T, N, ...]
    actor_view: PyTree  # the acting policy's view for the critic side
    critic_key: jax.Array
    actor_key: jax.Array
    acted: jax.Array  # actor_updates of the parameters that acted


class SplitFns(NamedTuple):
    """The compiled pieces of the split schedule (all vmapped over seeds)."""

    collect: Any  # actor device
    critic: Any  # critic device
    actor: Any  # actor device
    critic_view: Any  # critic device: the packed critic view of a critic state
    stack_actor: Any  # actor device: K per-iteration metric dicts -> [K, S]
    stack_critic: Any  # critic device


def _example_transition(env: VecEnv) -> Transition:
    spec = env.spec
    obs = jnp.zeros(spec.obs_shape, jnp.float32)
    action = jnp.zeros(spec.action_shape, jnp.int32 if spec.discrete else jnp.float32)
    return Transition(
        obs, action, jnp.zeros((), jnp.float32), jnp.zeros((), bool), jnp.zeros((), bool), obs
    )


def buffer_nbytes(cfg: RunConfig, env: VecEnv | None = None) -> int:
    """Bytes of the replay buffer(s) for all seeds, computed before allocation."""
    if cfg.algo == "ppo":
        return 0
    env = env or make_env(cfg.env, cfg.num_envs)
    example = _example_transition(env)
    return replay.nbytes(example, cfg.buffer_size) * cfg.num_seeds


def _split_metrics(metrics: Metrics, prefix: str) -> Metrics:
    """A phase's metrics with its ``finite`` flag renamed ``<prefix>_finite``."""
    m = {k: v for k, v in metrics.items() if k != "finite"}
    m[f"{prefix}_finite"] = jnp.asarray(metrics.get("finite", True)).astype(bool)
    return m


def _spec(tree: PyTree, device: jax.Device) -> PyTree:
    """Abstract arrays shaped like ``tree``, committed to ``device`` (for AOT lowering)."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


@dataclass(eq=False)
class Loop:
    """The jitted pieces of training for one config and placement.

    ``algo`` defaults to ``algos.get(cfg.algo).make(...)``; pass one to train a custom
    :class:`~jaxspreeze.algos.base.Algorithm`. ``dispatched`` runs the split's
    host-dispatched schedule (default: exactly when the placement splits); on one
    device it is the fused program cut at the split's seams, for measuring the pieces.
    """

    cfg: RunConfig
    placement: Placement
    algo: Algorithm | None = None
    dispatched: bool | None = None
    env: VecEnv = field(init=False)
    trace_count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.env = make_env(cfg.env, cfg.num_envs)
        if self.algo is None:
            self.algo = algos.get(cfg.algo).make(cfg.algo_config, self.env.spec, cfg)
        if self.dispatched is None:
            self.dispatched = self.placement.split
        self.iterations_per_chunk, self.num_chunks = chunking(cfg)
        self._compiled: dict[str, Any] = {}
        self._split: SplitFns | None = None
        self._packers: tuple[Any, Any] | None = None

    @property
    def split(self) -> bool:
        """True when the host dispatches the split schedule (two devices, or measuring)."""
        return bool(self.dispatched)

    @property
    def pieces(self) -> SplitFns:
        """The compiled pieces of the dispatched schedule (after :meth:`compile`)."""
        if self._split is None:
            raise RuntimeError("pieces exist for a dispatched loop after compile()")
        return self._split

    @property
    def policy_lag(self) -> int:
        """Actor updates between the parameters that act and the newest ones (the rule)."""
        return self.algo.actor_steps_per_iteration

    # ---------------------------------------------------------------- per-seed pieces
    def _init_one(self, key: jax.Array) -> TrainState:
        k_agent, k_env, key = jax.random.split(key, 3)
        agent = self.algo.init(k_agent)
        env = env_init(self.env, k_env)
        buffer = obs_buffer = None
        if not self.algo.on_policy:
            example = _example_transition(self.env)
            buffer = replay.init(example, self.cfg.buffer_size)
            if self.split:
                obs_buffer = replay.init(ObsOnly(example.obs), self.cfg.buffer_size)
        zero = jnp.zeros((), jnp.int32)
        return TrainState(agent, env, buffer, obs_buffer, key, zero, zero, zero)

    def _collect(
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
        policy = lambda obs, k: self.algo.act(actor, obs, k, False)
        env, traj, eps = rollout(self.env, policy, env, k_roll, self.cfg.rollout_steps)
        env_steps = env_steps + self.cfg.steps_per_iteration
        metrics = {
            "episode_return_sum": jnp.where(eps.done, eps.returns, 0.0).sum(),
            "episode_length_sum": jnp.where(eps.done, eps.lengths, 0).sum().astype(jnp.float32),
            "episodes": eps.done.sum().astype(jnp.float32),
            "env_steps": env_steps,
        }
        collected = Collected(traj, self.algo.actor_view(actor), k_critic, k_actor, actor_updates)
        return env, key, env_steps, iteration + 1, collected, metrics

    def _critic_side(
        self,
        critic: PyTree,
        buffer: replay.ReplayState | None,
        traj: Transition,
        actor_view: PyTree,
        key: jax.Array,
    ) -> tuple[PyTree, replay.ReplayState | None, Metrics]:
        """Critic side: store the new transitions, then the critic phase."""
        if self.algo.on_policy:
            data = traj
        else:
            buffer = replay.add_rollout(buffer, traj)
            data = buffer
        critic, metrics = self.algo.critic_phase(critic, actor_view, data, key)
        return critic, buffer, _split_metrics(metrics, "critic")

    def _actor_side(
        self,
        actor: PyTree,
        data: Any,
        critic_view: PyTree,
        key: jax.Array,
        actor_updates: jax.Array,
        acted: jax.Array,
    ) -> tuple[PyTree, jax.Array, Metrics]:
        """Actor side: the actor phase on the rollout (on-policy) or the (obs) buffer."""
        actor, metrics = self.algo.actor_phase(actor, critic_view, data, key)
        actor_updates = actor_updates + self.algo.actor_steps_per_iteration
        metrics = _split_metrics(metrics, "actor")
        metrics["policy_lag"] = (actor_updates - acted).astype(jnp.float32)
        return actor, actor_updates, metrics

    def _iteration(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """One iteration for one seed on one device, composed of the split's pieces."""
        self.trace_count += 1
        # the critic view as at the start of the iteration (staleness rule)
        critic_view = self.algo.critic_view(s.agent.critic)
        # collect
        env, key, env_steps, iteration, c, m_env = self._collect(
            s.agent.actor, s.env, s.key, s.env_steps, s.iteration, s.actor_updates
        )
        # store + update critic
        critic, buffer, m_critic = self._critic_side(
            s.agent.critic, s.buffer, c.traj, c.actor_view, c.critic_key
        )
        # update actor (independent of the critic phase: same inputs as on two devices)
        data = c.traj if self.algo.on_policy else buffer
        actor, actor_updates, m_actor = self._actor_side(
            s.agent.actor, data, critic_view, c.actor_key, s.actor_updates, c.acted
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

    def _warmup_collect(
        self, env: EnvCarry, key: jax.Array, env_steps: jax.Array
    ) -> tuple[EnvCarry, jax.Array, jax.Array, Transition]:
        """Random-action rollout of ``cfg.warmup_steps`` env steps (actor side)."""
        steps = self.cfg.warmup_steps // self.cfg.num_envs
        key, k = jax.random.split(key)
        env, traj, _ = rollout(self.env, random_policy(self.env), env, k, steps)
        return env, key, env_steps + steps * self.cfg.num_envs, traj

    def _store_obs(self, obs_buffer: replay.ReplayState, obs: jax.Array) -> replay.ReplayState:
        """Actor side of the split: add ``[T, N, ...]`` observations to the obs-only buffer."""
        return replay.add_rollout(obs_buffer, ObsOnly(obs))

    def _warmup_one(self, s: TrainState) -> TrainState:
        """Fill the buffer(s) with random-action transitions (off-policy only)."""
        env, key, env_steps, traj = self._warmup_collect(s.env, s.key, s.env_steps)
        buffer = replay.add_rollout(s.buffer, traj)
        obs_buffer = s.obs_buffer
        if obs_buffer is not None:
            obs_buffer = self._store_obs(obs_buffer, traj.obs)
        return s._replace(
            env=env, buffer=buffer, obs_buffer=obs_buffer, key=key, env_steps=env_steps
        )

    def _chunk_fused(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations of all seeds in one program: ``scan(vmap(iteration))``."""
        step = lambda s, _: jax.vmap(self._iteration)(s)
        return jax.lax.scan(step, s, None, length=self.iterations_per_chunk)

    # ---------------------------------------------------------------- host-facing API
    def init(self, seed: int | None = None) -> TrainState:
        """A fresh state for all seeds (seed i uses ``cfg.seed + i``), placed on devices."""
        seed = self.cfg.seed if seed is None else seed
        keys = jnp.stack([jax.random.key(seed + i) for i in range(self.cfg.num_seeds)])
        if "init" not in self._compiled:  # one program per Loop, however often init is called
            self._compiled["init"] = jax.jit(jax.vmap(self._init_one))
        return self.place(self._compiled["init"](keys))

    def place(self, state: TrainState) -> TrainState:
        """Commit each part of ``state`` to its device."""
        p = self.placement
        put = jax.device_put
        return TrainState(
            AgentState(put(state.agent.actor, p.actor), put(state.agent.critic, p.critic)),
            put(state.env, p.actor),
            put(state.buffer, p.critic),
            put(state.obs_buffer, p.actor),
            put(state.key, p.actor),
            put(state.env_steps, p.actor),
            put(state.iteration, p.actor),
            put(state.actor_updates, p.actor),
        )

    def warmup(self, state: TrainState) -> TrainState:
        """Random-action warm-up (off-policy; a no-op otherwise).

        Split: the rollout is collected on the actor device, stored in the obs-only
        buffer there and moved to the critic device's buffer: the same contents as single.
        """
        if self.cfg.warmup_steps == 0 or self.algo.on_policy:
            return state
        if "warmup" not in self._compiled:
            self._compile_warmup(state)
        c = self._compiled
        if not self.split:
            return c["warmup"](state)
        env, key, env_steps, traj = c["warmup_collect"](state.env, state.key, state.env_steps)
        obs_buffer = c["warmup_store_obs"](state.obs_buffer, traj.obs)
        buffer = c["warmup_store"](state.buffer, jax.device_put(traj, self.placement.critic))
        return state._replace(
            env=env, buffer=buffer, obs_buffer=obs_buffer, key=key, env_steps=env_steps
        )

    def _compile_warmup(self, state: TrainState) -> None:
        p, v = self.placement, jax.vmap
        if not self.split:
            fn = jax.jit(v(self._warmup_one), donate_argnums=0)
            self._compiled["warmup"] = fn.lower(state).compile()
            return
        a = lambda t: _spec(t, p.actor)
        collect = jax.jit(v(self._warmup_collect), donate_argnums=(0, 1))
        args = (a(state.env), a(state.key), a(state.env_steps))
        traj = jax.eval_shape(v(self._warmup_collect), *args)[3]
        store = jax.jit(v(lambda b, t: replay.add_rollout(b, t)), donate_argnums=0)
        store_obs = jax.jit(v(self._store_obs), donate_argnums=0)
        self._compiled.update(
            warmup=True,
            warmup_collect=collect.lower(*args).compile(),
            warmup_store=store.lower(
                _spec(state.buffer, p.critic), _spec(traj, p.critic)
            ).compile(),
            warmup_store_obs=store_obs.lower(a(state.obs_buffer), a(traj.obs)).compile(),
        )

    def compile(self, state: TrainState) -> float:
        """Ahead-of-time compile the chunk (and warm-up); returns seconds spent."""
        t0 = time.perf_counter()
        if self.cfg.warmup_steps and not self.algo.on_policy:
            self._compile_warmup(state)
        if self.split:
            self._compile_split(state)
        else:
            chunk = jax.jit(self._chunk_fused, donate_argnums=0)
            self._compiled["chunk"] = chunk.lower(state).compile()
        return time.perf_counter() - t0

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """Run one chunk of K iterations; returns the new state and the metrics ``[K, S]``.

        Dispatch is asynchronous: nothing here waits for the device.
        """
        if self.split:
            if self._split is None:
                self.compile(state)
            return self._chunk_split(state)
        if "chunk" not in self._compiled:
            self.compile(state)
        return self._compiled["chunk"](state)

    # ---------------------------------------------------------------- the split schedule
    def _split_packers(self) -> tuple[Any, Any]:
        """Packers for what crosses devices: (rollout, actor view, key) and the critic view."""
        if self._packers is None:
            one = jax.eval_shape(self._init_one, jax.random.key(0))
            c = jax.eval_shape(
                self._collect,
                one.agent.actor,
                one.env,
                one.key,
                one.env_steps,
                one.iteration,
                one.actor_updates,
            )[4]
            to_critic = transfer.packer((c.traj, c.actor_view, c.critic_key))
            to_actor = transfer.packer(jax.eval_shape(self.algo.critic_view, one.agent.critic))
            self._packers = (to_critic, to_actor)
        return self._packers

    def _split_collect(self, actor, env, key, env_steps, iteration, actor_updates):
        """Collect, packing what the critic side needs into one buffer."""
        self.trace_count += 1
        to_critic, _ = self._split_packers()
        env, key, env_steps, iteration, c, metrics = self._collect(
            actor, env, key, env_steps, iteration, actor_updates
        )
        packed = to_critic.pack((c.traj, c.actor_view, c.critic_key))
        actor_data = c.traj if self.algo.on_policy else c.traj.obs
        return env, key, env_steps, iteration, packed, (actor_data, c.actor_key, c.acted), metrics

    def _split_critic(self, critic, buffer, packed):
        """The critic side; also returns the new critic's packed view for the actor side."""
        to_critic, to_actor = self._split_packers()
        traj, actor_view, key = to_critic.unpack(packed)
        critic, buffer, metrics = self._critic_side(critic, buffer, traj, actor_view, key)
        return critic, buffer, to_actor.pack(self.algo.critic_view(critic)), metrics

    def _split_actor(self, actor, obs_buffer, for_actor, packed_view, actor_updates):
        """The actor side: store observations (off-policy), then the actor phase."""
        _, to_actor = self._split_packers()
        data, key, acted = for_actor
        if not self.algo.on_policy:
            obs_buffer = self._store_obs(obs_buffer, data)
            data = obs_buffer
        actor, actor_updates, metrics = self._actor_side(
            actor, data, to_actor.unpack(packed_view), key, actor_updates, acted
        )
        return actor, obs_buffer, actor_updates, metrics

    def _compile_split(self, state: TrainState) -> None:
        p, v, s = self.placement, jax.vmap, state
        a = lambda t: _spec(t, p.actor)
        c = lambda t: _spec(t, p.critic)
        _, to_actor = self._split_packers()
        collect = jax.jit(v(self._split_collect), donate_argnums=(1, 2)).lower(
            a(s.agent.actor), a(s.env), a(s.key), a(s.env_steps), a(s.iteration),
            a(s.actor_updates),
        )  # fmt: skip
        _, _, _, _, packed, for_actor, m_env = collect.out_info
        view = jax.jit(v(lambda x: to_actor.pack(self.algo.critic_view(x))))
        view = view.lower(c(s.agent.critic))
        critic = jax.jit(v(self._split_critic), donate_argnums=(0, 1))
        critic = critic.lower(c(s.agent.critic), c(s.buffer), c(packed))
        actor = jax.jit(v(self._split_actor), donate_argnums=(1,)).lower(
            a(s.agent.actor), a(s.obs_buffer), a(for_actor), a(view.out_info),
            a(s.actor_updates),
        )  # fmt: skip
        k = self.iterations_per_chunk
        stack = jax.jit(lambda ms: jax.tree.map(lambda *x: jnp.stack(x), *ms))
        m_actor = {**m_env, **actor.out_info[3]}
        self._split = SplitFns(
            collect=collect.compile(),
            critic=critic.compile(),
            actor=actor.compile(),
            critic_view=view.compile(),
            stack_actor=stack.lower(a([m_actor] * k)).compile(),
            stack_critic=stack.lower(c([critic.out_info[3]] * k)).compile(),
        )

    def _chunk_split(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations dispatched from the host: critic and actor phases run concurrently."""
        f, p, put = self._split, self.placement, jax.device_put
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


def chunking(cfg: RunConfig) -> tuple[int, int]:
    """(iterations per chunk, number of chunks) covering ``cfg.num_iterations``.

    Chunks are equal-sized so one program serves the whole run; the total is rounded up
    by fewer than ``num_chunks`` iterations.
    """
    n = max(cfg.num_iterations, 1)
    num_chunks = math.ceil(n / cfg.chunk_iterations)
    return math.ceil(n / num_chunks), num_chunks
