"""The host schedule: sampling workers step host envs while the learner updates, asynchronously.

For ``gymnasium/<id>`` and ``envpool/<task>`` envs (:mod:`jaxspreeze.host.hostenvs`), which
step on the host CPU. ``cfg.host_workers`` worker threads (:class:`~jaxspreeze.host.workers.
WorkerPool`) each step ``num_envs / host_workers`` envs with a jitted policy on the actor
device, acting with the newest parameters of a versioned slot, and hand ``[T, N/W]``
blocks of valid transitions (``T = rollout_steps``) to the learner through a bounded
queue. The learner (the trainer's main thread, inside :meth:`HostAsync.chunk`) runs one
iteration at a time::

    # data     take every queued block; while the learner is ahead of the target replay
    #          ratio, wait for more (Throttle.learner_may); store them in the device buffer
    # update   one jitted critic-then-actor step (grad_steps gradient steps, the staleness
    #          rule of jaxspreeze.schedules.iteration), env_steps += num_envs x rollout_steps
    # publish  the new actor (version + 1) for the workers

**Replay ratio.** The target is the device path's: ``grad_steps x batch_size`` update
samples per ``num_envs x rollout_steps`` env steps. The learner may run iteration ``i``
once ``warmup + i x num_envs x rollout_steps`` env steps were delivered; the workers wait
once they are :data:`AHEAD_ITERATIONS` iterations' worth of env steps ahead of the learner
(plus what sits in the queue, at most ``queue_size`` blocks, and one block per worker in
progress). So the measured ratio (``replay_ratio`` in the metrics: update samples per env
step delivered after the warm-up) stays within that bound of the target, and the env
steps a record counts (``env_steps``: the warm-up plus one iteration's worth per learner
iteration) are at most that bound behind the steps delivered (``worker_env_steps``).

**Two devices** (``placement.split``: ``--placement split``, or ``auto`` with two devices).
The learner splits as the device-env :class:`~jaxspreeze.schedules.Split` does: the critic,
the replay buffer and the critic phase on ``placement.critic``; the actor, an observation-
only copy of the buffer, the counters and the key, the actor phase and the workers' policy
on ``placement.actor``. Per iteration the host stores the blocks on both sides, moves the
critic's packed view (as at the start of the iteration) to the actor device, prepares the
keys and the actor's view (actor device, one packed ``device_put`` to the critic), then
dispatches the critic phase and the actor phase without waiting between them: the same
phases under the same staleness rule and keys as the one-device learner, so the two agree
to float rounding (``tests/test_host_split.py``: bitwise on two fake CPU devices).

**Warm-up.** The same workers act uniformly at random until ``learning_starts`` env
steps (rounded up to a multiple of ``num_envs``) were delivered and stored; then the
learner publishes the policy and starts updating.

**Metrics** (per iteration, ``[K, 1]``): the algorithm's losses; the episodes that ended in
the blocks stored; ``policy_lag`` (actor updates between the newest parameters after the
iteration's update and the oldest parameters that acted in its data; the device path's
rule gives ``actor_steps_per_iteration``) and ``policy_lag_versions`` (the same in
parameter versions, one per iteration); ``queue_depth`` (blocks waiting when the learner
came for data); ``learner_wait_s`` (time it waited for data); ``replay_ratio`` (measured)
and ``replay_ratio_target``; ``worker_env_steps`` (delivered, warm-up included) and
``worker<w>_steps_per_second`` / ``worker_steps_per_second`` (env steps/s of each worker
over its last block, and their sum).

**Resume.** The learner, the buffer, the counters and the keys are in the checkpoint; the
host envs' states are not (a simulator's state cannot be saved in general): a resumed run
starts new episodes (the policy's carries from ``initial_carry``), and its workers act
with new env seeds.

**Faults.** An exception in a worker (env step or policy) raises
:class:`~jaxspreeze.host.workers.WorkerError` naming the env and the worker from the next
chunk; a worker silent for ``stall_timeout`` seconds raises
:class:`~jaxspreeze.host.workers.WorkerStalledError`. :meth:`HostAsync.close` stops the workers
and closes the envs (the trainer calls it on every exit path).

Threads: the pool sets Python's switch interval to 0.5 ms while it runs (see
:mod:`jaxspreeze.host.workers`). XLA's CPU settings are left as they are: on a 2-core CPU the
learner's update is most of an iteration's work and runs faster on XLA's own threads;
:func:`cpu_settings` (one XLA thread per computation, no CPU async dispatch) made SAC on
gymnasium's Pendulum 1.1-2.4x slower there, in both the async and a synchronous loop
(experiments/results/host_async_cpu*.md, ``experiments/host_async_bench.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from jaxspreeze.algos.base import AgentState
from jaxspreeze.core.types import PyTree, Transition
from jaxspreeze.data import transfer
from jaxspreeze.host.workers import Batch, Throttle
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.schedules.host_base import EPISODE_AND_LAG_METRICS, HostFns, HostSchedule
from jaxspreeze.schedules.iteration import Metrics, TrainState, actor_update, critic_update

AHEAD_ITERATIONS = 2  # how many iterations' worth of env steps the workers may run ahead
QUEUE_BLOCKS = 2  # blocks the queue holds beside that
# one XLA CPU thread per computation, computations run in the calling thread: faster
# policy calls (experiments/host_sampling_bench.py), a slower learner on 2 cores
# (experiments/host_async_bench.py): opt-in, see cpu_settings
XLA_CPU_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

HOST_METRICS = (
    *EPISODE_AND_LAG_METRICS,
    "queue_depth",
    "learner_wait_s",
    "replay_ratio",
    "replay_ratio_target",
    "worker_env_steps",
    "worker_steps_per_second",
)


def cpu_settings() -> None:
    """Opt-in CPU settings for sampling-bound host-env runs; call before JAX's backend starts.

    Not applied by default (a learner-bound run on a few cores is slower with them; see
    the module doc). Adds :data:`XLA_CPU_FLAGS` to ``XLA_FLAGS`` (unless the user set
    those flags) and turns off JAX's CPU async dispatch (a CPU computation then runs in
    the thread that calls it, without the GIL: the workers' policy calls and the
    learner's updates do not queue behind each other in XLA's threads).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_FLAGS}".strip()
    jax.config.update("jax_cpu_enable_async_dispatch", False)


@dataclass(eq=False)
class HostAsync(HostSchedule):
    """Off-policy learning from host envs stepped by asynchronous sampling workers.

    One device: the learner (agent, buffer, counters, key) lives on ``placement.critic``
    and the workers' policy on ``placement.actor`` (the same device). A split placement
    splits the learner too (module doc): ``split`` is then True for this instance.
    """

    split: ClassVar[bool] = False  # (an instance of a split placement sets its own)
    metric_names: ClassVar[tuple[str, ...]] = HOST_METRICS

    def __post_init__(self) -> None:
        self.split = self.plan.placement.split  # the learner's phases on two devices
        super().__post_init__()
        cfg = self.cfg
        self.units = self.algo.critic_steps_per_iteration * cfg.batch_size  # update samples
        self.ratio = self.units / self.steps_per_iteration
        self.throttle = Throttle(
            self.ratio,
            max_ahead=AHEAD_ITERATIONS * self.steps_per_iteration,
            warmup=self.plan.warmup_steps,
        )
        self._last_lag = 0
        if self.split:  # what crosses devices each iteration, packed into one buffer
            one = jax.eval_shape(self.algo.init, jax.random.key(0))
            self._to_critic = transfer.packer(
                (jax.eval_shape(self.algo.actor_view, one.actor), jax.random.key(0))
            )
            self._to_actor = transfer.packer(jax.eval_shape(self.algo.critic_view, one.critic))
        self._random = jax.device_put(jnp.asarray(True), self.placement.actor)
        self._policy_on = jax.device_put(jnp.asarray(False), self.placement.actor)
        self._acting = self._random  # the flag the workers' policy gets: random until warm

    def _check_algorithm(self) -> None:
        """Off-policy algorithms only (on-policy ones train with HostRollout)."""
        if self.algo.on_policy:
            raise ValueError(f"{self.cfg.algo} is on-policy: host envs train it with HostRollout")

    # ------------------------------------------------------------ the per-seed pieces
    # the two-device learner: the same phases, keys and views as learn, side by side
    def split_prepare(self, actor: PyTree, key: jax.Array) -> tuple[jax.Array, Any, jax.Array]:
        """Actor side: the iteration's keys (split as :meth:`learn` splits them) and the
        actor's view for the critic side, packed with the critic's key."""
        key, k = jax.random.split(key)
        k_critic, k_actor = jax.random.split(k)
        return key, self._to_critic.pack((self.algo.actor_view(actor), k_critic)), k_actor

    def split_critic(self, critic: PyTree, buffer: Any, packed: Any) -> tuple[PyTree, Metrics]:
        """Critic side: the critic phase on the buffer against the actor's view."""
        actor_view, key = self._to_critic.unpack(packed)
        return critic_update(self.algo, critic, actor_view, buffer, key)

    def split_critic_view(self, critic: PyTree) -> Any:
        """The packed critic view of a critic state (for the actor side)."""
        return self._to_actor.pack(self.algo.critic_view(critic))

    def split_actor(
        self,
        actor: PyTree,
        obs_buffer: Any,
        packed_view: Any,
        key: jax.Array,
        env_steps: jax.Array,
        iteration: jax.Array,
        actor_updates: jax.Array,
    ) -> tuple[PyTree, jax.Array, jax.Array, jax.Array, Metrics]:
        """Actor side: the actor phase on the obs-only buffer against the critic's view."""
        view = self._to_actor.unpack(packed_view)
        actor, metrics = actor_update(self.algo, actor, view, obs_buffer, key)
        env_steps = env_steps + self.steps_per_iteration
        actor_updates = actor_updates + self.algo.actor_steps_per_iteration
        return actor, env_steps, iteration + 1, actor_updates, {**metrics, "env_steps": env_steps}

    def policy(
        self, params: tuple[PyTree, jax.Array], carry: Any, obs: jax.Array, key: jax.Array
    ) -> Any:
        """The workers' policy: ``params = (actor of one seed, random)``; random acts
        uniformly (the policy's carry still steps)."""
        actor, random = params
        k_act, k_rand = jax.random.split(key)
        action, carry = self.algo.act(actor, carry, obs, k_act, False)
        spec = self.env.spec
        if spec.discrete:
            uniform = jax.random.randint(k_rand, action.shape, 0, spec.action_dim)
        else:
            low = jnp.asarray(spec.action_low, jnp.float32)
            high = jnp.asarray(spec.action_high, jnp.float32)
            uniform = low + jax.random.uniform(k_rand, action.shape) * (high - low)
        return jnp.where(random, uniform.astype(action.dtype), action), carry

    # ------------------------------------------------------------ compile
    def compile(self, state: TrainState) -> None:
        """Compile the update, the store and the parameter copy; build the worker pool.

        The pool's envs are made here (construction errors surface before training), and
        the workers' policy is compiled for their batch shape; the workers start with the
        warm-up or the first chunk.
        """
        cfg, p = self.cfg, self.placement
        n = cfg.num_envs // cfg.host_workers
        example = jax.eval_shape(lambda: self.per_seed.init(jax.random.key(0)).buffer.data)
        block = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((1, cfg.rollout_steps, n, *x.shape[1:]), x.dtype),
            example,
        )
        store = jax.jit(jax.vmap(self.per_seed.store), donate_argnums=0)
        store = store.lower(abstract_on(state.buffer, p.critic), abstract_on(block, p.critic))
        fns = self._compile_split(state, block) if self.split else self._compile_one(state)
        actor_copy = self._compile_actor_copy(state.agent.actor, p.actor)
        self._fns = fns._replace(
            store=store.compile(),
            actor_copy=actor_copy,
            observe=self._compile_observe(state, block),
        )
        self._make_pool(state, queue_size=QUEUE_BLOCKS, throttle=self.throttle)

    def _actor_device(self) -> jax.Device:
        """Where the learner's actor side lives (split: the actor device)."""
        return self.placement.actor if self.split else self.learner

    def _compile_observe(self, state: TrainState, block: Transition) -> Any:
        """Compiled: a block's observations merged into the actor side (None: the
        algorithm has no ``observe``)."""
        if self.algo.observe is None:
            return None
        d = self._actor_device()
        fn = jax.jit(jax.vmap(self.per_seed.observe), donate_argnums=0)
        return fn.lower(abstract_on(state.agent.actor, d), abstract_on(block.obs, d)).compile()

    def _compile_one(self, state: TrainState) -> HostFns:
        """The one-device learner: the fused update (:meth:`learn` on the buffer)."""
        learn = lambda s: self.learn(s, s.buffer)
        update = jax.jit(jax.vmap(learn), donate_argnums=0).lower(abstract_on(state, self.learner))
        stack = self._compile_stack(update.out_info[1], self.learner)
        return HostFns(actor_copy=None, stack=stack, update=update.compile())

    def _compile_split(self, s: TrainState, block: Transition) -> HostFns:
        """The two-device learner: the split's phases, each on its side's device."""
        p, v = self.placement, jax.vmap
        a = lambda t: abstract_on(t, p.actor)
        c = lambda t: abstract_on(t, p.critic)
        store_obs = jax.jit(v(self.per_seed.store_obs), donate_argnums=0)
        store_obs = store_obs.lower(a(s.obs_buffer), a(block.obs))
        prepare = jax.jit(v(self.split_prepare)).lower(a(s.agent.actor), a(s.key))
        _, packed, k_actor = prepare.out_info
        critic = jax.jit(v(self.split_critic), donate_argnums=0)
        critic = critic.lower(c(s.agent.critic), c(s.buffer), c(packed))
        view = jax.jit(v(self.split_critic_view)).lower(c(s.agent.critic))
        actor = jax.jit(v(self.split_actor), donate_argnums=0).lower(
            a(s.agent.actor), a(s.obs_buffer), a(view.out_info), a(k_actor),
            a(s.env_steps), a(s.iteration), a(s.actor_updates),
        )  # fmt: skip
        return HostFns(
            actor_copy=None,
            stack=self._compile_stack(actor.out_info[4], p.actor),
            store_obs=store_obs.compile(),
            prepare=prepare.compile(),
            critic=critic.compile(),
            critic_view=view.compile(),
            actor=actor.compile(),
            stack_critic=self._compile_stack(critic.out_info[1], p.critic),
        )

    def _published(self, state: TrainState) -> tuple[PyTree, jax.Array]:
        """The workers' policy's params: a copy of the actor and whether to act randomly."""
        return super()._published(state), self._acting

    def _start(self, state: TrainState, *, warmup: bool = False) -> None:
        """Start the workers (module doc); randomly during the warm-up, which a run started
        without one (a resumed run) skips in the throttle too."""
        if not warmup:
            self.throttle.warmup = 0
            self._acting = self._policy_on
        super()._start(state, warmup=warmup)

    # ------------------------------------------------------------ warm-up and chunks
    def warmup(self, state: TrainState) -> TrainState:
        """Random actions from the workers until ``warmup_steps`` env steps are stored."""
        if not self._warms_up():
            return state
        self._start(state, warmup=True)
        assert self.pool is not None
        while self.pool.delivered < self.plan.warmup_steps:
            state = self._store(state, [self.pool.get(timeout=self.stall_timeout)])
        state = state._replace(env_steps=state.env_steps + self.plan.warmup_steps)
        self._acting = self._policy_on
        self._publish(state)
        return state

    # ------------------------------------------------------------ one learner iteration
    def _store(self, state: TrainState, batches: list[Batch]) -> TrainState:
        """Store blocks in the replay buffer (split: their observations on the actor side too)."""
        f, p = self._fns, self.placement
        assert f is not None
        buffer, obs_buffer, actor = state.buffer, state.obs_buffer, state.agent.actor
        for b in batches:
            block: Transition = jax.tree.map(lambda x: x[None], b.transition)  # [1, T, n]
            buffer = f.store(buffer, jax.device_put(block, p.critic))
            if self.split:
                obs_buffer = f.store_obs(obs_buffer, jax.device_put(block.obs, p.actor))
            if f.observe is not None:  # the running observation statistics (and the like)
                actor = f.observe(actor, jax.device_put(block.obs, self._actor_device()))
        agent = state.agent._replace(actor=actor)
        return state._replace(agent=agent, buffer=buffer, obs_buffer=obs_buffer)

    def _update(self, state: TrainState) -> tuple[TrainState, list[Metrics]]:
        """One critic-then-actor update (dispatched); its metrics, one dict per device."""
        f, p, put = self._fns, self.placement, jax.device_put
        assert f is not None
        if not self.split:
            state, metrics = f.update(state)
            return state, [metrics]
        s = state
        view = put(f.critic_view(s.agent.critic), p.actor)  # the critic at the start
        key, packed, k_actor = f.prepare(s.agent.actor, s.key)
        # critic phase (critic device) | actor phase (actor device): no host wait between
        critic, m_critic = f.critic(s.agent.critic, s.buffer, put(packed, p.critic))
        actor, env_steps, iteration, actor_updates, m_actor = f.actor(
            s.agent.actor, s.obs_buffer, view, k_actor, s.env_steps, s.iteration,
            s.actor_updates,
        )  # fmt: skip
        state = s._replace(
            agent=AgentState(actor, critic),
            key=key,
            env_steps=env_steps,
            iteration=iteration,
            actor_updates=actor_updates,
        )
        return state, [m_actor, m_critic]

    def learn_on(self, state: TrainState, batches: list[Batch]) -> tuple[TrainState, Metrics]:
        """Store ``batches`` and run one update: the learner's iteration without the workers
        (for tests and tools; compile() first). Metrics of the one iteration, ``[S]``."""
        state, metrics = self._update(self._store(state, batches))
        return state, {k: x for m in metrics for k, x in m.items()}

    def _iterate(
        self, state: TrainState, host: dict[str, list[float]], previous: list[Metrics] | None
    ) -> tuple[TrainState, list[Metrics]]:
        """Data (every queued block; more while the learner is ahead of the ratio), store,
        update, publish; at most two updates in flight (waits for ``previous``)."""
        pool, throttle = self.pool, self.throttle
        assert pool is not None
        # data
        t0 = time.perf_counter()
        batches = pool.poll()
        host["queue_depth"].append(len(batches))
        while not throttle.learner_may(self.units):
            batches.append(pool.get(timeout=self.stall_timeout))
        host["learner_wait_s"].append(time.perf_counter() - t0)
        # update
        state, metrics = self._update(self._store(state, batches))
        throttle.add_units(self.units)
        # publish
        self._version += 1
        self._publish(state)
        if previous is not None:
            jax.block_until_ready(previous)
        self._host_metrics(host, batches)
        return state, metrics

    def _host_metrics(self, host: dict[str, list[float]], batches: list[Batch]) -> None:
        """Append one iteration's host-side metrics (see the module doc)."""
        assert self.pool is not None
        if batches:  # versions between the newest parameters and the oldest that acted
            self._last_lag = max(b.policy_lag for b in batches) + 1
        self._record_lag(host, self._last_lag)
        host["replay_ratio"].append(self.throttle.replay_ratio())
        host["replay_ratio_target"].append(self.ratio)
        stats = self.pool.stats()
        rates = [stats[f"worker{w}_steps_per_second"] for w in range(self.pool.num_workers)]
        self._record_blocks(host, batches, rates)
