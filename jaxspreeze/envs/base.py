"""The vmapped env contract every family adapts to, and the shared auto-reset.

Every environment, whatever its library, is driven through the same vmapped contract::

    obs, state = env.reset(key)                                        # obs [N, ...]
    obs, state, reward, terminated, truncated, final_obs = env.step(key, state, action)

``terminated`` ends the return (bootstrap 0); ``truncated`` is a time limit (bootstrap
from ``final_obs``, the observation before the automatic reset). The returned ``state``
also tracks each env's running and last completed episode return and length.

A family (one module beside this one) turns a library's env into :class:`EnvParts`: a
spec, ``reset_one`` (one env) and ``step_batch`` (all envs at once; ``jax.vmap`` of a
per-env step for a library that resets by itself, like gymnax). Families whose library
does not reset build them with :func:`auto_reset`, which starts new episodes from
freshly sampled initial states (goal, object, noise) and keeps the final observation.
``step_batch`` takes one key per env (``jax.random.split(key, N)``), or the step's one key
where it says so (:data:`ONE_KEY`: :func:`auto_reset`'s, which hashes only the rows of
the split it draws with).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.types import EnvSpec, PyTree, legal_actions

ResetOne = Callable[[jax.Array], tuple[PyTree, PyTree]]  # key -> (obs, inner)
StepBatch = Callable[[jax.Array, PyTree, jax.Array], tuple]  # keys [N], inner [N], action [N]


class EnvState(NamedTuple):
    """Batched env state: the library's own state plus episode bookkeeping, all ``[N]``."""

    inner: PyTree
    episode_return: jax.Array  # running return of the current episode
    episode_length: jax.Array  # steps taken in the current episode
    last_return: jax.Array  # return of the most recently finished episode (0 before any)
    last_length: jax.Array
    episodes: jax.Array  # episodes finished so far


StepOut = tuple[jax.Array, EnvState, jax.Array, jax.Array, jax.Array, jax.Array]


class EnvParts(NamedTuple):
    """What a family builds for one named env: its spec and the per-env functions."""

    spec: EnvSpec
    reset_one: ResetOne
    step_batch: StepBatch
    render_state: Any = None  # the library's env object(s), kept for renderers
    # the step without new episodes (evaluation; see VecEnv.step_no_reset); None: step_batch
    step_batch_no_reset: StepBatch | None = None


@dataclass(frozen=True, eq=False)
class VecEnv:
    """``num_envs`` copies of one environment, stepped together; pure and jittable."""

    spec: EnvSpec
    num_envs: int
    reset_one: ResetOne  # one env: key -> (obs, inner)
    step_batch: (
        StepBatch  # all envs: (keys, inner, action) -> (obs, inner, reward, term, trunc, final_obs)
    )
    render_state: Any = None  # the library's env object(s), kept for renderers
    step_batch_no_reset: StepBatch | None = None  # None: step_batch (see step_no_reset)

    @classmethod
    def from_parts(cls, parts: EnvParts, num_envs: int) -> VecEnv:
        """``num_envs`` copies of the env a family built."""
        return cls(
            parts.spec,
            num_envs,
            parts.reset_one,
            parts.step_batch,
            parts.render_state,
            parts.step_batch_no_reset,
        )

    def reset(self, key: jax.Array) -> tuple[jax.Array, EnvState]:
        """Reset all envs: ``obs [N, *obs_shape]`` and a fresh :class:`EnvState`."""
        obs, inner = jax.vmap(self.reset_one)(jax.random.split(key, self.num_envs))
        zf = jnp.zeros((self.num_envs,), jnp.float32)
        zi = jnp.zeros((self.num_envs,), jnp.int32)
        return obs, EnvState(inner, zf, zi, zf, zi, zi)

    def step(self, key: jax.Array, state: EnvState, action: jax.Array) -> StepOut:
        """Step all envs (auto-reset inside); see the module docstring for the outputs."""
        return self._step(self.step_batch, key, state, action)

    def step_no_reset(self, key: jax.Array, state: EnvState, action: jax.Array) -> StepOut:
        """Step all envs without starting new episodes (for evaluation, which counts each
        env's first episode): after an env's episode ends its outputs mean nothing.

        For a family reset by :func:`auto_reset` the program then holds no reset (fewer
        ops to compile: no fresh initial states are drawn); a library that resets by
        itself (gymnax) steps as :meth:`step`.
        """
        return self._step(self.step_batch_no_reset or self.step_batch, key, state, action)

    def _step(
        self, step_batch: StepBatch, key: jax.Array, state: EnvState, action: jax.Array
    ) -> StepOut:
        # a step that draws for a few envs only takes the one key (auto_reset: ONE_KEY)
        one = getattr(step_batch, ONE_KEY, False)
        keys = key if one else jax.random.split(key, self.num_envs)
        obs, inner, reward, terminated, truncated, final_obs = step_batch(keys, state.inner, action)
        reward = reward.astype(jnp.float32)
        terminated = terminated.astype(bool)
        truncated = jnp.logical_and(truncated.astype(bool), ~terminated)
        done = terminated | truncated
        ret = state.episode_return + reward
        length = state.episode_length + 1
        state = EnvState(
            inner=inner,
            episode_return=jnp.where(done, 0.0, ret),
            episode_length=jnp.where(done, 0, length),
            last_return=jnp.where(done, ret, state.last_return),
            last_length=jnp.where(done, length, state.last_length),
            episodes=state.episodes + done.astype(jnp.int32),
        )
        return obs, state, reward, terminated, truncated, final_obs

    def random_actions(self, key: jax.Array, obs: jax.Array | None = None) -> jax.Array:
        """Uniform random actions for all envs (warm-up); among the legal ones of each
        observation ``obs [N, ...]`` for an env with masks (:func:`~jaxspreeze.core.types.legal_actions`)."""
        spec = self.spec
        ok = None if obs is None else legal_actions(spec, obs)
        if ok is not None:
            logits = jnp.where(ok, 0.0, -jnp.inf)
            return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
        if spec.discrete:
            return jax.random.randint(key, (self.num_envs,), 0, spec.action_dim)
        low = jnp.asarray(spec.action_low, jnp.float32)
        high = jnp.asarray(spec.action_high, jnp.float32)
        u = jax.random.uniform(key, (self.num_envs, spec.action_dim))
        return low + u * (high - low)


# ---------------------------------------------------------------- the shared auto-reset
REFRESH_EVERY = 16  # steps between two draws of each env's next initial state (see auto_reset)
# a step_batch with this attribute set takes the step's one key, not one per env
# (VecEnv.step): auto_reset's, which draws for one block of envs only
ONE_KEY = "takes_one_key"


class ResetInner(NamedTuple):
    """One env's library state, its episode's step count and its next initial state.

    In :func:`auto_reset`'s lean order an episode that ended goes on from ``start`` at the
    env's next step (selected there, inside the step's own kernels): until then ``state``
    is the state the last step led to and ``ended`` is set. In the plain order ``ended``
    and ``drawn`` are None (no leaves: the state, and a checkpoint of it, hold what they
    held before lean resets existed; a lean family's checkpoint from before them resumes
    with the fresh state's values for the two, ``store.checkpoint.ADDED_ENV_LEAVES``).
    :meth:`current` is the state the next step starts from, in both."""

    state: PyTree  # the library's own state (e.g. a brax or Playground ``State``)
    steps: jax.Array  # int32 steps into the current episode, for the time limit
    start: PyTree  # the initial state the next episode starts from (drawn ahead)
    start_obs: jax.Array  # its observation
    clock: jax.Array  # int32 steps since reset (the same in every env): picks the draws
    ended: jax.Array | None = None  # lean: the last step ended the episode
    drawn: jax.Array | None = None  # lean: raw key of the last step's draw (its block's)

    def current(self) -> PyTree:
        """The library state the next step starts from: ``start`` where ``ended``."""
        if self.ended is None:  # the plain order: the start was selected after the step
            return self.state
        return jax.tree.map(lambda a, b: _where(self.ended, a, b), self.start, self.state)


RawReset = Callable[[jax.Array], tuple[jax.Array, PyTree]]  # key -> (obs, state)
# (state, action) -> (obs, state, reward, terminated), or with the env's own truncation
# (obs, state, reward, terminated, truncated)
RawStep = Callable[[PyTree, jax.Array], tuple]


class AutoReset(NamedTuple):
    """What :func:`auto_reset` builds: the reset, the step, and the step without resets."""

    reset_one: ResetOne
    step_batch: StepBatch
    step_batch_no_reset: StepBatch


def auto_reset(
    reset: RawReset,
    step: RawStep,
    max_steps: int,
    refresh_every: int = REFRESH_EVERY,
    *,
    skip_fixed: bool = True,
    lean: bool = False,
) -> AutoReset:
    """``reset_one``/``step_batch`` with a time limit and resets that explore.

    ``reset(key)`` samples an initial state; ``step`` is the library's step without any
    reset (a fifth output, if it returns one, is a truncation of the env's own, added to
    the time limit's). When an episode ends (``terminated``, or ``max_steps`` steps: ``truncated``)
    the env continues from its ``start``: an initial state drawn ahead with ``reset``.
    Drawing one for every env at every step would cost a full batch of resets per step
    (under ``vmap`` both sides of a select are computed, so a ``cond`` saves nothing), so
    each step draws them for one block of ``ceil(N / refresh_every)`` envs, with the
    step's keys, the blocks in turn: every env's ``start`` is fresh at least every
    ``refresh_every`` steps. An episode longer than that always starts from a state never
    used before; shorter ones may share their env's previous start. ``refresh_every=1``
    draws for every env at every step. ``final_obs`` is the observation the last action
    led to, before the reset.

    **Lean resets** (``lean``, a family's choice; the transitions are those of the plain
    order above, select the start where the episode ended, then draw:
    ``tests/test_auto_reset.py``, bitwise for integer states; a float state may differ in
    its last bits, its kernels fused otherwise: brax's did, so its families keep the
    plain order). The select of the start is made at the env's *next* step, on the state
    it starts from (:attr:`ResetInner.ended`, :meth:`ResetInner.current`): there XLA
    fuses it into the step's own kernels, where after the step it was a pass of its own
    over every leaf the step wrote, recomputing the step's ``done`` in each (Navix
    ``Empty-8x8`` at 1,024 envs: a quarter of the step's time). The block's draw is
    written at the next step too, after that select, from the keys the step kept
    (:attr:`ResetInner.drawn`), so an episode that ended starts from the state drawn
    before its last step, as in the plain order. The draw's keys are the rows of
    ``jax.random.split(key, N)`` for the block only, and every split and draw inside
    ``reset`` hashes them with threefry unrolled (:func:`_unrolled`): JAX's own is a loop
    of about 80 small kernels on a CPU, more than a cheap env's step. Its ``step_batch``
    takes the step's one key (:data:`ONE_KEY`).

    ``step_batch_no_reset`` steps without any of this (no draw, no reset: an episode that
    ended goes on from its last state, its outputs meaningless): what evaluation uses,
    since it counts each env's first episode, so its program holds no reset inside the
    step. The time limit still reports ``truncated``. It steps from ``state``, not
    :meth:`ResetInner.current` (evaluation starts from ``reset``, where nothing ended).

    **Fixed leaves** (``skip_fixed``, on by default; the values are bitwise those of
    ``skip_fixed=False``). A leaf of the state that every ``reset`` sets to the same value
    whatever its key (a constant: a fixed layout, full health, an empty inventory) is
    never drawn again: every ``start`` holds that value already. A constant leaf that
    ``step`` also returns unchanged (a wall map the agent cannot alter) holds it in every
    state, so the reset's select is skipped for it. Which leaves these are is read from
    the jaxprs of ``reset`` and ``step`` (:func:`_fixed_leaves`) when a program first
    traces the step. On a CPU each leaf selected or drawn is a kernel of its own, and a
    suite's state has tens of leaves of which its step touches a few: for Navix's
    ``Empty-8x8`` 29 of 47 leaves need no select and 46 no draw.

    ``reset`` and ``step`` are wrapped in ``jax.jit``: every program that uses them (init,
    warm-up, chunk, evaluation) reuses one trace per shape, and within a program the two
    uses of ``reset`` lower to one function (on CPU, about 30% less compile time for a
    Playground task).
    """
    reset, step = jax.jit(reset), jax.jit(step)
    draw = (lambda key: _unrolled(reset, key)) if lean else reset

    def reset_one(key: jax.Array) -> tuple[jax.Array, ResetInner]:
        k_now, k_next = jax.random.split(key)
        obs, state = draw(k_now)
        start_obs, start = draw(k_next)
        zero = jnp.zeros((), jnp.int32)
        if not lean:
            return obs, ResetInner(state, zero, start, start_obs, zero)
        no = jnp.zeros((), bool)
        return obs, ResetInner(state, zero, start, start_obs, zero, no, _raw(k_next))

    plans: dict[Any, Fixed] = {}

    def _plan(keys: jax.Array, inner: ResetInner, action: jax.Array) -> Fixed:
        """The fixed leaves of this env's state (one analysis per per-env signature)."""
        one = lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype)
        key = jax.ShapeDtypeStruct(keys.shape, keys.dtype) if _one_key(keys) else one(keys)
        args = (key, jax.tree.map(one, inner.state), jax.tree.map(one, action))
        sig = jax.tree.map(lambda x: (x.shape, str(x.dtype)), args)
        sig = (jax.tree.structure(args), tuple(jax.tree.leaves(sig)))
        if sig not in plans:
            plans[sig] = _fixed_leaves(reset, step, *args) if skip_fixed else Fixed.none(args[1])
        return plans[sig]

    def _block(n: int, clock: jax.Array) -> tuple[jax.Array, int]:
        """The first env and the size of the block whose starts the step at ``clock``
        draws: ``ceil(n / refresh_every)`` envs, the blocks in turn (the last one clamped
        to fit), so that every env's start is at most ``refresh_every`` steps old."""
        size = -(-n // refresh_every)
        blocks = -(-n // size)
        return jnp.minimum((clock % blocks) * size, n - size), size

    def _reset_where(flag: jax.Array, inner: ResetInner, state: PyTree, fixed: Fixed) -> PyTree:
        """``state`` with each env's start where ``flag`` (a leaf held in every state
        needs no select: the state's own is the start's)."""
        return _map_leaves(
            lambda start, now, held: now if held else _where(flag, start, now),
            inner.start,
            state,
            fixed.held,
        )

    def _draw(inner: ResetInner, keys: jax.Array, first: jax.Array, drew: Any, fixed: Fixed):
        """The starts (and their observations) with those of the block at ``first`` drawn
        from ``keys`` (kept as they were where ``drew`` is false)."""
        size = keys.shape[0]
        new_obs, new = jax.vmap(draw)(keys)

        def put(old: jax.Array, x: jax.Array) -> jax.Array:
            if drew is not True:
                x = jnp.where(drew, x, jax.lax.dynamic_slice_in_dim(old, first, size))
            return jax.lax.dynamic_update_slice_in_dim(old, x, first, axis=0)

        # a constant leaf is the same in every start: nothing to write
        start = _map_leaves(
            lambda old, x, const: old if const else put(old, x), inner.start, new, fixed.const
        )
        return start, inner.start_obs if fixed.const_obs else put(inner.start_obs, new_obs)

    def step_batch(keys: jax.Array, inner: ResetInner, action: jax.Array) -> tuple:
        fixed = _plan(keys, inner, action)
        n = inner.steps.shape[0]
        state, start, start_obs = inner.state, inner.start, inner.start_obs
        if lean:
            # the starts of the episodes the last step ended, then that step's draw, kept
            # until now: an episode that ended there starts from the state drawn before
            # it, as in the plain order below (no draw before the first step)
            state = _reset_where(inner.ended, inner, state, fixed)
            last, size = _block(n, inner.clock[0] - 1)
            raw = jax.lax.dynamic_slice_in_dim(inner.drawn, last, size)
            drew = inner.clock[0] > 0
            start, start_obs = _draw(inner, _wrap(raw, keys), last, drew, fixed)
        obs, state, reward, terminated, *own = jax.vmap(step)(state, action)
        steps = inner.steps + 1
        terminated = jnp.asarray(terminated, bool)
        truncated = _limit(steps, max_steps, own)
        done = terminated | truncated
        next_obs = jax.tree.map(lambda a, b: _where(done, a, b), start_obs, obs)
        first, size = _block(n, inner.clock[0])
        rows = _rows(keys, n, first, size)
        ended, drawn = inner.ended, inner.drawn
        if lean:  # the start's select and this step's draw: at the next step
            ended = done
            drawn = jax.lax.dynamic_update_slice_in_dim(drawn, _raw(rows), first, axis=0)
        else:  # the start where the episode ended, then the draw for this step's block
            state = _reset_where(done, inner._replace(start=start), state, fixed)
            start, start_obs = _draw(inner, rows, first, True, fixed)
        clock = inner.clock + 1
        steps = jnp.where(done, 0, steps)
        inner = ResetInner(state, steps, start, start_obs, clock, ended, drawn)
        return next_obs, inner, reward, terminated, truncated, obs

    def step_batch_no_reset(keys: jax.Array, inner: ResetInner, action: jax.Array) -> tuple:
        del keys  # nothing is drawn
        obs, state, reward, terminated, *own = jax.vmap(step)(inner.state, action)
        steps = inner.steps + 1
        inner = inner._replace(state=state, steps=steps, clock=inner.clock + 1)
        truncated = _limit(steps, max_steps, own)
        return obs, inner, reward, jnp.asarray(terminated, bool), truncated, obs

    if lean:
        setattr(step_batch, ONE_KEY, True)
    return AutoReset(reset_one, step_batch, step_batch_no_reset)


class Fixed(NamedTuple):
    """Which leaves of an env's state :func:`auto_reset` need not select or draw, in the
    order of ``jax.tree.leaves(state)``."""

    const: tuple[bool, ...]  # every reset gives the leaf the same value, whatever its key
    held: tuple[bool, ...]  # constant, and every step returns it unchanged
    const_obs: bool  # the reset's observation is a constant too (one array)

    @classmethod
    def none(cls, state: PyTree) -> Fixed:
        """No leaf fixed: every leaf selected and drawn."""
        n = len(jax.tree.leaves(state))
        return cls((False,) * n, (False,) * n, False)


# primitives whose jaxpr is called as a function: their outputs are followed inside
_CALLS = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "remat"}
)


def _flow(jaxpr: Any, varies: list[bool], source: list[int | None]) -> list[tuple]:
    """For each output of ``jaxpr``: whether it may vary with the inputs marked in
    ``varies``, and which input it is (an index from ``source``) when it is one of them
    unchanged. Calls (``jit``, ...) are followed inside; any other equation's outputs vary
    when one of its inputs does, or when it has effects or is not a function of its
    inputs (a host callback, XLA's stateful ``rng_uniform``)."""
    from jax.extend.core import Literal  # lazy: only when a program traces a step

    seen: dict[Any, tuple] = {v: (False, None) for v in jaxpr.constvars}
    seen.update({v: (d, i) for v, d, i in zip(jaxpr.invars, varies, source, strict=True)})
    get = lambda v: (False, None) if isinstance(v, Literal) else seen.get(v, (True, None))
    for eqn in jaxpr.eqns:
        ins = [get(v) for v in eqn.invars]
        sub = next((eqn.params[k] for k in ("jaxpr", "call_jaxpr") if k in eqn.params), None)
        sub = getattr(sub, "jaxpr", sub)
        if (
            eqn.primitive.name in _CALLS
            and sub is not None
            and not eqn.effects
            and len(sub.invars) == len(ins)
            and len(sub.outvars) == len(eqn.outvars)
        ):
            outs = _flow(sub, [d for d, _ in ins], [i for _, i in ins])
        else:
            impure = "callback" in eqn.primitive.name or eqn.primitive.name == "rng_uniform"
            anything = bool(eqn.effects) or impure
            anything = anything or any(d for d, _ in ins)
            outs = [(anything, None)] * len(eqn.outvars)
        seen.update(zip(eqn.outvars, outs, strict=True))
    return [get(v) for v in jaxpr.outvars]


def _fixed_leaves(reset: Callable, step: Callable, key: Any, state: Any, action: Any) -> Fixed:
    """The :class:`Fixed` leaves of one env, read from the jaxprs of ``reset(key)`` and
    ``step(state, action)`` (abstract arguments of one env): a constant is an output of
    ``reset`` that does not depend on the key; a held leaf is a constant that ``step``
    returns as it took it."""
    closed, (obs, _) = jax.make_jaxpr(reset, return_shape=True)(key)
    n_in = len(closed.jaxpr.invars)
    flows = _flow(closed.jaxpr, [True] * n_in, [None] * n_in)
    n_obs = len(jax.tree.leaves(obs))
    const = tuple(not varies for varies, _ in flows[n_obs:])
    const_obs = n_obs == 1 and not flows[0][0]
    closed, out = jax.make_jaxpr(step, return_shape=True)(state, action)
    n_in = len(closed.jaxpr.invars)
    flows = _flow(closed.jaxpr, [True] * n_in, list(range(n_in)))
    n_obs = len(jax.tree.leaves(out[0]))
    same = [source == k for k, (_, source) in enumerate(flows[n_obs : n_obs + len(const)])]
    return Fixed(const, tuple(c and s for c, s in zip(const, same, strict=True)), const_obs)


def _map_leaves(fn: Callable, tree: PyTree, other: PyTree, flags: tuple[bool, ...]) -> PyTree:
    """``fn(leaf, other_leaf, flag)`` over the leaves of ``tree`` (in ``other``'s
    structure: the same leaves)."""
    leaves, treedef = jax.tree.flatten(other)
    mine = jax.tree.leaves(tree)
    out = [fn(a, b, f) for a, b, f in zip(mine, leaves, flags, strict=True)]
    return jax.tree.unflatten(treedef, out)


def _where(flag: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """``a`` where ``flag`` (one per env: ``[N]``, or a scalar for one env), else ``b``."""
    return jnp.where(flag.reshape(flag.shape + (1,) * (a.ndim - flag.ndim)), a, b)


def _raw(keys: jax.Array) -> jax.Array:
    """The keys as their raw ``uint32`` data (a state carries them so)."""
    return jax.random.key_data(keys) if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys


def _wrap(raw: jax.Array, like: jax.Array) -> jax.Array:
    """Raw key data as keys of the kind of ``like`` (typed, of its implementation, or raw)."""
    if jnp.issubdtype(like.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(raw, impl=jax.random.key_impl(like))
    return raw


def _limit(steps: jax.Array, max_steps: int, own: list[jax.Array]) -> jax.Array:
    """The truncations of a step: the time limit's, or'ed with the env's own (if any)."""
    truncated = steps >= max_steps
    return truncated | jnp.asarray(own[0], bool) if own else truncated


# ------------------------------------------------- the draws' keys, without XLA CPU's loop
# On a CPU, JAX lowers the threefry hash behind every key split and random draw as a loop
# of 5 iterations (to compile faster): some 80 small kernels however few keys it hashes,
# which for a cheap env cost more than its step. The auto-reset's draws (a block of a few
# envs per step) compute the same hash unrolled, as elementwise arithmetic that XLA fuses
# into one kernel: the bits are threefry2x32's, and the keys those of jax.random.split
# (tests/test_auto_reset.py). Only with JAX's default keys (threefry2x32, partitionable,
# the default since jax 0.5); other keys take JAX's own path.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array) -> list[jax.Array]:
    """The Threefry-2x32 hash of the counters ``(x1, x2)`` under the key ``(k1, k2)``
    (all ``uint32``, broadcast), its 20 rounds unrolled."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x = [x1 + ks[0], x2 + ks[1]]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x[0] = x[0] + x[1]
            x[1] = ((x[1] << np.uint32(r)) | (x[1] >> np.uint32(32 - r))) ^ x[0]
        x[0] = x[0] + ks[(i + 1) % 3]
        x[1] = x[1] + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x


def _counts(shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """The 64-bit counters ``0 .. prod(shape) - 1`` as (high, low) ``uint32`` halves."""
    low = jnp.arange(math.prod(shape), dtype=jnp.uint32).reshape(shape)
    return jnp.zeros(shape, jnp.uint32), low


def _split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    b1, b2 = _threefry(key[0], key[1], *_counts(shape))
    return jnp.stack([b1, b2], axis=b1.ndim)


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    b1, b2 = _threefry(key[0], key[1], *_counts(shape))
    dtype = np.dtype(f"uint{bit_width}")
    if bit_width == 64:
        return (b1.astype(dtype) << np.uint64(32)) | b2.astype(dtype)
    return (b1 ^ b2).astype(dtype)


def _fold_in(key: jax.Array, data: jax.Array) -> jax.Array:
    low = jnp.asarray(data, jnp.uint32).reshape(1)
    return jnp.concatenate(_threefry(key[0], key[1], jnp.zeros_like(low), low))


@functools.cache
def _unrolled_impl() -> Any:
    """JAX's threefry2x32 keys with the hash unrolled (the same bits)."""
    from jax.extend.random import define_prng_impl, threefry_prng_impl

    return define_prng_impl(
        key_shape=(2,),
        seed=threefry_prng_impl.seed,
        split=_split,
        random_bits=_random_bits,
        fold_in=_fold_in,
        name="threefry2x32_unrolled",
        tag="fry_unrolled",
    )


def _threefry_keys(keys: jax.Array) -> bool:
    """Whether ``keys`` are typed threefry2x32 keys split the partitionable way (JAX's
    default), whose hash :func:`_threefry` computes bitwise."""
    from jax.extend.random import threefry_prng_impl

    typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
    return (
        typed
        and jax.random.key_impl(keys) == threefry_prng_impl.name  # JAX's own: a name
        and bool(jax.config.jax_threefry_partitionable)
    )


def _one_key(keys: jax.Array) -> bool:
    """Whether ``keys`` is the step's one key (typed, or raw ``uint32[2]``), not one per env."""
    typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
    return keys.ndim == (0 if typed else 1)


def _rows(keys: jax.Array, n: int, first: jax.Array, size: int) -> jax.Array:
    """``jax.random.split(key, n)[first : first + size]`` when ``keys`` is the one key
    (only those rows hashed, unrolled), ``keys[first : first + size]`` when it is the
    ``n`` keys already split."""
    if not _one_key(keys):
        return jax.lax.dynamic_slice_in_dim(keys, first, size)
    if not _threefry_keys(keys):
        return jax.lax.dynamic_slice_in_dim(jax.random.split(keys, n), first, size)
    data = jax.random.key_data(keys)
    low = first.astype(jnp.uint32) + jnp.arange(size, dtype=jnp.uint32)
    b1, b2 = _threefry(data[0], data[1], jnp.zeros_like(low), low)
    return jax.random.wrap_key_data(jnp.stack([b1, b2], -1), impl=jax.random.key_impl(keys))


def _unrolled(fn: Callable, key: jax.Array) -> Any:
    """``fn(key)`` with every split and draw of ``key``'s randomness hashed unrolled (the
    same bits); the keys it returns are JAX's own again."""
    if not _threefry_keys(key):
        return fn(key)
    impl = jax.random.key_impl(key)
    out = fn(jax.random.wrap_key_data(jax.random.key_data(key), impl=_unrolled_impl()))

    def back(x: Any) -> Any:
        mine = jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
        if mine and jax.random.key_impl(x) == _unrolled_impl():
            return jax.random.wrap_key_data(jax.random.key_data(x), impl=impl)
        return x

    return jax.tree.map(back, out)
