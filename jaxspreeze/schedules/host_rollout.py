"""The on-policy host schedule: workers collect rollout k+1 while the learner trains on k.

For PPO (any algorithm with ``on_policy`` and a ``behaviour`` function) on ``gymnasium/<id>``
and ``envpool/<task>`` envs. ``cfg.host_workers`` worker threads
(:class:`~jaxspreeze.workers.WorkerPool`) each step ``num_envs / host_workers`` envs and
deliver ``[T, N/W]`` blocks (``T = rollout_steps``); one block from every worker, in worker
order, is one rollout ``[T, N]``. A double-buffered pipeline, Cleanba's::

    # iteration j of the learner (the trainer's main thread, inside HostRollout.chunk)
    # data     wait for rollout j (one block per worker)
    # publish  the learner's parameters v_j (trained on rollouts 0 .. j-1) for the
    #          workers, who then collect rollout j+1 with them
    # update   one jitted PPO iteration on rollout j (epochs x minibatches, the same
    #          update_step and GAE as the device path) -> v_{j+1}, not yet published

**The lag rule.** Rollout j is collected with ``v_{j-1}`` (rollouts 0 and 1 with the initial
``v_0``): the parameters that act are exactly one version behind those the update starts
from (zero for the first rollout of a run or of a resume). The workers are lockstepped
(``WorkerPool(max_lag=1)``): a worker starts block ``b`` only once version ``b - 1`` is
published, and the learner publishes ``v_j`` only after it holds all of rollout j, so no
rollout mixes versions and a fixed seed gives the same run (on CPU, bitwise). envpool's
next-step reset rows are dropped, so an env whose column is full while another makes up
for a dropped row takes a step more, acting before the next version is out: the blocks are
``aligned`` (every env of a worker starts a block at the same env step; those extra rows
are dropped, ``worker_rows_dropped`` counts them, a few per episode end at most), which
keeps the rule exact for envpool too. PPO's ratio uses the
log-probabilities the workers computed when they acted (``algo.behaviour``), so it is taken
against the policy that really acted; the advantages use the learner's value function.

**Metrics** (per iteration, ``[K, 1]``): the algorithm's losses; the episodes that ended in
the rollout; ``policy_lag_versions`` (parameter versions between the newest parameters,
after the iteration's update, and the oldest that acted in its rollout, counted as every
schedule counts it: the device path's synchronous PPO gives 1; here 2, and 1 for the first
rollout) and ``policy_lag`` (the same in actor updates, ``epochs x minibatches`` per
version); ``learner_wait_s`` (time it waited for the rollout); ``worker_env_steps``
(delivered), ``worker_rows_dropped`` (env steps dropped to align the rollout) and
``worker<w>_steps_per_second`` / ``worker_steps_per_second``.

**Resume.** The learner, the counters and the key are in the checkpoint, the envs' states
are not: a resumed run starts new episodes with new env seeds, and its first two rollouts
are collected with the restored parameters (lag 0, then 1, as at the start).

Faults and threads as in :mod:`jaxspreeze.schedules.host_async`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.algos.base import AgentState, BehaviourRollout
from jaxspreeze.iteration import Metrics, TrainState, update_step
from jaxspreeze.schedules.base import Schedule, abstract_on
from jaxspreeze.schedules.host_async import CLOSE_TIMEOUT, STALL_TIMEOUT, _stack_metrics
from jaxspreeze.types import PyTree, Transition
from jaxspreeze.workers import Batch, ParamSlot, WorkerPool

MAX_LAG = 1  # versions between the learner's parameters and those that collect its data

HOST_METRICS = (
    "episode_return_sum",
    "episode_length_sum",
    "episodes",
    "policy_lag",
    "policy_lag_versions",
    "learner_wait_s",
    "worker_env_steps",
    "worker_rows_dropped",
    "worker_steps_per_second",
)


@dataclass(eq=False)
class HostRollout(Schedule):
    """On-policy learning from rollouts of host envs, collected one version behind.

    The learner (agent, counters, key) lives on ``placement.critic``; the workers' policy
    runs on ``placement.actor`` (the same device unless the placement splits).
    """

    split: ClassVar[bool] = False
    host: ClassVar[bool] = True  # the trainer evaluates and closes it as a host-env schedule

    stall_timeout: float = STALL_TIMEOUT

    def __post_init__(self) -> None:
        super().__post_init__()
        cfg = self.cfg
        if not self.algo.on_policy or self.algo.behaviour is None:
            raise ValueError(
                f"{cfg.algo}: the rollout host schedule trains on-policy algorithms that "
                "report their behaviour policy (Algorithm.behaviour)"
            )
        if cfg.num_seeds != 1:
            raise ValueError("host envs train one seed per run")
        if cfg.num_envs % cfg.host_workers:
            raise ValueError(f"num_envs {cfg.num_envs} must split over {cfg.host_workers} workers")
        self.learner = self.placement.critic
        self.steps_per_iteration = cfg.steps_per_iteration
        self.slot = ParamSlot(device=self.placement.actor)
        self.pool: WorkerPool | None = None
        self._started = False
        self._version = 0  # the learner's parameter version (= its iteration count)
        self._base = 0  # the version the workers started with
        self._max_lag = 0  # the largest policy_lag (actor updates) measured so far
        self._fns: Any = None

    # ------------------------------------------------------------ state on the learner
    def place(self, state: TrainState) -> TrainState:
        """Commit the whole state to the learner's device."""
        return jax.device_put(state, self.learner)

    @property
    def policy_lag(self) -> int:
        """The largest policy lag (actor updates) measured so far in this process."""
        return self._max_lag

    # ------------------------------------------------------------ the per-seed pieces
    def learn(self, s: TrainState, rollout: BehaviourRollout) -> tuple[TrainState, Metrics]:
        """One learner iteration for one seed: the critic-then-actor step on the rollout."""
        key, k = jax.random.split(s.key)
        agent, metrics = update_step(self.algo, s.agent, rollout, k)
        state = s._replace(
            agent=AgentState(*agent),
            key=key,
            env_steps=s.env_steps + self.steps_per_iteration,
            iteration=s.iteration + 1,
            actor_updates=s.actor_updates + self.algo.actor_steps_per_iteration,
        )
        return state, {**metrics, "env_steps": state.env_steps}

    def policy(self, actor: PyTree, obs: jax.Array, key: jax.Array) -> Any:
        """The workers' policy: sampled actions and the behaviour extras (PPO: log-probs)."""
        return self.algo.behaviour(actor, obs, key)

    def _example_rollout(self) -> BehaviourRollout:
        """The abstract rollout ``[1, T, N, ...]`` the update takes."""
        cfg, spec = self.cfg, self.env.spec
        T, N = cfg.rollout_steps, cfg.num_envs
        actor = jax.eval_shape(self.algo.init, jax.random.key(0)).actor
        obs = jax.ShapeDtypeStruct((N, *spec.obs_shape), jnp.float32)
        action, extras = jax.eval_shape(self.algo.behaviour, actor, obs, jax.random.key(0))
        f32 = lambda shape: jax.ShapeDtypeStruct((1, T, N, *shape), jnp.float32)
        traj = Transition(
            f32(spec.obs_shape),
            jax.ShapeDtypeStruct((1, T, N, *action.shape[1:]), action.dtype),
            f32(()),
            jax.ShapeDtypeStruct((1, T, N), jnp.bool_),
            jax.ShapeDtypeStruct((1, T, N), jnp.bool_),
            f32(spec.obs_shape),
        )
        extras = {
            k: jax.ShapeDtypeStruct((1, T, N, *v.shape[1:]), v.dtype) for k, v in extras.items()
        }
        return BehaviourRollout(traj, extras)

    # ------------------------------------------------------------ compile
    def compile(self, state: TrainState) -> None:
        """Compile the update and the parameter copy; build (and compile) the worker pool.

        The pool's envs are made here (construction errors surface before training); the
        workers start with the first chunk.
        """
        cfg, lrn = self.cfg, self.learner
        update = jax.jit(jax.vmap(self.learn), donate_argnums=0)
        update = update.lower(abstract_on(state, lrn), abstract_on(self._example_rollout(), lrn))
        actor_copy = jax.jit(lambda a: jax.tree.map(lambda x: x[0], a))
        actor_copy = actor_copy.lower(abstract_on(state.agent.actor, lrn))
        k = self.iterations_per_chunk
        stack = jax.jit(_stack_metrics).lower(abstract_on([update.out_info[1]] * k, lrn))
        self._fns = (update.compile(), actor_copy.compile(), stack.compile())
        if self.pool is None:
            W = cfg.host_workers
            self._publish(state, 0)
            self.pool = WorkerPool(
                cfg.env,
                self.policy,
                self.slot,
                num_workers=W,
                envs_per_worker=cfg.num_envs // W,
                rollout_steps=cfg.rollout_steps,
                queue_size=2 * W,
                max_lag=MAX_LAG,
                aligned=True,
                seed=cfg.seed,
                key=jax.random.key(cfg.seed + 20_000),
                stall_timeout=self.stall_timeout,
            )
            self.pool.compile()

    def _publish(self, state: TrainState, version: int) -> None:
        """Hand the state's actor (a copy) to the workers as ``version``."""
        self.slot.publish(self._fns[1](state.agent.actor), version, copy=False)

    def _start(self, state: TrainState) -> None:
        """Start the workers acting with ``state``'s actor (a resumed run: new episodes)."""
        if self._fns is None:
            self.compile(state)
        assert self.pool is not None
        self._version = self._base = int(jax.device_get(state.iteration).reshape(-1)[0])
        if self._version:  # a resumed run: episodes restart with seeds of their own
            self.pool.seeds = [s + 1_000_003 * self._version for s in self.pool.seeds]
        self._publish(state, self._version)
        self.pool.start()
        self._started = True

    # ------------------------------------------------------------ warm-up and chunks
    def warmup(self, state: TrainState) -> TrainState:
        """No warm-up: on-policy learning starts from the first rollout."""
        return state

    def _rollout(self, batches: list[Batch]) -> BehaviourRollout:
        """One block per worker -> the rollout ``[1, T, N, ...]`` on the learner's device."""
        cat = lambda *x: np.concatenate(x, axis=1)[None]
        traj = jax.tree.map(cat, *[b.transition for b in batches])
        extras = jax.tree.map(cat, *[b.extras for b in batches])
        return jax.device_put(BehaviourRollout(traj, extras), self.learner)

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """K learner iterations, each on the newest rollout; returns the metrics ``[K, 1]``.

        Waits for each rollout as it goes: a chunk ends once its K updates are dispatched.
        """
        if not self._started:
            self._start(state)
        update, _, stack = self._fns
        pool = self.pool
        assert pool is not None
        per_version = self.algo.actor_steps_per_iteration
        host: dict[str, list[float]] = {k: [] for k in HOST_METRICS}
        device: list[Metrics] = []
        for _ in range(self.iterations_per_chunk):
            # data: rollout j, collected with v_{j-1} (v_base for the first two)
            t0 = time.perf_counter()
            batches = pool.get_round(timeout=self.stall_timeout)
            host["learner_wait_s"].append(time.perf_counter() - t0)
            # publish v_j: the workers collect rollout j+1 with it while the learner updates
            if self._version > self._base:
                self._publish(state, self._version)
            state, metrics = update(state, self._rollout(batches))
            self._version += 1
            device.append(metrics)
            oldest = min(int(b.version.min()) for b in batches)
            lag = self._version - oldest  # versions, counting this iteration's update
            self._max_lag = max(self._max_lag, lag * per_version)
            host["policy_lag_versions"].append(float(lag))
            host["policy_lag"].append(float(lag * per_version))
            self._host_metrics(host, batches)
        out = stack(device)
        k = self.iterations_per_chunk
        for name, values in host.items():
            out[name] = jnp.asarray(np.asarray(values, np.float32).reshape(k, 1))
        return state, out

    def _host_metrics(self, host: dict[str, list[float]], batches: list[Batch]) -> None:
        """Append one iteration's episode and worker metrics (see the module doc)."""
        assert self.pool is not None
        host["episode_return_sum"].append(float(sum(b.episode_returns.sum() for b in batches)))
        host["episode_length_sum"].append(float(sum(b.episode_lengths.sum() for b in batches)))
        host["episodes"].append(float(sum(len(b.episode_returns) for b in batches)))
        host["worker_env_steps"].append(float(self.pool.delivered))
        host["worker_rows_dropped"].append(float(sum(b.rows_dropped for b in batches)))
        rates = [b.steps_per_second for b in batches]
        host["worker_steps_per_second"].append(float(sum(rates)))
        for w, rate in enumerate(rates):
            host.setdefault(f"worker{w}_steps_per_second", []).append(rate)

    def close(self) -> list[str]:
        """Stop the workers and close their envs; names the threads that did not stop."""
        if self.pool is None:
            return []
        return self.pool.close(CLOSE_TIMEOUT)
