"""The on-policy host schedule: workers collect rollout k+1 while the learner trains on k.

For PPO (any algorithm with ``on_policy`` and a ``behaviour`` function) on ``gymnasium/<id>``
and ``envpool/<task>`` envs. ``cfg.host_workers`` worker threads
(:class:`~jaxspreeze.host.workers.WorkerPool`) each step ``num_envs / host_workers`` envs and
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
(and the policy's carries) are not: a resumed run starts new episodes with new env seeds
(the carries from ``initial_carry``), and its first two rollouts
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

from jaxspreeze.algos.base import BehaviourRollout
from jaxspreeze.core.types import PyTree, Transition
from jaxspreeze.host.workers import Batch
from jaxspreeze.schedules.base import abstract_on
from jaxspreeze.schedules.host_base import EPISODE_AND_LAG_METRICS, HostFns, HostSchedule
from jaxspreeze.schedules.iteration import Metrics, TrainState

MAX_LAG = 1  # versions between the learner's parameters and those that collect its data

HOST_METRICS = (
    *EPISODE_AND_LAG_METRICS,
    "learner_wait_s",
    "worker_env_steps",
    "worker_rows_dropped",
    "worker_steps_per_second",
)


@dataclass(eq=False)
class HostRollout(HostSchedule):
    """On-policy learning from rollouts of host envs, collected one version behind.

    The learner (agent, counters, key) lives on ``placement.critic``; the workers' policy
    runs on ``placement.actor`` (the same device unless the placement splits).
    """

    metric_names: ClassVar[tuple[str, ...]] = HOST_METRICS

    def _check_algorithm(self) -> None:
        """On-policy algorithms that report their behaviour policy only."""
        if not self.algo.on_policy or self.algo.behaviour is None:
            raise ValueError(
                f"{self.cfg.algo}: the rollout host schedule trains on-policy algorithms that "
                "report their behaviour policy (Algorithm.behaviour)"
            )

    def policy(self, actor: PyTree, carry: Any, obs: jax.Array, key: jax.Array) -> Any:
        """The workers' policy: sampled actions, the behaviour extras (PPO: log-probs) and
        the carry."""
        return self.algo.behaviour(actor, carry, obs, key)

    def _example_rollout(self) -> BehaviourRollout:
        """The abstract rollout ``[1, T, N, ...]`` the update takes."""
        cfg, spec = self.cfg, self.env.spec
        T, N = cfg.rollout_steps, cfg.num_envs
        actor = jax.eval_shape(self.algo.init, jax.random.key(0)).actor
        obs = jax.ShapeDtypeStruct((N, *spec.obs_shape), spec.obs_dtype)  # the env's dtype
        carry = jax.eval_shape(lambda: self.algo.initial_carry(N))
        action, extras, _ = jax.eval_shape(
            self.algo.behaviour, actor, carry, obs, jax.random.key(0)
        )
        f32 = lambda shape: jax.ShapeDtypeStruct((1, T, N, *shape), jnp.float32)
        seen = jax.ShapeDtypeStruct((1, T, N, *spec.obs_shape), spec.obs_dtype)
        traj = Transition(
            seen,
            jax.ShapeDtypeStruct((1, T, N, *action.shape[1:]), action.dtype),
            f32(()),
            jax.ShapeDtypeStruct((1, T, N), jnp.bool_),
            jax.ShapeDtypeStruct((1, T, N), jnp.bool_),
            seen,
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
        lrn = self.learner
        update = jax.jit(jax.vmap(self.learn), donate_argnums=0)
        update = update.lower(abstract_on(state, lrn), abstract_on(self._example_rollout(), lrn))
        self._fns = HostFns(
            actor_copy=self._compile_actor_copy(state.agent.actor, lrn),
            stack=self._compile_stack(update.out_info[1], lrn),
            update=update.compile(),
        )
        W = self.cfg.host_workers
        self._make_pool(state, queue_size=2 * W, max_lag=MAX_LAG, aligned=True)

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

    def _iterate(
        self, state: TrainState, host: dict[str, list[float]], previous: list[Metrics] | None
    ) -> tuple[TrainState, list[Metrics]]:
        """Rollout j, publish v_j, update on rollout j (module doc). No bound on updates in
        flight (``previous`` unused): rollout j+1 waits for v_j, so for update j-1."""
        pool, f = self.pool, self._fns
        assert pool is not None and f is not None
        # data: rollout j, collected with v_{j-1} (v_base for the first two)
        t0 = time.perf_counter()
        batches = pool.get_round(timeout=self.stall_timeout)
        host["learner_wait_s"].append(time.perf_counter() - t0)
        # publish v_j: the workers collect rollout j+1 with it while the learner updates
        if self._version > self._base:
            self._publish(state)
        # update
        state, metrics = f.update(state, self._rollout(batches))
        self._version += 1
        oldest = min(int(b.version.min()) for b in batches)
        self._record_lag(host, self._version - oldest)  # counting this iteration's update
        host["worker_rows_dropped"].append(float(sum(b.rows_dropped for b in batches)))
        self._record_blocks(host, batches, [b.steps_per_second for b in batches])
        return state, [metrics]
