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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

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
        keys = jax.random.split(key, self.num_envs)
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


class ResetInner(NamedTuple):
    """One env's library state, its episode's step count and its next initial state."""

    state: PyTree  # the library's own state (e.g. a brax or Playground ``State``)
    steps: jax.Array  # int32 steps into the current episode, for the time limit
    start: PyTree  # the initial state the next episode starts from (drawn ahead)
    start_obs: jax.Array  # its observation
    clock: jax.Array  # int32 steps since reset (the same in every env): picks the draws


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

    ``step_batch_no_reset`` steps without any of this (no draw, no reset: an episode that
    ended goes on from its last state, its outputs meaningless): what evaluation uses,
    since it counts each env's first episode, so its program holds no reset inside the
    step. The time limit still reports ``truncated``.

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

    def reset_one(key: jax.Array) -> tuple[jax.Array, ResetInner]:
        k_now, k_next = jax.random.split(key)
        obs, state = reset(k_now)
        start_obs, start = reset(k_next)
        zero = jnp.zeros((), jnp.int32)
        return obs, ResetInner(state, zero, start, start_obs, zero)

    plans: dict[Any, Fixed] = {}

    def _plan(keys: jax.Array, inner: ResetInner, action: jax.Array) -> Fixed:
        """The fixed leaves of this env's state (one analysis per per-env signature)."""
        one = lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype)
        args = (one(keys), jax.tree.map(one, inner.state), jax.tree.map(one, action))
        sig = jax.tree.map(lambda x: (x.shape, str(x.dtype)), args)
        sig = (jax.tree.structure(args), tuple(jax.tree.leaves(sig)))
        if sig not in plans:
            plans[sig] = _fixed_leaves(reset, step, *args) if skip_fixed else Fixed.none(args[1])
        return plans[sig]

    def step_batch(keys: jax.Array, inner: ResetInner, action: jax.Array) -> tuple:
        obs, state, reward, terminated, *own = jax.vmap(step)(inner.state, action)
        steps = inner.steps + 1
        terminated = jnp.asarray(terminated, bool)
        truncated = _limit(steps, max_steps, own)
        done = terminated | truncated

        def where_done(a, b):
            return jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b)

        fixed = _plan(keys, inner, action)
        # a leaf held in every state needs no select (the state's own leaf is the start's)
        state = _map_leaves(
            lambda start, now, held: now if held else where_done(start, now),
            inner.start,
            state,
            fixed.held,
        )
        next_obs = jax.tree.map(where_done, inner.start_obs, obs)
        # draw the next initial state of one block of ceil(N / refresh_every) envs, the
        # blocks in turn (the last one clamped to fit): every env's at least every
        # refresh_every steps
        n = keys.shape[0]
        size = -(-n // refresh_every)
        blocks = -(-n // size)
        first = jnp.minimum((inner.clock[0] % blocks) * size, n - size)
        new_obs, new = jax.vmap(reset)(jax.lax.dynamic_slice_in_dim(keys, first, size))
        put = lambda old, x: jax.lax.dynamic_update_slice_in_dim(old, x, first, axis=0)
        # a constant leaf is the same in every start: nothing to write
        start = _map_leaves(
            lambda old, x, const: old if const else put(old, x), inner.start, new, fixed.const
        )
        start_obs = inner.start_obs if fixed.const_obs else put(inner.start_obs, new_obs)
        clock = inner.clock + 1
        inner = ResetInner(state, jnp.where(done, 0, steps), start, start_obs, clock)
        return next_obs, inner, reward, terminated, truncated, obs

    def step_batch_no_reset(keys: jax.Array, inner: ResetInner, action: jax.Array) -> tuple:
        del keys  # nothing is drawn
        obs, state, reward, terminated, *own = jax.vmap(step)(inner.state, action)
        steps = inner.steps + 1
        inner = inner._replace(state=state, steps=steps, clock=inner.clock + 1)
        truncated = _limit(steps, max_steps, own)
        return obs, inner, reward, jnp.asarray(terminated, bool), truncated, obs

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


def _limit(steps: jax.Array, max_steps: int, own: list[jax.Array]) -> jax.Array:
    """The truncations of a step: the time limit's, or'ed with the env's own (if any)."""
    truncated = steps >= max_steps
    return truncated | jnp.asarray(own[0], bool) if own else truncated
