"""Asynchronous sampling workers for host envs: Spreeze's actors, for a learner to consume.

W worker threads each own a batch of host envs (:mod:`jaxspreeze.hostenvs`), act with a
jitted policy on the actor device using the newest parameters of a versioned
:class:`ParamSlot`, and hand time-major blocks of transitions to the learner through a
bounded queue. envpool and gymnasium's async vectorisation step their envs outside the
GIL (envpool's ``send``/``recv``); with ``batch_size < num_envs`` an envpool worker runs
its policy on one half of its envs while the other half steps.

The learner's side (the async schedule builds on exactly this)::

    slot = ParamSlot(device=actor_device)
    slot.publish(actor_params, version=0)               # before start(); copies the params
    throttle = Throttle(ratio=..., max_ahead=..., warmup=learning_starts)
    with WorkerPool("envpool/HalfCheetah-v5", policy_fn, slot, num_workers=2,
                    envs_per_worker=8, rollout_steps=4, throttle=throttle) as pool:
        while ...:
            while not throttle.learner_may(units):      # learner ahead: wait for data
                add_to_buffer(pool.get(timeout=60))     # Batch; raises a worker's error
            for batch in pool.poll():                   # data that is there anyway
                add_to_buffer(batch)
            state = update(state); throttle.add_units(units)
            slot.publish(actor_params(state), version)  # version + 1 after each publish

- ``policy_fn(params, obs [B, *obs_shape], key) -> actions`` (``[B]`` int for discrete,
  ``[B, d]`` float inside the bounds) or ``-> (actions, extras)`` with ``extras`` a dict of
  ``[B, ...]`` arrays kept per row (e.g. PPO's log-probabilities and values). It is jitted
  once per pool (compiled in :meth:`WorkerPool.start`, apart from sampling) and called
  with params committed to the slot's device, so it runs there.
- A :class:`Batch` is ``rollout_steps`` consecutive *valid* transitions of each of one
  worker's ``N`` envs: ``transition`` leaves are numpy ``[T, N, ...]``, each column in
  time order (reset rows of next-step-reset libraries are dropped, never counted), with
  the policy ``version`` that acted on each row, the episodes that ended in it, the
  worker's env steps/s over the block, and ``policy_lag`` (see below) stamped at delivery.
- :class:`Throttle` holds a replay ratio (learner units, e.g. update samples, per env step
  delivered): :meth:`WorkerPool.get` counts the env steps it delivers; the learner counts
  its units and may run while ``units + u <= ratio * (env_steps - warmup)``; workers wait
  (before each env step) while ``env_steps >= warmup + units / ratio + max_ahead``. Both
  cannot wait at once when ``max_ahead >= u / ratio`` (checked).
- **Policy lag** of a block: the slot's version when the block is delivered minus the
  oldest version that acted in it. Free-running workers (``max_lag=None``) always act with
  the newest parameters; a block's lag then grows with the time it spends in the queue and
  is measured, not bounded. ``max_lag=k`` makes the workers lockstep with the learner: a
  worker starts its ``b``-th block (from 0) only once the slot's version is at least
  ``v0 + b - k`` (``v0``: the version at start). A learner that takes one block from every
  worker (:meth:`WorkerPool.get_round`) and then publishes the next version sees a lag of
  at most ``k`` on every row (``k=0``: synchronous on-policy; ``k=1``: Cleanba's actors
  one version behind). With next-step-reset libraries (envpool) the envs of a worker may
  drift apart by the reset rows they skip; the rows of an env that ran ahead into the next
  block are then older, and the drift accumulates over a run. ``aligned=True`` (for
  on-policy learners) starts every block at the same env step for all of a worker's envs:
  the rows an env took beyond its ``T`` while another made up for a dropped reset row
  are dropped (counted in ``Batch.rows_dropped``; episodes still count them), so with
  ``max_lag=k`` every row of block ``b`` acted with a version of at least ``v0 + b - k``.
- Faults: an exception inside a worker (env or policy) stops all workers and is raised
  by the next :meth:`WorkerPool.get` / :meth:`WorkerPool.check` as :class:`WorkerError`
  naming the env and the worker; a worker stuck inside an env step or the policy for
  longer than ``stall_timeout`` is reported as :class:`WorkerStalledError`; ``get``'s
  timeout raises ``TimeoutError`` (naming the throttle when it holds every worker: the
  learner forgot ``add_units``) instead of a hang, but not while a worker is inside its
  env or policy: that worker answers, or is reported as stalled, within ``stall_timeout``.
  :meth:`WorkerPool.close` sets the stop event, joins every thread within a timeout and
  closes the env pools; a thread stuck in C code cannot be killed:
  it is a daemon thread, named in close()'s return and its env is left open.
- Threads: Python's switch interval is set to ``switch_interval`` while the pool runs
  (restored by close()); at the default 5 ms a busy Python thread (the learner) starves
  the env threads (see experiments/results/host_sampling_cpu.md). Two process-wide
  settings belong to the caller, before JAX creates its CPU backend: XLA's CPU thread
  pool (``XLA_FLAGS``, e.g. ``--xla_cpu_multi_thread_eigen=false
  intra_op_parallelism_threads=1``), and ``jax.config.update(
  "jax_cpu_enable_async_dispatch", False)``, which runs each CPU policy call in the worker
  thread instead of handing it to XLA's threads (about 55 -> 17 us per call measured here;
  the GIL is released while it runs). Neither matters when the actor device is a GPU.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.errors import HostEnvError
from jaxspreeze.hostenvs import HostEnv, make_host_env
from jaxspreeze.types import EnvSpec, PyTree, Transition

PolicyFn = Callable[[PyTree, jax.Array, jax.Array], Any]

DEFAULT_SWITCH_INTERVAL = 0.0005  # seconds; measured in experiments/host_sampling_bench.py
_POLL = 0.05  # seconds between checks of the stop event while waiting


class WorkerError(HostEnvError):
    """A sampling worker failed: the message names the worker and its env."""

    def __init__(self, message: str, worker: int, env_name: str):
        super().__init__(message)
        self.worker, self.env_name = worker, env_name


class WorkerStalledError(WorkerError):
    """A sampling worker did not answer within the stall timeout."""


# --- the versioned parameter slot ---------------------------------------------------------


class ParamSlot:
    """The newest policy parameters and their version, published by the learner."""

    def __init__(self, device: jax.Device | None = None):
        self.device = device
        self._cond = threading.Condition()
        self._latest: tuple[PyTree, int] = (None, -1)  # replaced whole: reads need no lock

    def publish(self, params: PyTree, version: int, *, copy: bool = True) -> None:
        """Make ``params`` the newest (a copy on the slot's device unless ``copy=False``)."""
        if copy:  # a donated learner buffer must never be read by a worker
            params = jax.tree.map(lambda x: jnp.array(x, copy=True), params)
        if self.device is not None:
            params = jax.device_put(params, self.device)
        with self._cond:
            if version < self._latest[1]:
                raise ValueError(f"version {version} is older than the published {self.version}")
            self._latest = (params, int(version))
            self._cond.notify_all()

    def latest(self) -> tuple[PyTree, int]:
        """``(params, version)``; version -1 (params None) before the first publish."""
        return self._latest

    @property
    def version(self) -> int:
        """The newest published version (-1 before the first publish)."""
        return self._latest[1]

    def wait_for(self, version: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``version`` (or newer); True if it is there."""
        with self._cond:
            return self._cond.wait_for(lambda: self._latest[1] >= version, timeout)


# --- the replay-ratio throttle ------------------------------------------------------------


class Throttle:
    """Holds learner units per delivered env step near ``ratio`` (see the module doc)."""

    def __init__(self, ratio: float, *, max_ahead: int, warmup: int = 0):
        if ratio <= 0:
            raise ValueError(f"ratio must be > 0, got {ratio}")
        if max_ahead < 1:
            raise ValueError(f"max_ahead must be >= 1 env step, got {max_ahead}")
        self.ratio, self.max_ahead, self.warmup = float(ratio), int(max_ahead), int(warmup)
        self._cond = threading.Condition()
        self.env_steps = 0  # delivered to the learner
        self.units = 0  # done by the learner

    def add_env_steps(self, n: int) -> None:
        """Count ``n`` env steps delivered to the learner (WorkerPool.get does this)."""
        with self._cond:
            self.env_steps += int(n)
            self._cond.notify_all()

    def add_units(self, n: int) -> None:
        """Count ``n`` learner units done (e.g. update samples); may release the workers."""
        with self._cond:
            self.units += int(n)
            self._cond.notify_all()

    def learner_may(self, units: int) -> bool:
        """Whether the learner may do ``units`` more now (False: it is ahead, get data first)."""
        if units > self.ratio * self.max_ahead:
            raise ValueError(
                f"{units} learner units per update need max_ahead >= {units / self.ratio:.0f} "
                f"env steps (ratio {self.ratio}), got {self.max_ahead}: the learner and the "
                "workers would wait for each other"
            )
        with self._cond:
            return self.units + units <= self.ratio * (self.env_steps - self.warmup)

    def workers_may(self) -> bool:
        """Whether the workers may step (False: the learner lags by more than max_ahead)."""
        with self._cond:
            return self._workers_may()

    def _workers_may(self) -> bool:
        return self.env_steps < self.warmup + self.units / self.ratio + self.max_ahead

    def wait_workers(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the workers may step; True if they may."""
        with self._cond:
            return self._cond.wait_for(self._workers_may, timeout)

    def replay_ratio(self) -> float:
        """Measured learner units per env step delivered after the warm-up (0 before)."""
        with self._cond:
            steps = self.env_steps - self.warmup
            return self.units / steps if steps > 0 else 0.0


# --- blocks of transitions ----------------------------------------------------------------


class Batch(NamedTuple):
    """``rollout_steps`` consecutive valid transitions of each of one worker's envs."""

    transition: Transition  # numpy leaves [T, N, ...]; next_obs is the true final obs
    version: np.ndarray  # int64 [T, N]: the policy version that acted on each row
    extras: dict[str, np.ndarray]  # the policy's extras per row, [T, N, ...]
    worker: int
    env_name: str
    env_steps: int  # T * N: every row is one env step
    episode_returns: np.ndarray  # float32 [E]: episodes that ended inside this block
    episode_lengths: np.ndarray  # int64 [E]
    steps_per_second: float  # the worker's env steps/s over this block (waits included)
    policy_lag: int = 0  # slot version at delivery minus the oldest version in the block
    rows_dropped: int = 0  # valid rows past the block's end dropped to align it (aligned)


class _Blocks:
    """Per-env rows gathered into ``[T, N]`` blocks; an env may run ahead of the others.

    While every env has the same number of rows (``even``), a row for every env is one
    basic-indexed write per field (the common case: a gymnasium env, or envpool between
    reset rows); otherwise each env has its own fill level.
    """

    def __init__(
        self, T: int, N: int, fields: dict[str, tuple[tuple[int, ...], Any]], aligned: bool
    ):
        self.T, self.N, self.aligned = T, N, aligned
        self.cap = 2 * T
        self.arrays = {
            k: np.zeros((self.cap, N, *shape), dtype) for k, (shape, dtype) in fields.items()
        }
        self.even, self.rows = True, 0  # while even: every env has `rows` rows
        self.fill = np.zeros(N, np.int64)  # per env, while not even
        self.emitted = 0
        self.dropped = 0  # rows the last pop dropped (aligned)

    def _grow(self) -> None:
        self.arrays = {k: np.concatenate([a, np.zeros_like(a)]) for k, a in self.arrays.items()}
        self.cap *= 2

    def add_all(self, rows: dict[str, np.ndarray]) -> None:
        """Append one row to every env (``rows`` in env order)."""
        if not self.even:
            self.add(np.arange(self.N), rows)
            return
        if self.rows >= self.cap:
            self._grow()
        p = self.rows
        for k, v in rows.items():
            self.arrays[k][p] = v
        self.rows += 1

    def add(self, ids: np.ndarray, rows: dict[str, np.ndarray]) -> None:
        """Append one row to each env in ``ids``."""
        if self.even:
            self.fill[:] = self.rows
            self.even = False
        pos = self.fill[ids]
        while pos.max() >= self.cap:  # an env ran a block ahead: make room
            self._grow()
        for k, v in rows.items():
            self.arrays[k][pos, ids] = v
        self.fill[ids] += 1

    def ready(self) -> bool:
        """Whether every env has ``T`` rows."""
        return self.rows >= self.T if self.even else bool(self.fill.min() >= self.T)

    def pop(self) -> dict[str, np.ndarray]:
        """The oldest ``T`` rows of every env; later rows move to the front (or, aligned,
        are dropped: every env starts the next block empty)."""
        T = self.T
        top = self.rows if self.even else int(self.fill.max())
        out = {k: a[:T].copy() for k, a in self.arrays.items()}
        self.emitted += 1
        if self.aligned:
            self.dropped = 0 if self.even else int((self.fill - T).sum())
            self.even, self.rows = True, 0
            return out
        if top > T:
            for a in self.arrays.values():
                a[: top - T] = a[T:top]
        if self.even:
            self.rows -= T
        else:
            self.fill -= T
            if (self.fill == self.fill[0]).all():
                self.even, self.rows = True, int(self.fill[0])
        return out


class _WorkerState:
    """What the pool knows of one worker (written by the worker, read by the consumer)."""

    def __init__(self) -> None:
        self.beat = time.monotonic()
        self.stage = "starting"  # what it is doing now: a wait, or the env/policy
        self.waiting = False  # in a wait that polls the stop event (not stalled)
        self.env_steps = 0
        self.steps_per_second = 0.0
        self.done = False


# --- the pool -----------------------------------------------------------------------------


class WorkerPool:
    """W sampling threads over host envs, feeding a learner through a bounded queue."""

    def __init__(
        self,
        env: str | Callable[[], Any] | Sequence[HostEnv],
        policy_fn: PolicyFn,
        slot: ParamSlot,
        *,
        num_workers: int = 1,
        envs_per_worker: int = 8,
        rollout_steps: int = 8,
        queue_size: int = 2,
        throttle: Throttle | None = None,
        max_lag: int | None = None,
        aligned: bool = False,
        seed: int = 0,
        key: jax.Array | None = None,
        stall_timeout: float = 60.0,
        switch_interval: float | None = DEFAULT_SWITCH_INTERVAL,
        env_kwargs: dict[str, Any] | None = None,
    ):
        """Build the envs (in this thread: construction errors surface here); start() runs them.

        ``env``: a host env name or gymnasium factory (``num_workers`` batches of
        ``envs_per_worker`` are made, worker ``w``'s envs seeded from ``seed + w * N``)
        or a sequence of ready :class:`HostEnv` (one per worker; the pool closes them).
        """
        if rollout_steps < 1 or queue_size < 1:
            raise ValueError("rollout_steps and queue_size must be >= 1")
        if max_lag is not None and max_lag < 0:
            raise ValueError(f"max_lag must be >= 0 or None, got {max_lag}")
        if isinstance(env, Sequence) and not isinstance(env, str):
            self.envs = list(env)
            if not all(isinstance(e, HostEnv) for e in self.envs):
                raise TypeError("a sequence env must hold one HostEnv per worker")
            offsets = np.cumsum([0] + [e.num_envs for e in self.envs])
            self.seeds = [seed + int(o) for o in offsets[:-1]]
        elif not (isinstance(env, str) or callable(env)):
            raise TypeError(
                "env must be a host env name, a gymnasium env factory or a list of HostEnv "
                f"(one per worker); got {type(env).__name__}"
            )
        else:
            self.envs, self.seeds = [], []
            try:
                for w in range(num_workers):
                    s = seed + w * envs_per_worker
                    self.envs.append(
                        make_host_env(env, envs_per_worker, seed=s, **(env_kwargs or {}))
                    )
                    self.seeds.append(s)
            except BaseException:
                for e in self.envs:
                    e.close()
                raise
        if not self.envs:
            raise ValueError("a worker pool needs at least one worker")
        self.spec: EnvSpec = self.envs[0].spec
        for e in self.envs[1:]:
            if (e.spec.obs_shape, e.spec.action_shape) != (
                self.spec.obs_shape,
                self.spec.action_shape,
            ):
                raise ValueError(f"workers' envs differ: {e.spec} vs {self.spec}")
        self.num_workers = len(self.envs)
        self.policy_fn, self.slot, self.throttle = policy_fn, slot, throttle
        self.rollout_steps, self.max_lag, self.stall_timeout = rollout_steps, max_lag, stall_timeout
        self.aligned = aligned
        self.switch_interval = switch_interval
        key = jax.random.key(seed) if key is None else key
        if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.wrap_key_data(key)  # a raw uint32 key (jax.random.PRNGKey)
        self._key_impl = jax.random.key_impl(key)
        self._worker_keys = [jax.random.fold_in(key, w) for w in range(self.num_workers)]
        self._keys: list[jax.Array] = []  # their raw data on the actor device, by compile()
        self._queue: queue.Queue[Batch] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._errors: list[WorkerError] = []
        self._states = [_WorkerState() for _ in self.envs]
        self._threads: list[threading.Thread] = []
        self._stash: list[list[Batch]] = [[] for _ in self.envs]  # get_round's early blocks
        self._act: Any = None
        self._extras: dict[str, tuple[tuple[int, ...], Any]] = {}
        self._tuple_policy = False
        self._base_version = 0
        self._old_switch: float | None = None
        self._envs_closed: set[int] = set()
        self.delivered = 0  # env steps handed to the consumer
        self.last_lag = 0

    # --- lifecycle

    def compile(self) -> None:
        """Compile the policy for every worker's batch shape (the slot must hold params)."""
        params, version = self.slot.latest()
        if version < 0:
            raise ValueError("publish parameters to the slot before starting the workers")

        def act(params, obs, key_data):
            # raw key data in and out: no typed-key wrapper is built in Python each step
            key = jax.random.wrap_key_data(key_data, impl=self._key_impl)
            key, sub = jax.random.split(key)
            out = self.policy_fn(params, obs, sub)
            if not isinstance(out, tuple):  # no extras: one output fewer to unpack each step
                return out, jax.random.key_data(key)
            actions, extras = out
            return actions, dict(extras), jax.random.key_data(key)

        self._act = jax.jit(act)
        self._keys = [self._put_key(k) for k in self._worker_keys]
        for b in sorted({e.batch_size for e in self.envs}):
            obs = np.zeros((b, *self.spec.obs_shape), np.float32)
            out = jax.block_until_ready(self._act(params, obs, self._keys[0]))
            self._tuple_policy = len(out) == 3  # the policy returns (actions, extras)
            actions, extras = out[:2] if self._tuple_policy else (out[0], {})
            want = (b, *self.spec.action_shape)
            if actions.shape != want:
                raise ValueError(
                    f"policy_fn returned actions of shape {actions.shape} for {b} envs of "
                    f"{self.spec.name}; expected {want}"
                )
            self._extras = {k: (v.shape[1:], v.dtype) for k, v in extras.items()}

    def _put_key(self, key: jax.Array) -> jax.Array:
        data = jax.random.key_data(key)
        return data if self.slot.device is None else jax.device_put(data, self.slot.device)

    def start(self) -> WorkerPool:
        """Compile the policy (if not yet) and start the worker threads."""
        if self._threads or self._stop.is_set():
            raise RuntimeError("the pool is already started (or closed)")
        if self._act is None:
            self.compile()
        self._base_version = self.slot.version
        if self.switch_interval is not None:
            self._old_switch = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_interval)
        for w in range(self.num_workers):
            t = threading.Thread(
                target=self._run, args=(w,), name=f"jaxspreeze-worker-{w}", daemon=True
            )
            self._threads.append(t)
            t.start()
        return self

    def close(self, timeout: float = 10.0) -> list[str]:
        """Stop and join the workers, close their envs; names of threads that did not stop.

        A thread stuck inside its env keeps the env open; call close() again once it ended.
        """
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            with contextlib.suppress(queue.Empty):
                while True:  # unblock puts (they poll the stop event anyway)
                    self._queue.get_nowait()
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        for w, e in enumerate(self.envs):
            running = bool(self._threads) and self._threads[w].is_alive()
            if w not in self._envs_closed and not running:  # never under a thread inside it
                e.close()
                self._envs_closed.add(w)
        if self._old_switch is not None:
            sys.setswitchinterval(self._old_switch)
            self._old_switch = None
        return alive

    def __enter__(self) -> WorkerPool:
        return self.start() if not self._threads else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the consumer's side

    def get(self, timeout: float | None = None) -> Batch:
        """The next block (oldest first); raises a worker's error, a stall, or TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.check()
            try:
                batch = self._queue.get(timeout=_POLL)
            except queue.Empty:
                # a worker inside its env or policy is judged by the stall timeout instead
                if deadline is not None and time.monotonic() > deadline and not self._busy():
                    raise TimeoutError(self._timeout_message(timeout)) from None
                continue
            return self._deliver(batch)

    def poll(self) -> list[Batch]:
        """Every block queued now, without waiting (after checking for errors)."""
        self.check()
        out = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._deliver(self._queue.get_nowait()))
        return out

    def get_round(self, timeout: float | None = None) -> list[Batch]:
        """One block from every worker, in worker order (for lockstep learners)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not all(self._stash):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            batch = self.get(left)
            self._stash[batch.worker].append(batch)
        return [s.pop(0) for s in self._stash]

    def _deliver(self, batch: Batch) -> Batch:
        lag = int(self.slot.version - batch.version.min())
        if self.throttle is not None:
            self.throttle.add_env_steps(batch.env_steps)
        self.delivered += batch.env_steps
        self.last_lag = lag
        return batch._replace(policy_lag=lag)

    def check(self) -> None:
        """Raise the first worker's error, or :class:`WorkerStalledError` for a stuck worker."""
        if self._errors:
            raise self._errors[0]
        now = time.monotonic()
        for w, st in enumerate(self._states):
            if not st.waiting and not st.done and now - st.beat > self.stall_timeout:
                name = self.envs[w].name
                err = WorkerStalledError(
                    f"worker {w} ({name}) has not answered for {now - st.beat:.1f} s "
                    f"(stall_timeout {self.stall_timeout} s) while {st.stage}",
                    w,
                    name,
                )
                self._fail(err)
                raise err

    def _busy(self) -> bool:
        """Whether a worker is inside its env or policy now (not waiting, not ended)."""
        return any(not s.waiting and not s.done for s in self._states)

    def _timeout_message(self, timeout: float | None) -> str:
        """Why no block came: names a throttle that holds every worker."""
        msg = f"no block from the workers within {timeout} s"
        states = [s for s in self._states if not s.done]
        t = self.throttle
        if t is not None and states and all(s.stage == "waiting for the learner" for s in states):
            msg += (
                f"; the throttle holds every worker (env steps {t.env_steps}, learner units "
                f"{t.units}, ratio {t.ratio}, max_ahead {t.max_ahead}): the learner may "
                "update now (count its work with Throttle.add_units)"
            )
        return msg

    def stats(self) -> dict[str, Any]:
        """Counters for the metrics: env steps, queue depth, lag, replay ratio, per worker."""
        out: dict[str, Any] = {
            "env_steps": self.delivered,
            "queue_depth": self._queue.qsize(),
            "policy_lag": self.last_lag,
        }
        if self.throttle is not None:
            out["replay_ratio"] = self.throttle.replay_ratio()
        for w, st in enumerate(self._states):
            out[f"worker{w}_steps_per_second"] = st.steps_per_second
            out[f"worker{w}_env_steps"] = st.env_steps
        return out

    def _fail(self, err: WorkerError) -> None:
        self._errors.append(err)
        self._stop.set()

    # --- the worker's side

    def _wait(
        self, st: _WorkerState, stage: str, ready: Callable[[], bool], block: Callable[[], Any]
    ) -> bool:
        """Wait (polling the stop event, beating) until ``ready()``; False when stopped."""
        if ready():
            return not self._stop.is_set()
        st.stage, st.waiting = stage, True
        try:
            while not self._stop.is_set():
                st.beat = time.monotonic()
                block()
                if ready():
                    return not self._stop.is_set()
            return False
        finally:
            st.waiting = False
            st.beat = time.monotonic()

    def _put(self, st: _WorkerState, batch: Batch) -> bool:
        """Queue a block, waiting while the queue is full; False when stopped."""
        st.stage, st.waiting = "waiting for queue space", True
        try:
            while not self._stop.is_set():
                st.beat = time.monotonic()
                try:
                    self._queue.put(batch, timeout=_POLL)
                    return True
                except queue.Full:
                    continue
            return False
        finally:
            st.waiting = False
            st.beat = time.monotonic()

    def _run(self, w: int) -> None:
        st = self._states[w]
        env = self.envs[w]
        try:
            self._loop(w, st, env)
        except BaseException as e:
            err = WorkerError(
                f"worker {w} ({env.name}) failed while {st.stage}: {type(e).__name__}: {e}",
                w,
                env.name,
            )
            err.__cause__ = e
            self._fail(err)
        finally:
            st.done = True

    def _loop(self, w: int, st: _WorkerState, env: HostEnv) -> None:
        spec, T, N = self.spec, self.rollout_steps, env.num_envs
        extra_names = [f"extra/{k}" for k in self._extras]
        fields = {
            "obs": (spec.obs_shape, np.float32),
            "action": (spec.action_shape, np.int32 if spec.discrete else np.float32),
            "reward": ((), np.float32),
            "terminated": ((), bool),
            "truncated": ((), bool),
            "next_obs": (spec.obs_shape, np.float32),
            "version": ((), np.int64),
            **{f"extra/{k}": v for k, v in self._extras.items()},
        }
        blocks = _Blocks(T, N, fields, self.aligned)
        # per env: the observation it acts on, and the action/version/extras of its last send
        last = {k: np.zeros((N, *shape), dtype) for k, (shape, dtype) in fields.items()}
        last_obs, last_action, last_version = last["obs"], last["action"], last["version"]
        ep_return = np.zeros(N, np.float64)
        ep_length = np.zeros(N, np.int64)
        done_returns: list[float] = []
        done_lengths: list[int] = []
        key = self._keys[w]
        act, throttle, slot, stop = self._act, self.throttle, self.slot, self._stop
        all_ids, all_valid = env.all_ids, env.all_valid
        tuple_policy = self._tuple_policy
        block_start = time.monotonic()

        st.stage = "resetting the env"
        env.async_reset(self.seeds[w])
        st.stage = "stepping the env"
        step = env.recv()
        while not stop.is_set():
            st.beat = time.monotonic()
            ids, valid = step.env_ids, step.valid
            everyone = ids is all_ids
            # store the transitions: the obs each env acted on, what it did, what came of it
            if everyone and (valid is all_valid or valid.all()):
                rows = {
                    "obs": last_obs,
                    "action": last_action,
                    "reward": step.reward,
                    "terminated": step.terminated,
                    "truncated": step.truncated,
                    "next_obs": step.final_obs,
                    "version": last_version,
                }
                for k in extra_names:
                    rows[k] = last[k]
                blocks.add_all(rows)
                ep_return += step.reward
                ep_length += 1
                vids, ended_mask = all_ids, step.terminated | step.truncated
            else:  # some envs answered, or some rows are reset rows (no transition)
                vids = ids[valid]
                rows = {k: last[k][vids] for k in ("obs", "action", "version", *extra_names)}
                rows["reward"] = reward = step.reward[valid]
                rows["terminated"] = step.terminated[valid]
                rows["truncated"] = step.truncated[valid]
                rows["next_obs"] = step.final_obs[valid]
                ended_mask = rows["terminated"] | rows["truncated"]
                if len(vids):
                    blocks.add(vids, rows)
                    ep_return[vids] += reward
                    ep_length[vids] += 1
            st.env_steps += len(vids)
            if ended_mask.any():
                ended = vids[ended_mask]
                done_returns += ep_return[ended].tolist()
                done_lengths += ep_length[ended].tolist()
                ep_return[ended] = 0.0
                ep_length[ended] = 0
            if everyone:
                np.copyto(last_obs, step.obs)
            else:
                last_obs[ids] = step.obs

            while blocks.ready():
                now = time.monotonic()
                st.steps_per_second = T * N / max(now - block_start, 1e-9)
                block_start = now
                data = blocks.pop()
                batch = Batch(
                    Transition(*(data[k] for k in Transition._fields)),
                    data["version"],
                    {k: data[f"extra/{k}"] for k in self._extras},
                    w,
                    env.name,
                    T * N,
                    np.asarray(done_returns, np.float32),
                    np.asarray(done_lengths, np.int64),
                    st.steps_per_second,
                    rows_dropped=blocks.dropped,
                )
                done_returns, done_lengths = [], []
                if not self._put(st, batch):
                    return

            # gates: lockstep with the learner's versions, then the replay-ratio throttle
            if self.max_lag is not None:
                need = self._base_version + blocks.emitted - self.max_lag
                ok = self._wait(
                    st,
                    "waiting for parameters",
                    lambda: slot.version >= need,
                    lambda: slot.wait_for(need, _POLL),
                )
                if not ok:
                    return
            if throttle is not None:
                ok = self._wait(
                    st,
                    "waiting for the learner",
                    throttle.workers_may,
                    lambda: throttle.wait_workers(_POLL),
                )
                if not ok:
                    return

            # act on the envs that answered, with the newest parameters
            st.stage = "running the policy"
            params, version = slot.latest()
            if tuple_policy:
                actions, extras, key = act(params, step.obs, key)
            else:
                (actions, key), extras = act(params, step.obs, key), {}
            actions = np.asarray(actions)
            if everyone:
                last_action[:] = actions
                last_version[:] = version
                for k, v in extras.items():
                    last[f"extra/{k}"][:] = np.asarray(v)
            else:
                last_action[ids] = actions
                last_version[ids] = version
                for k, v in extras.items():
                    last[f"extra/{k}"][ids] = np.asarray(v)
            st.stage = "stepping the env"
            env.send(actions, ids)
            step = env.recv()
