"""The device side: the training iteration and the jitted chunk, for a Placement.

One iteration (per seed)::

    # views       av = actor_view(actor), cv = critic_view(critic)   (start of iteration)
    # collect     rollout T steps x N envs with the current policy   (actor device)
    # store       add the transitions to the replay buffer           (critic device;
                  the actor device keeps an observation-only copy when split)
    # update      critic phase(critic, av, buffer)  |  actor phase(actor, cv, obs)

Staleness rule: each side updates against the other side's parameters as they were at
the start of the iteration, i.e. after the previous iteration. The two phases are
therefore independent and run concurrently on two devices; on one device the very same
functions are fused into one ``lax.scan`` program and give the same numbers. The
parameters that acted in an iteration are ``actor_steps_per_iteration`` actor updates
behind the newest ones at its end: that is the reported ``policy_lag``.

Every leaf of :class:`TrainState` has a leading seed axis ``[S]``: the functions here are
written for one seed and vmapped. Nothing here touches threads, files or clocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import algos, replay
from jaxspreeze.algos.base import AgentState, Algorithm
from jaxspreeze.config import RunConfig
from jaxspreeze.devices import Placement
from jaxspreeze.envs import VecEnv, make_env
from jaxspreeze.rollout import EnvCarry, Episodes, env_init, random_policy, rollout
from jaxspreeze.types import ObsOnly, PyTree, Transition


class TrainState(NamedTuple):
    """Everything a run carries between chunks; each leaf is ``[S, ...]`` (seeds)."""

    agent: AgentState  # .actor on the actor device, .critic on the critic device
    env: EnvCarry  # actor device
    buffer: replay.ReplayState | None  # critic device (off-policy only)
    obs_buffer: replay.ReplayState | None  # actor device (off-policy, split only)
    key: jax.Array  # actor device
    env_steps: jax.Array  # env steps taken by this seed, warm-up included
    iteration: jax.Array


Metrics = dict[str, jax.Array]


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


@dataclass(eq=False)
class Loop:
    """The jitted pieces of training for one config and placement."""

    cfg: RunConfig
    placement: Placement
    env: VecEnv = field(init=False)
    algo: Algorithm = field(init=False)
    trace_count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.env = make_env(cfg.env, cfg.num_envs)
        self.algo = algos.get(cfg.algo).make(cfg.algo_config, self.env.spec, cfg)
        self.iterations_per_chunk, self.num_chunks = chunking(cfg)
        self._compiled: dict[str, Any] = {}

    # ---------------------------------------------------------------- per-seed maths
    def _init_one(self, key: jax.Array) -> TrainState:
        k_agent, k_env, key = jax.random.split(key, 3)
        agent = self.algo.init(k_agent)
        env = env_init(self.env, k_env)
        buffer = obs_buffer = None
        if not self.algo.on_policy:
            example = _example_transition(self.env)
            buffer = replay.init(example, self.cfg.buffer_size)
            if self.placement.split:
                obs_buffer = replay.init(ObsOnly(example.obs), self.cfg.buffer_size)
        zero = jnp.zeros((), jnp.int32)
        return TrainState(agent, env, buffer, obs_buffer, key, zero, zero)

    def _collect(self, actor: PyTree, env: EnvCarry, obs_buffer, key: jax.Array):
        """Actor side: roll out the policy; keep the observations when split."""
        key, k_roll, k_critic, k_actor = jax.random.split(key, 4)
        policy = lambda obs, k: self.algo.act(actor, obs, k, False)
        env, traj, eps = rollout(self.env, policy, env, k_roll, self.cfg.rollout_steps)
        if obs_buffer is not None:
            obs_buffer = replay.add_rollout(obs_buffer, ObsOnly(traj.obs))
        return env, traj, eps, obs_buffer, key, k_critic, k_actor

    def _update_critic(self, critic: PyTree, buffer, traj: Transition, actor_view, key):
        """Critic side: store the new transitions, then the critic phase."""
        if self.algo.on_policy:
            data = traj
        else:
            buffer = replay.add_rollout(buffer, traj)
            data = buffer
        critic, metrics = self.algo.critic_phase(critic, actor_view, data, key)
        return critic, buffer, metrics

    def _update_actor(self, actor: PyTree, data, critic_view, key):
        """Actor side: the actor phase on the rollout (on-policy) or the (obs) buffer."""
        return self.algo.actor_phase(actor, critic_view, data, key)

    def _metrics(self, cm: Metrics, am: Metrics, eps: Episodes, env_steps) -> Metrics:
        ret_sum = jnp.where(eps.done, eps.returns, 0.0).sum()
        len_sum = jnp.where(eps.done, eps.lengths, 0).sum()
        m = {k: v for k, v in {**cm, **am}.items() if k != "finite"}
        m["critic_finite"] = cm.get("finite", jnp.array(True))
        m["actor_finite"] = am.get("finite", jnp.array(True))
        m["episode_return_sum"] = ret_sum
        m["episode_length_sum"] = len_sum.astype(jnp.float32)
        m["episodes"] = eps.done.sum().astype(jnp.float32)
        m["env_steps"] = env_steps
        m["policy_lag"] = jnp.asarray(self.algo.actor_steps_per_iteration, jnp.float32)
        return m

    def _iteration(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """One iteration for one seed, composed of the same pieces the split uses."""
        self.trace_count += 1
        # views of the other side, as at the start of the iteration (staleness rule)
        actor_view = self.algo.actor_view(s.agent.actor)
        critic_view = self.algo.critic_view(s.agent.critic)
        # collect
        env, traj, eps, obs_buffer, key, k_critic, k_actor = self._collect(
            s.agent.actor, s.env, s.obs_buffer, s.key
        )
        # store + update critic
        critic, buffer, cm = self._update_critic(
            s.agent.critic, s.buffer, traj, actor_view, k_critic
        )
        # update actor
        actor_data = traj if self.algo.on_policy else buffer
        actor, am = self._update_actor(s.agent.actor, actor_data, critic_view, k_actor)
        env_steps = s.env_steps + self.cfg.steps_per_iteration
        state = TrainState(
            AgentState(actor, critic), env, buffer, obs_buffer, key, env_steps, s.iteration + 1
        )
        return state, self._metrics(cm, am, eps, env_steps)

    def _warmup_one(self, s: TrainState) -> TrainState:
        """Fill the buffer with random-action transitions (off-policy only)."""
        steps = self.cfg.warmup_steps // self.cfg.num_envs
        key, k = jax.random.split(s.key)
        env, traj, _ = rollout(self.env, random_policy(self.env), s.env, k, steps)
        buffer = replay.add_rollout(s.buffer, traj)
        obs_buffer = s.obs_buffer
        if obs_buffer is not None:
            obs_buffer = replay.add_rollout(obs_buffer, ObsOnly(traj.obs))
        return s._replace(
            env=env,
            buffer=buffer,
            obs_buffer=obs_buffer,
            key=key,
            env_steps=s.env_steps + steps * self.cfg.num_envs,
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
        state = jax.jit(jax.vmap(self._init_one))(keys)
        return self.place(state)

    def place(self, state: TrainState) -> TrainState:
        """Commit each part of ``state`` to its device (a no-op on one device)."""
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
        )

    def warmup(self, state: TrainState) -> TrainState:
        """Random-action warm-up (off-policy; a no-op otherwise)."""
        if self.cfg.warmup_steps == 0:
            return state
        fn = self._compiled.get("warmup")
        if fn is None:
            fn = jax.jit(jax.vmap(self._warmup_one), donate_argnums=0)
        if not self.placement.split:
            return fn(state)
        # warm up on the actor device, then move the buffer to the critic side
        buf = state.buffer
        state = fn(self.place_all(state, self.placement.actor))
        return self.place(
            state._replace(
                buffer=jax.device_put(state.buffer, self.placement.critic)
                if buf is not None
                else None
            )
        )

    def place_all(self, state: TrainState, device: jax.Device) -> TrainState:
        """Every part of ``state`` on one device."""
        return jax.device_put(state, device)

    def compile(self, state: TrainState) -> float:
        """Ahead-of-time compile the chunk (and warm-up); returns seconds spent."""
        import time

        t0 = time.perf_counter()
        if self.cfg.warmup_steps:
            warm = jax.jit(jax.vmap(self._warmup_one), donate_argnums=0)
            warm_state = (
                state if not self.placement.split else self.place_all(state, self.placement.actor)
            )
            self._compiled["warmup"] = warm.lower(warm_state).compile()
        if self.placement.split:
            self._compile_split(state)
        else:
            chunk = jax.jit(self._chunk_fused, donate_argnums=0)
            self._compiled["chunk"] = chunk.lower(state).compile()
        return time.perf_counter() - t0

    def chunk(self, state: TrainState) -> tuple[TrainState, Any]:
        """Run one chunk of K iterations; returns the new state and the metrics ``[K, S]``.

        Dispatch is asynchronous: nothing here waits for the device.
        """
        if "chunk" not in self._compiled and "collect" not in self._compiled:
            self.compile(state)
        if not self.placement.split:
            return self._compiled["chunk"](state)
        return self._chunk_split(state)

    # ---------------------------------------------------------------- the split schedule
    def _split_fns(self):
        v = jax.vmap
        collect = v(self._collect)
        critic = v(self._update_critic)
        actor = v(self._update_actor)
        return collect, critic, actor

    def _compile_split(self, state: TrainState) -> None:
        p = self.placement
        collect, critic, actor = self._split_fns()
        collect_j = jax.jit(collect, donate_argnums=(1, 2))
        critic_j = jax.jit(critic, donate_argnums=(0, 1))
        actor_j = jax.jit(actor, donate_argnums=(0,))
        av = jax.device_put(self.algo.actor_view(state.agent.actor), p.critic)
        cv = jax.device_put(self.algo.critic_view(state.agent.critic), p.actor)
        out = jax.eval_shape(collect, state.agent.actor, state.env, state.obs_buffer, state.key)
        traj_shape = out[1]
        self._compiled["collect"] = collect_j.lower(
            state.agent.actor, state.env, state.obs_buffer, state.key
        ).compile()
        traj_c = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=jax.sharding.SingleDeviceSharding(p.critic)
            ),
            traj_shape,
        )
        k_shape = jax.ShapeDtypeStruct(
            state.key.shape, state.key.dtype, sharding=jax.sharding.SingleDeviceSharding(p.critic)
        )
        self._compiled["critic"] = critic_j.lower(
            state.agent.critic, state.buffer, traj_c, av, k_shape
        ).compile()
        actor_data = traj_shape if self.algo.on_policy else state.obs_buffer
        self._compiled["actor"] = actor_j.lower(
            state.agent.actor, actor_data, cv, state.key
        ).compile()
        self.trace_count = 1  # the iteration's pieces were traced once each

    def _chunk_split(self, s: TrainState) -> tuple[TrainState, list[Metrics]]:
        """K iterations dispatched from the host: critic and actor phases run concurrently."""
        p = self.placement
        c = self._compiled
        put = jax.device_put
        metrics = []
        for _ in range(self.iterations_per_chunk):
            # views of the other side, as at the start of the iteration (staleness rule)
            actor_view = put(self.algo.actor_view(s.agent.actor), p.critic)
            critic_view = put(self.algo.critic_view(s.agent.critic), p.actor)
            # collect (actor device)
            env, traj, eps, obs_buffer, key, k_critic, k_actor = c["collect"](
                s.agent.actor, s.env, s.obs_buffer, s.key
            )
            # store + update critic (critic device) | update actor (actor device)
            critic, buffer, cm = c["critic"](
                s.agent.critic, s.buffer, put(traj, p.critic), actor_view, put(k_critic, p.critic)
            )
            actor_data = traj if self.algo.on_policy else obs_buffer
            actor, am = c["actor"](s.agent.actor, actor_data, critic_view, k_actor)
            env_steps = s.env_steps + self.cfg.steps_per_iteration
            s = TrainState(
                AgentState(actor, critic), env, buffer, obs_buffer, key, env_steps, s.iteration + 1
            )
            metrics.append(jax.vmap(self._metrics)(put(cm, p.actor), am, eps, env_steps))
        return s, metrics


def chunking(cfg: RunConfig) -> tuple[int, int]:
    """(iterations per chunk, number of chunks) covering ``cfg.num_iterations``.

    Chunks are equal-sized so one program serves the whole run; the total is rounded up
    by fewer than ``num_chunks`` iterations.
    """
    n = max(cfg.num_iterations, 1)
    num_chunks = math.ceil(n / cfg.chunk_iterations)
    return math.ceil(n / num_chunks), num_chunks
