"""Asynchronous sampling workers for host envs: Spreeze's actors, for a learner to consume.

W worker threads each own a batch of host envs (:mod:`jaxspreeze.host.hostenvs`), act with a
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
- A policy with memory (``initial_carry(n)`` given: the policy's carry for ``n`` envs, a
  PyTree of ``[n, ...]`` leaves, ``()`` for none) is called as ``policy_fn(params, carry,
  obs, key) -> (actions, carry)`` or ``-> (actions, extras, carry)`` with the carry rows of
  the envs that answered. Each worker keeps its envs' carries (host arrays) and resets an
  env's row to ``initial_carry``'s where its episode starts: at a reset row (the first
  answer, or a next-step reset) and after a row that ended an episode (terminated or
  truncated). An empty carry adds nothing but an empty argument to the policy call.
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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.errors import HostEnvError
from jaxspreeze.core.types import Carry, EnvSpec, PyTree, Transition, reset_carry
from jaxspreeze.host.hostenvs import HostEnv, HostStep, make_host_env

PolicyFn = Callable[..., Any]  # (params, obs, key) or, with a carry, (params, carry, obs, key)

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


def _make_envs(
    env: str | Callable[[], Any] | Sequence[HostEnv],
    num_workers: int,
    envs_per_worker: int,
    seed: int,
    env_kwargs: dict[str, Any] | None,
) -> tuple[list[HostEnv], list[int]]:
    """The workers' envs and their first seeds (see :class:`WorkerPool`); closes what it
    made if one fails."""
    if isinstance(env, Sequence) and not isinstance(env, str):
        envs = list(env)
        if not all(isinstance(e, HostEnv) for e in envs):
            raise TypeError("a sequence env must hold one HostEnv per worker")
        offsets = np.cumsum([0] + [e.num_envs for e in envs])
        return envs, [seed + int(o) for o in offsets[:-1]]
    if not (isinstance(env, str) or callable(env)):
        raise TypeError(
            "env must be a host env name, a gymnasium env factory or a list of HostEnv "
            f"(one per worker); got {type(env).__name__}"
        )
    envs, seeds = [], []
    try:
        for w in range(num_workers):
            s = seed + w * envs_per_worker
            envs.append(make_host_env(env, envs_per_worker, seed=s, **(env_kwargs or {})))
            seeds.append(s)
    except BaseException:
        for e in envs:
            e.close()
        raise
    return envs, seeds


def _common_spec(envs: list[HostEnv]) -> EnvSpec:
    """The workers' env spec; their observation shapes and dtypes and action shapes must
    agree."""
    if not envs:
        raise ValueError("a worker pool needs at least one worker")
    spec = envs[0].spec
    for e in envs[1:]:
        mine = (e.spec.obs_shape, e.spec.obs_dtype, e.spec.action_shape)
        if mine != (spec.obs_shape, spec.obs_dtype, spec.action_shape):
            raise ValueError(f"workers' envs differ: {e.spec} vs {spec}")
    return spec


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
        initial_carry: Callable[[int], Carry] | None = None,
    ):
        """Build the envs (in this thread: construction errors surface here); start() runs them.

        ``env``: a host env name or gymnasium factory (``num_workers`` batches of
        ``envs_per_worker`` are made, worker ``w``'s envs seeded from ``seed + w * N``)
        or a sequence of ready :class:`HostEnv` (one per worker; the pool closes them).
        ``initial_carry``: given, ``policy_fn`` takes and returns a carry (module doc).
        """
        if rollout_steps < 1 or queue_size < 1:
            raise ValueError("rollout_steps and queue_size must be >= 1")
        if max_lag is not None and max_lag < 0:
            raise ValueError(f"max_lag must be >= 0 or None, got {max_lag}")
        self.envs, self.seeds = _make_envs(env, num_workers, envs_per_worker, seed, env_kwargs)
        self.spec: EnvSpec = _common_spec(self.envs)
        self.num_workers = len(self.envs)
        self.policy_fn, self.slot, self.throttle = policy_fn, slot, throttle
        self.rollout_steps, self.max_lag, self.stall_timeout = rollout_steps, max_lag, stall_timeout
        self.aligned = aligned
        self.switch_interval = switch_interval
        self.initial_carry = initial_carry
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

        def act(params, carry, obs, key_data):
            # raw key data in and out: no typed-key wrapper is built in Python each step
            key = jax.random.wrap_key_data(key_data, impl=self._key_impl)
            key, sub = jax.random.split(key)
            if self.initial_carry is None:
                out = self.policy_fn(params, obs, sub)
            else:
                *out, carry = self.policy_fn(params, carry, obs, sub)
                out = out[0] if len(out) == 1 else tuple(out)
            if not isinstance(out, tuple):  # no extras: one output fewer to unpack each step
                return out, carry, jax.random.key_data(key)
            actions, extras = out
            return actions, dict(extras), carry, jax.random.key_data(key)

        self._act = jax.jit(act)
        self._keys = [self._put_key(k) for k in self._worker_keys]
        for b in sorted({e.batch_size for e in self.envs}):
            obs = np.zeros((b, *self.spec.obs_shape), self.spec.obs_dtype)
            carry = self.carry_for(b)
            out = jax.block_until_ready(self._act(params, carry, obs, self._keys[0]))
            self._tuple_policy = len(out) == 4  # the policy returns (actions, extras)
            actions, extras = out[:2] if self._tuple_policy else (out[0], {})
            want = (b, *self.spec.action_shape)
            if actions.shape != want:
                raise ValueError(
                    f"policy_fn returned actions of shape {actions.shape} for {b} envs of "
                    f"{self.spec.name}; expected {want}"
                )
            shapes = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
            if shapes(out[-2]) != shapes(carry):
                raise ValueError(
                    f"policy_fn returned a carry {shapes(out[-2])}; initial_carry({b}) is "
                    f"{shapes(carry)}"
                )
            self._extras = {k: (v.shape[1:], v.dtype) for k, v in extras.items()}

    def carry_for(self, n: int) -> Carry:
        """The policy's initial carry for ``n`` envs, on the host (``()``: none)."""
        return () if self.initial_carry is None else jax.device_get(self.initial_carry(n))

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

    def _run(self, w: int) -> None:
        """Worker ``w``'s thread: sample until stopped; an exception stops the pool, named."""
        st = self._states[w]
        env = self.envs[w]
        try:
            _Sampler(self, w).run()
        except BaseException as e:
            stage = "resetting the env" if _in_reset(e) else st.stage
            err = WorkerError(
                f"worker {w} ({env.name}) failed while {stage}: {type(e).__name__}: {e}",
                w,
                env.name,
            )
            err.__cause__ = e
            self._fail(err)
        finally:
            st.done = True


def _in_reset(error: BaseException) -> bool:
    """True when ``error`` was raised inside an env's ``reset`` (a vector env answers its
    reset at the next ``recv``, and an auto-reset happens inside its step: the stage alone
    would say stepping)."""
    tb = error.__traceback__
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return any(n in ("reset", "async_reset", "reset_async", "reset_wait") for n in names[1:])


@contextlib.contextmanager
def _waiting(st: _WorkerState, stage: str) -> Iterator[None]:
    """Mark the worker as in a wait that polls the stop event (never judged stalled)."""
    st.stage, st.waiting = stage, True
    try:
        yield
    finally:
        st.waiting = False
        st.beat = time.monotonic()


def _block_fields(
    spec: EnvSpec, extras: dict[str, tuple[tuple[int, ...], Any]]
) -> dict[str, tuple[tuple[int, ...], Any]]:
    """The per-row fields a worker gathers: a transition (observations in the env's own
    dtype, ``spec.obs_dtype``), its version and the policy's extras."""
    obs_dtype = np.dtype(spec.obs_dtype)
    return {
        "obs": (spec.obs_shape, obs_dtype),
        "action": (spec.action_shape, np.int32 if spec.discrete else np.float32),
        "reward": ((), np.float32),
        "terminated": ((), bool),
        "truncated": ((), bool),
        "next_obs": (spec.obs_shape, obs_dtype),
        "version": ((), np.int64),
        **{f"extra/{k}": v for k, v in extras.items()},
    }


class _Episodes:
    """Per env: the running return and length; the episodes that ended since the last block."""

    def __init__(self, n: int):
        self.ret = np.zeros(n, np.float64)
        self.length = np.zeros(n, np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def add(self, ids: np.ndarray, reward: np.ndarray, ended: np.ndarray, everyone: bool) -> None:
        """Count one step of the envs ``ids`` (every env: ``everyone``); close those ``ended``."""
        if everyone:
            self.ret += reward
            self.length += 1
        elif len(ids):
            self.ret[ids] += reward
            self.length[ids] += 1
        if ended.any():
            done = ids[ended]
            self.returns += self.ret[done].tolist()
            self.lengths += self.length[done].tolist()
            self.ret[done] = 0.0
            self.length[done] = 0

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The returns ``float32 [E]`` and lengths ``int64 [E]`` that ended; starts a new list."""
        out = np.asarray(self.returns, np.float32), np.asarray(self.lengths, np.int64)
        self.returns, self.lengths = [], []
        return out


class _Sampler:
    """One worker thread's loop over its envs: store, deliver, gate, act (see run())."""

    def __init__(self, pool: WorkerPool, w: int):
        self.pool, self.w = pool, w
        self.st, self.env = pool._states[w], pool.envs[w]
        self.stop, self.slot, self.throttle = pool._stop, pool.slot, pool.throttle
        self.T, self.N = pool.rollout_steps, self.env.num_envs
        self.extra_names = [f"extra/{k}" for k in pool._extras]
        fields = _block_fields(pool.spec, pool._extras)
        self.blocks = _Blocks(self.T, self.N, fields, pool.aligned)
        # per env: the observation it acts on, and the action/version/extras of its last send
        self.last = {k: np.zeros((self.N, *shape), dtype) for k, (shape, dtype) in fields.items()}
        self.episodes = _Episodes(self.N)
        self.key = pool._keys[w]
        # per env: the policy's carry (host arrays [N, ...]; () for a policy without memory)
        self.initial = pool.carry_for(self.N)
        self.carry = jax.tree.map(np.array, self.initial)
        self.memory = bool(jax.tree.leaves(self.carry))
        self.block_start = time.monotonic()

    def run(self) -> None:
        """Reset, then per answer of the envs: store it, deliver full blocks, wait at the
        gates, act on the envs that answered; until the pool stops."""
        st, env = self.st, self.env
        st.stage = "resetting the env"
        env.async_reset(self.pool.seeds[self.w])
        step = env.recv()  # the reset's answer
        st.stage = "stepping the env"
        while not self.stop.is_set():
            st.beat = time.monotonic()
            self.store(step)
            if not (self.deliver() and self.gate()):
                return
            st.stage = "running the policy"
            actions = self.act(step)
            st.stage = "stepping the env"
            env.send(actions, step.env_ids)
            step = env.recv()

    # store: the obs each env acted on, what it did, what came of it
    def store(self, step: HostStep) -> None:
        """Add the transitions of the envs that answered (reset rows are none) to the blocks."""
        ids, valid, last = step.env_ids, step.valid, self.last
        everyone = ids is self.env.all_ids
        if everyone and (valid is self.env.all_valid or valid.all()):
            rows = {
                "obs": last["obs"],
                "action": last["action"],
                "reward": step.reward,
                "terminated": step.terminated,
                "truncated": step.truncated,
                "next_obs": step.final_obs,
                "version": last["version"],
            }
            for k in self.extra_names:
                rows[k] = last[k]
            self.blocks.add_all(rows)
            vids, ended = self.env.all_ids, step.terminated | step.truncated
            self.episodes.add(vids, step.reward, ended, everyone=True)
        else:  # some envs answered, or some rows are reset rows (no transition)
            vids = ids[valid]
            rows = {k: last[k][vids] for k in ("obs", "action", "version", *self.extra_names)}
            rows["reward"] = step.reward[valid]
            rows["terminated"] = step.terminated[valid]
            rows["truncated"] = step.truncated[valid]
            rows["next_obs"] = step.final_obs[valid]
            ended = rows["terminated"] | rows["truncated"]
            if len(vids):
                self.blocks.add(vids, rows)
            self.episodes.add(vids, rows["reward"], ended, everyone=False)
        self.st.env_steps += len(vids)
        if everyone:
            np.copyto(last["obs"], step.obs)
        else:
            last["obs"][ids] = step.obs

    # deliver: every full block, to the learner's queue
    def deliver(self) -> bool:
        """Queue each full block as a :class:`Batch`; False when the pool stopped."""
        while self.blocks.ready():
            if not self._put(self._batch()):
                return False
        return True

    def _batch(self) -> Batch:
        """The oldest full block, with its versions, extras, episodes and the worker's rate."""
        st, T, N = self.st, self.T, self.N
        now = time.monotonic()
        st.steps_per_second = T * N / max(now - self.block_start, 1e-9)
        self.block_start = now
        data = self.blocks.pop()
        returns, lengths = self.episodes.take()
        return Batch(
            Transition(*(data[k] for k in Transition._fields)),
            data["version"],
            {k: data[f"extra/{k}"] for k in self.pool._extras},
            self.w,
            self.env.name,
            T * N,
            returns,
            lengths,
            st.steps_per_second,
            rows_dropped=self.blocks.dropped,
        )

    def _put(self, batch: Batch) -> bool:
        """Queue a block, waiting while the queue is full; False when stopped."""
        with _waiting(self.st, "waiting for queue space"):
            while not self.stop.is_set():
                self.st.beat = time.monotonic()
                try:
                    self.pool._queue.put(batch, timeout=_POLL)
                    return True
                except queue.Full:
                    continue
            return False

    # gates: lockstep with the learner's versions, then the replay-ratio throttle
    def gate(self) -> bool:
        """Wait until the worker may act: the version lockstep needs, the throttle's leave."""
        slot, throttle, max_lag = self.slot, self.throttle, self.pool.max_lag
        if max_lag is not None:
            need = self.pool._base_version + self.blocks.emitted - max_lag
            ready = lambda: slot.version >= need
            if not self._wait("waiting for parameters", ready, lambda: slot.wait_for(need, _POLL)):
                return False
        if throttle is not None:
            block = lambda: throttle.wait_workers(_POLL)
            if not self._wait("waiting for the learner", throttle.workers_may, block):
                return False
        return True

    def _wait(self, stage: str, ready: Callable[[], bool], block: Callable[[], Any]) -> bool:
        """Wait (polling the stop event, beating) until ``ready()``; False when stopped."""
        if ready():
            return not self.stop.is_set()
        with _waiting(self.st, stage):
            while not self.stop.is_set():
                self.st.beat = time.monotonic()
                block()
                if ready():
                    return not self.stop.is_set()
            return False

    # act: on the envs that answered, with the newest parameters
    def act(self, step: HostStep) -> np.ndarray:
        """The policy's actions for the envs that answered; remembered per env with the
        version that acted and the policy's extras."""
        params, version = self.slot.latest()
        act = self.pool._act
        rows = slice(None) if step.env_ids is self.env.all_ids else step.env_ids
        carry = self.carry_rows(step, rows) if self.memory else ()
        if self.pool._tuple_policy:
            actions, extras, carry, self.key = act(params, carry, step.obs, self.key)
        else:
            (actions, carry, self.key), extras = act(params, carry, step.obs, self.key), {}
        if self.memory:
            for mine, new in zip(jax.tree.leaves(self.carry), jax.tree.leaves(carry), strict=True):
                mine[rows] = np.asarray(new)
        actions = np.asarray(actions)
        last = self.last
        last["action"][rows] = actions
        last["version"][rows] = version
        for k, v in extras.items():
            last[f"extra/{k}"][rows] = np.asarray(v)
        return actions

    def carry_rows(self, step: HostStep, rows: Any) -> Carry:
        """The carry of the envs that answered, reset where their episode starts (a reset
        row, or the row after an episode ended: terminated or truncated)."""
        starts = ~step.valid | step.terminated | step.truncated
        pick = lambda tree: jax.tree.map(lambda x: x[rows], tree)
        return reset_carry(pick(self.carry), pick(self.initial), starts)
