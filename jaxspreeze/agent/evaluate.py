"""Evaluation: a pure jitted ``evaluate`` of deterministic episodes on vmapped envs (or a
loop over host envs, :func:`make_host_evaluate`), and the :class:`Evaluator` thread that
runs it on parameter snapshots beside training."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.algos.base import Algorithm
from jaxspreeze.core import exiting
from jaxspreeze.core.cpus import spare_cpu
from jaxspreeze.core.programs import ProgramCache
from jaxspreeze.core.types import PyTree, reset_carry
from jaxspreeze.envs import VecEnv
from jaxspreeze.host.hostenvs import make_host_env
from jaxspreeze.sinks.metrics import Note, Report, warn

_STOP = object()

# The snapshots that may wait for the evaluator. The trainer dispatches chunk c + 1 before
# it waits for chunk c, so a snapshot is queued about a chunk before its parameters exist:
# with one waiting place, an evaluation that takes less than a chunk still lost every
# other snapshot (it was "busy" waiting for chunk c's parameters when c + 2 replaced
# c + 1). Two places let an evaluator that keeps up with the chunks evaluate every one.
WAITING = 2
_ROOM_POLL_S = 1.0  # a submit waiting for a place checks this often that the thread lives


class EvalResult(NamedTuple):
    """The mean and std of the return over the evaluated episodes, their mean length and
    the standard error of the mean return (``std(ddof=1) / sqrt(episodes)``; NaN for one
    episode)."""

    return_mean: jax.Array
    return_std: jax.Array
    length_mean: jax.Array
    return_se: Any = None


EVAL_SALT = (
    10_000  # a run's evaluation seed is its seed + EVAL_SALT (``jaxspreeze eval``'s default)
)


def eval_seed(seed: int) -> int:
    """The evaluation seed of a run of seed ``seed``: its starts never share a key with
    its training."""
    return seed + EVAL_SALT


def start_key(key: jax.Array, env_steps: Any) -> jax.Array:
    """The key of the evaluation at ``env_steps`` (one seed's env steps) from a seed's
    evaluation key: ``key`` folded with the step (mod 2**32), so every evaluation of a run
    draws fresh start states, and the same step and seed draw the same ones."""
    return jax.random.fold_in(key, jnp.asarray(env_steps, jnp.uint32))


def summarize(ret: jax.Array, length: jax.Array) -> EvalResult:
    """An :class:`EvalResult` of the episodes' returns and lengths ``[N]``."""
    n = ret.shape[0]
    se = ret.std(ddof=1) / jnp.sqrt(n) if n > 1 else jnp.float32(jnp.nan)
    return EvalResult(ret.mean(), ret.std(), length.astype(jnp.float32).mean(), se)


def make_episodes(
    algo: Algorithm, env: VecEnv, max_steps: int | None = None, seeds: bool = False
) -> Callable[[PyTree, jax.Array], tuple[jax.Array, jax.Array]]:
    """``episodes(actor, key) -> (returns, lengths)``, each ``[env.num_envs]``: one
    deterministic episode of ``algo``'s policy in each env (see :func:`make_evaluate`).
    ``seeds``: every seed's at once (actor leaves ``[S, ...]``, keys ``[S]``, results
    ``[S, num_envs]``), as ``jax.vmap`` of the one-seed function computes them.

    The steps run until every env's episode (every seed's) has ended, at most
    ``max_steps`` (default: the env's time limit): an env whose limit is far beyond its
    episodes (Craftax's 10,000 steps against episodes of ~150) stops when its last episode
    does. Step ``t`` takes the ``t``-th key of ``split(key, max_steps)``: the returns are
    those of a scan over all ``max_steps`` steps, bit for bit. The seeds are batched
    inside the loop (one condition over all of them), not the loop over the seeds (which
    would select every leaf of the state at every step)."""
    steps = max_steps or env.spec.max_episode_steps

    def start(actor: PyTree, key: jax.Array) -> tuple[tuple, jax.Array]:
        del actor
        k_reset, k_run = jax.random.split(key)
        obs, env_state = env.reset(k_reset)
        n = env.num_envs
        zeros = (jnp.zeros(n, bool), jnp.zeros(n), jnp.zeros(n, jnp.int32))
        return (obs, env_state, algo.initial_carry(n), *zeros), jax.random.split(k_run, steps)

    def step(actor: PyTree, carry: tuple, key: jax.Array) -> tuple:
        obs, env_state, policy, finished, ret, length = carry
        k_act, k_env = jax.random.split(key)
        action, policy = algo.act(actor, policy, obs, k_act, True)
        obs, env_state, reward, term, trunc, _ = env.step_no_reset(k_env, env_state, action)
        live = ~finished
        ret = ret + jnp.where(live, reward, 0.0)
        length = length + live.astype(jnp.int32)
        return obs, env_state, policy, finished | term | trunc, ret, length

    if seeds:
        start, step = jax.vmap(start), jax.vmap(step)
    at = (lambda keys, t: keys[:, t]) if seeds else (lambda keys, t: keys[t])

    def episodes(actor: PyTree, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        carry, keys = start(actor, key)

        def more(loop: tuple) -> jax.Array:
            t, carry = loop
            return (t < steps) & ~jnp.all(carry[3])

        def one(loop: tuple) -> tuple:
            t, carry = loop
            return t + 1, step(actor, carry, at(keys, t))

        _, (*_, ret, length) = jax.lax.while_loop(more, one, (jnp.int32(0), carry))
        return ret, length

    return episodes


def make_evaluate(
    algo: Algorithm, env: VecEnv, max_steps: int | None = None, seeds: bool = False
) -> Callable[[PyTree, jax.Array], EvalResult]:
    """``evaluate(actor, key)``: one deterministic episode of ``algo``'s policy in each of
    ``env.num_envs`` envs, their starts drawn from ``key`` (``seeds``: every seed's at
    once, actor leaves ``[S, ...]``, keys ``[S]``, results ``[S]``).

    Each env's first finished episode counts; the steps run until every env's has ended,
    at most ``max_steps`` (default: the env's time limit, so every episode ends;
    :func:`make_episodes`). Envs are stepped without resets
    (:meth:`VecEnv.step_no_reset`): the program holds no initial-state draw in its step.
    The policy's carry starts each episode at ``algo.initial_carry`` (one episode per env:
    no episode starts later).
    """
    episodes = make_episodes(algo, env, max_steps, seeds)
    summary = jax.vmap(summarize) if seeds else summarize
    return lambda actor, key: summary(*episodes(actor, key))


class SeedEvaluate:
    """``evaluate(actor, env_steps)`` for every seed at once: actor leaves ``[S, ...]``,
    results ``[S]``.

    Seed ``i``'s evaluation at ``env_steps`` draws its starts from ``keys[i]`` folded with
    the step (:func:`start_key`): fresh starts at every evaluation, the same for the same
    step. Jitted (the step is an argument: one program for every step); it runs where
    ``actor`` and ``keys`` live. :meth:`compile` compiles it ahead of time for an
    (abstract) actor: later calls run that executable and never compile (the trainer does
    it beside the chunk's compile).
    """

    def __init__(self, algo: Algorithm, env: VecEnv, keys: jax.Array):
        each_seed = make_evaluate(algo, env, seeds=True)

        def evaluate(actor: PyTree, keys: jax.Array, step: jax.Array) -> Any:
            # named: the program's name in the compile log and the summary
            return each_seed(actor, jax.vmap(start_key, (0, None))(keys, step))

        self._fn = evaluate
        self._jit = jax.jit(self._fn)
        self._keys = keys
        self.episodes = env.num_envs
        self._compiled: jax.stages.Compiled | None = None

    def _step(self, env_steps: int) -> jax.Array:
        """The step as the program takes it: a uint32 beside the keys."""
        device = next(iter(self._keys.devices()))
        return jax.device_put(np.uint32(int(env_steps) % 2**32), device)

    def compile(self, actor_like: PyTree, programs: ProgramCache | None = None) -> SeedEvaluate:
        """Lower and compile for actors shaped (and placed) like ``actor_like`` (arrays or
        ``jax.ShapeDtypeStruct``\\ s with shardings), or load the program ``programs`` kept
        for them; returns self."""
        programs = programs if programs is not None else ProgramCache.off()
        jitted = programs.jit("evaluate", self._fn) if programs.on else self._jit
        self._compiled = programs.compile("evaluate", jitted, actor_like, self._keys, self._step(0))
        return self

    @property
    def compiled(self) -> bool:
        """True once :meth:`compile` has run."""
        return self._compiled is not None

    def __call__(self, actor: PyTree, env_steps: int = 0) -> EvalResult:
        fn = self._compiled if self._compiled is not None else self._jit
        return fn(actor, self._keys, self._step(env_steps))


def make_seed_evaluate(algo: Algorithm, env: VecEnv, keys: jax.Array) -> SeedEvaluate:
    """``evaluate(actor, env_steps)`` of ``algo``'s policy for every seed at once
    (:class:`SeedEvaluate`)."""
    return SeedEvaluate(algo, env, keys)


def host_start_seed(seed: int, slot: int, env_steps: int) -> int:
    """The reset seed of slot ``slot``'s host envs at the evaluation of ``env_steps``
    (env ``j`` is reset with it ``+ j``): drawn from ``(seed, slot, env_steps)``, so every
    evaluation starts afresh and the same step and seed start alike."""
    state = np.random.SeedSequence([seed, slot, int(env_steps) % 2**32]).generate_state(1)
    return int(state[0] % 2**30)


def make_host_evaluate(
    algo: Algorithm, env_name: str, episodes: int, seed: int, max_steps: int | None = None
) -> Callable[..., EvalResult]:
    """``evaluate(actor, env_steps=None)`` on host envs (``gymnasium/...``, ``envpool/...``),
    every seed.

    Actor leaves ``[S, ...]``, results ``[S]``. Seed ``i`` plays one deterministic episode
    in each of ``episodes`` envs built for the call (env ``j`` reset with seed
    ``host_start_seed(seed, i, env_steps) + j``: a run's evaluations, fresh starts at
    every one, the same for the same step; without ``env_steps``, ``seed + 1000 i + j``:
    :meth:`jaxspreeze.agent.agent.Agent.evaluate`'s seeds; envpool seeds its pool at
    creation with that seed) and closed
    after it; each env's first finished episode counts. The policy is jitted once; it runs
    where ``actor`` lives. Its carry starts at ``algo.initial_carry`` and is reset where
    an episode starts (a reset row, or the row after an episode's end).
    """
    policy = jax.jit(lambda actor, carry, obs: algo.act(actor, carry, obs, jax.random.key(0), True))
    initial = jax.device_get(algo.initial_carry(episodes))

    def one_seed(actor: PyTree, start: int) -> tuple[float, ...]:
        with make_host_env(env_name, episodes, seed=start) as env:
            steps = max_steps or env.spec.max_episode_steps
            obs = env.reset(start)
            finished = np.zeros(episodes, bool)
            ret = np.zeros(episodes, np.float64)
            length = np.zeros(episodes, np.int64)
            carry = initial
            for _ in range(steps + 1):  # (+1: a next-step reset row may come first)
                action, carry = policy(actor, carry, obs)
                out = env.step(np.asarray(action))
                starts = ~out.valid | out.terminated | out.truncated
                carry = reset_carry(jax.device_get(carry), initial, starts)
                live = ~finished & out.valid
                ret += np.where(live, out.reward, 0.0)
                length += live
                finished |= live & (out.terminated | out.truncated)
                obs = out.obs
                if finished.all():
                    break
        se = float(ret.std(ddof=1) / np.sqrt(episodes)) if episodes > 1 else float("nan")
        return float(ret.mean()), float(ret.std()), float(length.mean()), se

    def evaluate(actor: PyTree, env_steps: int | None = None) -> EvalResult:
        num_seeds = jax.tree.leaves(actor)[0].shape[0]
        starts = [
            seed + 1000 * i if env_steps is None else host_start_seed(seed, i, env_steps)
            for i in range(num_seeds)
        ]
        rows = [one_seed(jax.tree.map(lambda x: x[i], actor), starts[i]) for i in range(num_seeds)]
        return EvalResult(*(np.asarray(col, np.float32) for col in zip(*rows, strict=True)))

    evaluate.episodes = episodes  # type: ignore[attr-defined]
    return evaluate


# ------------------------------------------------------------------------ the thread
@dataclass
class Snapshot:
    """A copy of the actor parameters taken at a chunk boundary, waiting to be evaluated."""

    actor: PyTree
    env_steps: int
    chunk: int
    final: bool
    future: Future = field(default_factory=Future)


OnResult = Callable[[Snapshot, EvalResult, float], None]
OnNote = Callable[[Note], None]


def snapshot_copy(actor: PyTree, device: jax.Device | None = None) -> PyTree:
    """A fresh copy of ``actor`` (on ``device`` if given); dispatched, never awaited.

    The copy is enqueued before the next chunk donates ``actor``'s buffers, so the
    evaluator never reads a donated buffer.
    """
    if device is None:
        return jax.tree.map(jnp.copy, actor)
    return jax.device_put(actor, device, may_alias=False)


class Evaluator:
    """Evaluates actor snapshots on a host thread, beside training.

    At most :data:`WAITING` snapshots wait: a newer one replaces the oldest waiting one
    when they are all taken (latest wins; the replaced one is counted in :attr:`skipped`
    and its future cancelled), so that a slow evaluator never holds training back. With
    ``skip`` False (the default where the process has one CPU:
    :func:`~jaxspreeze.core.cpus.spare_cpu`) :meth:`submit` waits for a place instead:
    on one CPU the evaluations take turns with the chunks whatever happens, and skipping
    only lost them (a warm PQN Breakout-MinAtar run pinned to one core skipped 6 of its
    10 evaluations on about half its runs: the evaluation waited behind the chunks
    dispatched after it, and its threshold was seen at twice the env steps). Errors are
    reported and counted, never raised into training. :meth:`close` sends the sentinel
    and waits for the waiting snapshots to finish.

    ``on_note`` hears, in order, each snapshot queued (before the evaluator can take it),
    each one skipped and why (the evaluation it waited behind) and each one that failed:
    with the records, what the console needs to print every evaluation in step order.
    """

    def __init__(
        self,
        evaluate: Callable[[PyTree], EvalResult],
        *,
        device: jax.Device | None = None,
        on_result: OnResult | None = None,
        report: Report | None = None,
        on_note: OnNote | None = None,
        skip: bool | None = None,
    ):
        self._evaluate = evaluate
        self._skip = spare_cpu() if skip is None else skip
        self.device = device
        self._on_result = on_result
        self._on_note = on_note or (lambda note: None)
        self._busy: Snapshot | None = None  # the snapshot being evaluated
        self._report = report or warn
        self._waiting: collections.deque = collections.deque()  # snapshots, then _STOP
        self._cond = threading.Condition()
        self.submitted = 0
        self.done = 0
        self.skipped = 0
        self.failed = 0
        self.eval_s = 0.0
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="jaxspreeze-eval", daemon=True)
        self._thread.start()
        # the exit lets the evaluation in flight finish, abandoning what waits
        exiting.finish_at_exit(self._thread, self._abandon, lambda: self._busy is not None)

    def submit(
        self, actor: PyTree, *, env_steps: int, chunk: int = -1, final: bool = False
    ) -> Future:
        """Queue a copy of ``actor`` for evaluation; never waits. Returns its future.

        The future gives ``(snapshot, EvalResult of numpy arrays)``, or is cancelled if a
        newer snapshot replaced this one before it started.
        """
        snap = Snapshot(snapshot_copy(actor, self.device), env_steps, chunk, final)
        with self._cond:
            self.submitted += 1
            while len(self._waiting) >= WAITING:  # (no _STOP: nothing comes after close)
                if not self._skip and self._thread.is_alive():
                    self._cond.wait(_ROOM_POLL_S)  # (_take makes room and says so)
                    continue
                old = self._waiting.popleft()
                old.future.cancel()
                self.skipped += 1
                self._on_note(Note("skipped", old.env_steps, _why_skipped(self._busy, env_steps)))
            self._on_note(Note("queued", env_steps))  # before the evaluator can take it
            self._waiting.append(snap)
            self._cond.notify()
        return snap.future

    def _take(self) -> Any:
        """The oldest waiting snapshot whose future was not cancelled (or the sentinel),
        once there is one; it becomes the one being evaluated (under the lock: a skip's
        note names it)."""
        with self._cond:
            while True:
                while not self._waiting:
                    self._cond.wait()
                snap = self._waiting.popleft()
                self._cond.notify_all()  # a place is free (a submit may wait for one)
                if snap is _STOP:
                    return snap
                if snap.future.set_running_or_notify_cancel():
                    self._busy = snap
                    return snap

    def _run(self) -> None:
        while True:
            snap = self._take()
            if snap is _STOP:
                return
            t0 = time.perf_counter()
            try:
                result = jax.device_get(self._evaluate(snap.actor, snap.env_steps))
                result = EvalResult(*(np.asarray(x) for x in result))
            except Exception as e:
                self.failed += 1
                self._fail(f"evaluation at {snap.env_steps} env steps failed", e)
                self._on_note(Note("failed", snap.env_steps, f"{type(e).__name__}: {e}"))
                snap.actor = None  # free the copy
                snap.future.set_exception(e)
                continue
            finally:
                self.eval_s += time.perf_counter() - t0
                self._busy = None
            self.done += 1
            if self._on_result is not None:
                try:  # (it may keep the actor: the best evaluation's policy)
                    self._on_result(snap, result, time.perf_counter() - t0)
                except Exception as e:
                    self._fail("handling an evaluation result failed", e)
            snap.actor = None  # free the copy
            snap.future.set_result((snap, result))

    def _fail(self, what: str, e: BaseException) -> None:
        message = f"{what}: {type(e).__name__}: {e}"
        self.errors.append(message)
        if len(self.errors) == 1:
            self._report(f"evaluator: {message} (training goes on; later errors are counted)")

    def close(self, timeout: float | None = None) -> None:
        """Finish the waiting snapshots, then stop the thread (sentinel); past
        ``timeout`` seconds, say so and leave the thread to the interpreter's exit."""
        with self._cond:
            self._waiting.append(_STOP)
            self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._report("evaluator: still busy at shutdown; its last snapshots are abandoned")

    def _abandon(self) -> None:
        """Drop the snapshots that wait (cancelled) and stop the thread after the one it
        is evaluating, without waiting (the interpreter's exit)."""
        with self._cond:
            for old in self._waiting:
                if old is not _STOP:
                    old.future.cancel()
            self._waiting.clear()
            self._waiting.append(_STOP)
            self._cond.notify()

    def stats(self) -> dict[str, float | int]:
        """Evaluations done, skipped and failed, and the wall time spent evaluating."""
        return {
            "evaluations_done": self.done,
            "evaluations_skipped": self.skipped,
            "evaluations_failed": self.failed,
            "eval_wall_s": self.eval_s,
        }


def _why_skipped(busy: Snapshot | None, newer: int) -> str:
    """Why a waiting snapshot was replaced by the one at ``newer`` env steps."""
    if busy is None:  # (between two evaluations)
        return f"the snapshot at {newer:,} steps replaced it while it waited"
    return (
        f"the evaluator was still busy with {busy.env_steps:,} steps when {newer:,} came; "
        f"only the newest {WAITING} snapshots wait"
    )
