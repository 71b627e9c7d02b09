"""What the two host-env schedules share: the worker pool, the parameter slot, the chunk's loop.

:class:`~jaxspreeze.schedules.HostAsync` (off-policy) and
:class:`~jaxspreeze.schedules.HostRollout` (on-policy) run host envs (``gymnasium/<id>``,
``envpool/<task>``) on ``cfg.host_workers`` sampling threads
(:class:`~jaxspreeze.host.workers.WorkerPool`) and one learner on ``placement.critic``. They
differ in how one learner iteration gets its data and when it publishes; the rest is
:class:`HostSchedule`'s::

    # set-up     one seed; num_envs split evenly over the workers; the slot on the actor device
    # compile    the subclass's programs; then publish the initial actor (version 0), build
    #            the pool (its envs: construction errors surface before training) and
    #            compile the workers' policy for their batch shape
    # start      the first chunk (or the warm-up): the version = the state's iteration; a
    #            resumed run starts new episodes with env seeds of their own; publish, start
    # chunk      K x the subclass's _iterate (data, update, publish, host metrics), then the
    #            device metrics stacked [K, S] and the host metrics [K, 1]
    # close      stop the workers, close their envs (the trainer calls it on every exit path)

Host metrics both record per iteration: the episodes that ended in the data
(``episode_return_sum``, ``episode_length_sum``, ``episodes``), ``policy_lag_versions`` and
``policy_lag`` (the same in actor updates), ``worker_env_steps`` (delivered) and
``worker<w>_steps_per_second`` / ``worker_steps_per_second`` (their sum).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.algos.base import AgentState
from jaxspreeze.core.types import PyTree
from jaxspreeze.host.workers import Batch, ParamSlot, WorkerPool
from jaxspreeze.schedules.base import Schedule, abstract_on
from jaxspreeze.schedules.iteration import Metrics, TrainState, update_step

STALL_TIMEOUT = 60.0  # seconds a worker may stay inside one env step or policy call
CLOSE_TIMEOUT = 10.0  # seconds close() waits for the workers to stop
RESEED = 1_000_003  # a resumed run's env seeds move by this many per parameter version
POLICY_KEY_OFFSET = 20_000  # the workers' policy key: cfg.seed + this
# the host metrics both schedules record first (:meth:`HostSchedule._record_lag`, and
# :meth:`HostSchedule._record_blocks` with worker_env_steps and the workers' rates)
EPISODE_AND_LAG_METRICS = (
    "episode_return_sum",
    "episode_length_sum",
    "episodes",
    "policy_lag",
    "policy_lag_versions",
)


def stack_metrics(ms: list[Metrics]) -> Metrics:
    """K per-iteration metric dicts ``[S]`` -> one dict ``[K, S]``."""
    return jax.tree.map(lambda *x: jnp.stack(x), *ms)


class HostFns(NamedTuple):
    """The learner's compiled pieces (vmapped over the seed axis); None where unused."""

    actor_copy: Any  # the published actor (one seed)
    stack: Any  # K metric dicts -> [K, S] (split: the actor device's)
    update: Any = None  # one device: the fused critic-then-actor step
    store: Any = None  # off-policy, critic device: blocks -> replay buffer
    store_obs: Any = None  # split, actor device: blocks' observations -> obs-only buffer
    observe: Any = None  # actor's device: blocks' observations -> the actor side (algo.observe)
    prepare: Any = None  # split, actor device: keys and the packed actor view
    critic: Any = None  # split, critic device: the critic phase
    critic_view: Any = None  # split, critic device: the packed critic view
    actor: Any = None  # split, actor device: the actor phase and the counters
    stack_critic: Any = None  # split, critic device


@dataclass(eq=False)
class HostSchedule(Schedule):
    """Learning from host envs stepped by sampling workers (the shared part; module doc).

    A subclass checks its algorithm, compiles its programs (:meth:`_compile_stack`,
    :meth:`_compile_actor_copy`, then :meth:`_make_pool`), names its workers' policy and
    runs one learner iteration in :meth:`_iterate`.
    """

    host: ClassVar[bool] = True  # the trainer evaluates and closes it as a host-env schedule
    metric_names: ClassVar[tuple[str, ...]] = ()  # the host metrics of an iteration

    stall_timeout: float = STALL_TIMEOUT

    def __post_init__(self) -> None:
        super().__post_init__()
        cfg = self.cfg
        self._check_algorithm()
        if cfg.num_seeds != 1:
            raise ValueError("host envs train one seed per run")
        if cfg.num_envs % cfg.host_workers:
            raise ValueError(f"num_envs {cfg.num_envs} must split over {cfg.host_workers} workers")
        self.learner = self.placement.critic
        self.steps_per_iteration = self.plan.steps_per_iteration
        self.slot = ParamSlot(device=self.placement.actor)
        self.pool: WorkerPool | None = None
        self._started = False
        self._version = 0  # the learner's parameter version (= its iteration count)
        self._base = 0  # the version the workers started with
        self._max_lag = 0  # the largest policy_lag (actor updates) measured so far
        self._fns: HostFns | None = None

    @abstractmethod
    def _check_algorithm(self) -> None:
        """Raise ValueError when this schedule does not train ``self.algo``."""

    # ------------------------------------------------------------ state on the learner
    def place(self, state: TrainState) -> TrainState:
        """Commit the whole state to the learner's device (split: each side to its own)."""
        if self.split:
            return super().place(state)
        return jax.device_put(state, self.learner)

    @property
    def policy_lag(self) -> int:
        """The largest policy lag (actor updates) measured so far in this process."""
        return self._max_lag

    def learn(self, s: TrainState, data: Any) -> tuple[TrainState, Metrics]:
        """One learner iteration for one seed: the critic-then-actor step on ``data`` (the
        replay buffer, or a rollout)."""
        key, k = jax.random.split(s.key)
        agent, metrics = update_step(self.algo, s.agent, data, k)
        state = s._replace(
            agent=AgentState(*agent),
            key=key,
            env_steps=s.env_steps + self.steps_per_iteration,
            iteration=s.iteration + 1,
            actor_updates=s.actor_updates + self.algo.actor_steps_per_iteration,
        )
        return state, {**metrics, "env_steps": state.env_steps}

    # ------------------------------------------------------------ compile
    def _compile_actor_copy(self, actor: PyTree, device: jax.Device) -> Any:
        """Compiled: seed 0's actor (a copy, to publish), for an actor on ``device``."""
        copy = jax.jit(lambda a: jax.tree.map(lambda x: x[0], a))
        return copy.lower(abstract_on(actor, device)).compile()

    def _compile_stack(self, metrics: Metrics, device: jax.Device) -> Any:
        """Compiled: K iterations' metric dicts shaped like ``metrics`` -> one ``[K, S]``."""
        k = self.iterations_per_chunk
        return jax.jit(stack_metrics).lower(abstract_on([metrics] * k, device)).compile()

    def _make_pool(self, state: TrainState, **gates: Any) -> None:
        """Publish ``state``'s actor, build the worker pool (``gates``: its queue size and
        throttle or lockstep) and compile the workers' policy; once per schedule."""
        if self.pool is not None:
            return
        cfg, W = self.cfg, self.cfg.host_workers
        self._publish(state)
        self.pool = WorkerPool(
            cfg.env,
            self.policy,
            self.slot,
            num_workers=W,
            envs_per_worker=cfg.num_envs // W,
            rollout_steps=cfg.rollout_steps,
            seed=cfg.seed,
            key=jax.random.key(cfg.seed + POLICY_KEY_OFFSET),
            stall_timeout=self.stall_timeout,
            initial_carry=self.algo.initial_carry,
            **gates,
        )
        self.pool.compile()

    @abstractmethod
    def policy(self, params: Any, carry: Any, obs: jax.Array, key: jax.Array) -> Any:
        """The workers' policy on published params, with the envs' carries (a worker keeps
        and resets them: :class:`~jaxspreeze.host.workers.WorkerPool`'s ``initial_carry``)."""

    # ------------------------------------------------------------ publish and start
    def _published(self, state: TrainState) -> PyTree:
        """What the workers' policy takes: here a copy of ``state``'s actor (seed 0)."""
        assert self._fns is not None  # (compile() first)
        return self._fns.actor_copy(state.agent.actor)

    def _publish(self, state: TrainState) -> None:
        """Hand ``state``'s actor (a copy) to the workers as the current version."""
        self.slot.publish(self._published(state), self._version, copy=False)

    def _start(self, state: TrainState, *, warmup: bool = False) -> None:
        """Start the workers acting with ``state``'s actor (after a warm-up: its state).

        A resumed run starts here without a warm-up: new episodes, new env seeds.
        """
        if self._fns is None:
            self.compile(state)
        assert self.pool is not None
        self._version = self._base = int(jax.device_get(state.iteration).reshape(-1)[0])
        if self._version and not warmup:  # a resumed run: episodes restart, seeds of their own
            self.pool.seeds = [s + RESEED * self._version for s in self.pool.seeds]
        self._publish(state)
        self.pool.start()
        self._started = True

    # ------------------------------------------------------------ chunks
    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """K learner iterations fed by the workers; returns the state and metrics ``[K, 1]``.

        Waits for data as it goes: a chunk ends once its K updates are dispatched.
        """
        if not self._started:
            self._start(state)
        host: dict[str, list[float]] = {k: [] for k in self.metric_names}
        device: list[list[Metrics]] = []
        for _ in range(self.iterations_per_chunk):
            state, metrics = self._iterate(state, host, device[-1] if device else None)
            device.append(metrics)
        out = self._stack(device)
        k = self.iterations_per_chunk
        for name, values in host.items():
            out[name] = jnp.asarray(np.asarray(values, np.float32).reshape(k, 1))
        return state, out

    @abstractmethod
    def _iterate(
        self, state: TrainState, host: dict[str, list[float]], previous: list[Metrics] | None
    ) -> tuple[TrainState, list[Metrics]]:
        """One learner iteration: data, update (dispatched), publish; appends its host
        metrics to ``host``. Returns its device metrics, one dict per device;
        ``previous`` is the chunk's previous iteration's (None for its first)."""

    def _stack(self, device: list[list[Metrics]]) -> Metrics:
        """K iterations' metric dicts (one per device) -> one dict ``[K, S]``."""
        f = self._fns
        assert f is not None
        out = f.stack([m[0] for m in device])
        if f.stack_critic is None:
            return out
        return {**out, **f.stack_critic([m[1] for m in device])}

    # ------------------------------------------------------------ host metrics
    def _record_lag(self, host: dict[str, list[float]], versions: int) -> None:
        """Append the iteration's policy lag: ``versions``, and in actor updates."""
        updates = versions * self.algo.actor_steps_per_iteration
        self._max_lag = max(self._max_lag, updates)
        host["policy_lag_versions"].append(float(versions))
        host["policy_lag"].append(float(updates))

    def _record_blocks(
        self, host: dict[str, list[float]], batches: list[Batch], rates: list[float]
    ) -> None:
        """Append the episodes that ended in ``batches``, the env steps delivered so far and
        the workers' env steps/s (``rates``, in worker order)."""
        assert self.pool is not None
        host["episode_return_sum"].append(float(sum(b.episode_returns.sum() for b in batches)))
        host["episode_length_sum"].append(float(sum(b.episode_lengths.sum() for b in batches)))
        host["episodes"].append(float(sum(len(b.episode_returns) for b in batches)))
        host["worker_env_steps"].append(float(self.pool.delivered))
        host["worker_steps_per_second"].append(float(sum(rates)))
        for w, rate in enumerate(rates):
            host.setdefault(f"worker{w}_steps_per_second", []).append(rate)

    def close(self) -> list[str]:
        """Stop the workers and close their envs; names the threads that did not stop."""
        if self.pool is None:
            return []
        return self.pool.close(CLOSE_TIMEOUT)
