"""Your own JAX env on the device: ``jaxspreeze.train(cfg, env=<object>)``, named ``jax/<Class>``.

No registration: the object is entered here, for this process, under the reserved name
``jax/<ClassName>`` (:func:`register`), and from then on it is a device env like
``gymnax/`` ones: vmapped, stepped inside the jitted chunk, reset inside its step, its
final observation kept for bootstrapping. Two kinds of object are taken, and a pair of
pure functions, ``JaxEnv(reset, step, actions=N)`` (:class:`JaxEnv`, named ``jax/<name>``):

- **gymnax-style** (``gymnax.environments.environment.Environment`` subclasses, or any
  object with the same API): ``reset(key, params) -> (obs, state)``,
  ``step(key, state, action, params)``, ``action_space(params)``,
  ``observation_space(params)`` and ``default_params`` (or pass ``(env, params)``, as
  ``gymnax.make`` returns them). Its step resets by itself when an episode ends (gymnax's
  convention) and returns either gymnax >= 1.0's ``(obs, state, reward, terminated,
  truncated, info)`` with ``info["final_observation"]``, stepped as it is; or the classic
  ``(obs, state, reward, done, info)``: then the final observation is
  ``info["final_observation"]`` if it has one, else the class's ``step_env`` and
  ``reset_env`` (gymnax's base class's hooks) are stepped the way gymnax's own step does
  (one key split in two: the step's, the reset's) to keep it; ``done`` is a truncation
  when the episode has run ``params.max_steps_in_episode`` steps (``info["truncated"]`` /
  ``info["terminated"]`` when the env reports them), a termination otherwise.
- **Jumanji-style**: ``reset(key) -> (state, timestep)``, ``step(state, action) ->
  (state, timestep)``, ``observation_spec`` and ``action_spec`` (methods or properties);
  the timestep has ``observation``, ``reward``, ``discount`` and ``step_type`` (2 is the
  last; or its ``last()``). A last step with discount 0 is a termination, one with a
  discount is a truncation; the env does not reset itself: :func:`~jaxspreeze.envs.base.auto_reset`
  resets it, with its ``time_limit`` (or 1000 steps) as the time limit.

Observations are one array (a Box), kept one-byte (bool, uint8, int8) as they are, any
other dtype as float32 (:func:`jaxspreeze.core.types.kept_obs_dtype`, every family's rule), or, Jumanji-style, a structure of arrays (a NamedTuple, dataclass or
dict, as Jumanji's observations are): its leaves are flattened to float32
and concatenated in order, the leaf named ``action_mask`` (the legal actions, 1 legal)
last: the spec then says ``action_mask`` and its ``actor_obs`` / ``critic_obs`` columns
leave the mask out (:mod:`jaxspreeze.algos.masks`: policies never pick an illegal action).
Actions are a Box of shape ``()`` or ``(d,)`` with finite bounds, a Discrete (a Jumanji
``BoundedArray`` or ``DiscreteArray``) or, Jumanji-style, a ``MultiDiscreteArray`` (one
discrete action over the product of its sizes, unravelled in C order; its mask, if any,
shaped as the sizes, like Minesweeper's row and column). Anything else is one
:class:`~jaxspreeze.core.errors.ConfigError` naming ``env``.

A run directory records the env (:data:`RECORD_FILE`): its name, kind, class
(``module:qualname``) and spec. No object is rebuilt from the record (its constructor's
arguments and params are not known): ``jaxspreeze.load(run)`` predicts from the record
alone, and what steps the env needs the object passed again (``jaxspreeze.load(run,
env=obj)``, ``jaxspreeze.train(cfg, env=obj, resume=run)``). A :class:`JaxEnv`'s
functions are recorded by ``module:qualname`` with what it declares, and rebuilt by
``load(run)`` when an import finds them (:func:`load_record`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.core.types import EnvSpec, kept_obs_dtype
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "jax"  # the reserved prefix of the JAX envs passed to jaxspreeze.train(cfg, env=...)
RECORD_FILE = "jax_env.json"  # a run directory's record of its JAX env
DEFAULT_MAX_STEPS = EnvSpec.__dataclass_fields__["max_episode_steps"].default
GYMNAX_API = ("reset", "step", "action_space", "observation_space", "default_params")
JUMANJI_API = ("reset", "step", "observation_spec", "action_spec")
LAST = 2  # Jumanji's StepType.LAST


@dataclasses.dataclass(frozen=True)
class Entry:
    """A JAX env under its reserved name: its spec and the functions that step it.

    ``parts``: None for an env known only by the record of a run directory (nothing to
    step). ``cls``: the object's class, ``module:qualname`` (a :class:`JaxEnv`'s: its
    functions', ``module:reset_qualname module:step_qualname``); ``importable``: whether
    an import finds them again (not ones of ``__main__`` or a function's locals).
    ``functions``: a :class:`JaxEnv`'s record (:meth:`JaxEnv.record`), else None.
    """

    name: str
    spec: EnvSpec
    parts: EnvParts | None
    kind: str  # "gymnax", "jumanji" or "functions"
    cls: str
    importable: bool
    functions: dict | None = None
    why: str = ""  # why a recorded env cannot step here (its functions not importable, ...)


_ENVS: dict[str, Entry] = {}


def is_jax_env(name: str) -> bool:
    """Whether ``name`` is a JAX env passed to ``jaxspreeze.train(cfg, env=...)``."""
    return name.partition("/")[0] == PREFIX


def takes(env: Any) -> bool:
    """Whether ``train(cfg, env=env)`` hands ``env`` to this module rather than to the host
    envs: anything but a gymnasium env (or vector env) and a factory (a callable without
    ``reset`` and ``step``)."""
    if any(c.__module__.partition(".")[0] == "gymnasium" for c in type(env).__mro__):
        return False
    return not (callable(env) and not (hasattr(env, "reset") and hasattr(env, "step")))


def _not_here(name: str, why: str = "") -> str:
    because = f" ({why})" if why else ""
    return (
        f"{name} is a JAX env passed from Python (jaxspreeze.train(cfg, env=...)), "
        f"which this process does not have{because}: pass it again from Python "
        "(jaxspreeze.train(cfg, env=obj, resume=RUN_DIR) to resume; "
        "jaxspreeze.load(RUN_DIR, env=obj) to evaluate)"
    )


def entry(name: str) -> Entry:
    """The registered JAX env ``name``; UnknownEnvError (saying to pass it again) if none."""
    found = _ENVS.get(name)
    if found is None:
        raise UnknownEnvError(_not_here(name))
    return found


def make(name: str) -> EnvParts:
    """The spec and per-env functions of the registered JAX env ``name``."""
    found = entry(name)
    if found.parts is None:
        raise UnknownEnvError(_not_here(name, found.why))
    return found.parts


# --- registering --------------------------------------------------------------------------


def register(env: Any) -> Entry:
    """Enter a JAX env under ``jax/<ClassName>`` (a :class:`JaxEnv`: ``jax/<name>``); its
    :class:`Entry`.

    ``env``: a gymnax-style object, ``(object, params)``, a Jumanji-style object or a
    :class:`JaxEnv` (a pair of pure functions) (the module's docstring). Anything else, or
    an env whose reset or step fails on the shapes it declares, is a ConfigError naming
    ``env``. A later registration under the same name replaces the earlier one.
    """
    if isinstance(env, JaxEnv):
        return _enter(functions_entry(env))
    if isinstance(env, tuple) and len(env) == 2 and all(_is_function(f) for f in env):
        raise ConfigError(
            "env",
            "a (reset, step) pair needs its actions: pass "
            "jaxspreeze.envs.jaxenv.JaxEnv(reset, step, actions=N) for N discrete actions, "
            "or JaxEnv(reset, step, action_bounds=(low, high)) for continuous ones",
        )
    obj, params = env if isinstance(env, tuple) and len(env) == 2 else (env, None)
    if isinstance(env, tuple) and len(env) != 2:
        raise ConfigError("env", f"expected (env, params); got a tuple of {len(env)}")
    name = f"{PREFIX}/{type(obj).__name__}"
    if all(hasattr(obj, a) for a in JUMANJI_API) and not hasattr(obj, "action_space"):
        kind, parts = "jumanji", jumanji_parts(obj, name)
    else:
        missing = [a for a in GYMNAX_API if not hasattr(obj, a)]
        if params is not None and "default_params" in missing:
            missing.remove("default_params")
        if missing:
            raise ConfigError(
                "env",
                "expected a gymnasium env (or a factory) or a JAX env: a gymnax-style object "
                f"({', '.join(GYMNAX_API)}), (env, params) or a Jumanji-style object "
                f"({', '.join(JUMANJI_API)}); got {type(obj).__name__}, which has no "
                f"{', '.join(missing)}",
            )
        params = obj.default_params if params is None else params
        kind, parts = "gymnax", _gymnax_parts(obj, params, name)
    cls = type(obj)
    return _enter(Entry(name, parts.spec, parts, kind, _qualified(cls), _importable(cls)))


def _enter(found: Entry) -> Entry:
    _ENVS[found.name] = found
    return found


def _is_function(f: Any) -> bool:
    """A plain callable (a function, a jitted one), not an env object."""
    return callable(f) and not (hasattr(f, "reset") and hasattr(f, "step"))


def _qualified(obj: Any) -> str:
    """``module:qualname`` of a class or function (a callable object: its class's name)."""
    module = getattr(obj, "__module__", None) or "?"
    return f"{module}:{getattr(obj, '__qualname__', None) or type(obj).__qualname__}"


def _importable(obj: Any) -> bool:
    """Whether ``module:qualname`` of the class or function ``obj`` finds it again by import."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if module in (None, "__main__") or "<" in qualname:  # <locals>, <lambda>
        return False
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is obj


def _line(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _called(name: str, what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; a failure is a ConfigError naming ``env`` and ``what``."""
    try:
        return fn(*args)
    except Exception as e:  # whatever the user's code raises
        raise ConfigError("env", f"{name}: {what} failed: {_line(e)}") from None


def _traced(name: str, what: str, fn: Any, *args: Any) -> Any:
    """``jax.eval_shape(fn, *args)``; a failure is a ConfigError naming ``env`` and ``what``."""
    try:
        return jax.eval_shape(fn, *args)
    except Exception as e:  # whatever the user's code raises
        raise ConfigError("env", f"{name}: {what} failed: {_line(e)}") from None


def _one_array(name: str, obs: Any) -> tuple[int, ...]:
    """The shape of an observation that is one array; ConfigError otherwise."""
    if not isinstance(obs, jax.ShapeDtypeStruct):
        raise ConfigError(
            "env",
            f"{name} observes a {type(obs).__name__}: jaxspreeze takes one array per "
            "observation (a Box); flatten or concatenate it in the env",
        )
    return tuple(obs.shape)


def _action_spec(name: str, space: Any, what: str) -> tuple[bool, int, tuple, tuple, tuple]:
    """(discrete, action_dim, low, high, shape) of a Box or Discrete action space (gymnax's
    ``n`` / ``low``, ``high``, ``shape``; Jumanji's ``num_values`` / ``minimum``,
    ``maximum``, ``shape``); ConfigError for any other."""
    n = getattr(space, "n", getattr(space, "num_values", None))
    low = getattr(space, "low", getattr(space, "minimum", None))
    high = getattr(space, "high", getattr(space, "maximum", None))
    shape = getattr(space, "shape", None)
    if n is not None and np.ndim(n) == 0:  # (Jumanji's DiscreteArray has bounds too)
        return True, int(n), (), (), ()
    if n is None and low is not None and high is not None and shape is not None:
        shape = tuple(shape)
        if len(shape) <= 1:
            size = (int(shape[0]) if shape else 1,)
            lo = np.broadcast_to(np.asarray(low, np.float32), size)
            hi = np.broadcast_to(np.asarray(high, np.float32), size)
            if np.isfinite(lo).all() and np.isfinite(hi).all():
                return False, size[0], tuple(map(float, lo)), tuple(map(float, hi)), shape
            why = "unbounded"
        else:
            why = f"of shape {shape}"
        raise ConfigError(
            "env",
            f"{name}: its {what} is a Box {why}; a Box of shape (d,) with finite bounds "
            "or a Discrete is taken",
        )
    raise ConfigError(
        "env",
        f"{name}: its {what} is a {type(space).__name__}; a Box of shape (d,) or a "
        "Discrete is taken",
    )


def _example_action(discrete: bool, dim: int, shape: tuple) -> jax.ShapeDtypeStruct:
    """The shape of one action as the env takes it (a scalar Box's is ``()``)."""
    if discrete:
        return jax.ShapeDtypeStruct((), jnp.int32)
    return jax.ShapeDtypeStruct(shape if shape == () else (dim,), jnp.float32)


def _spec(name: str, obs_shape: tuple, action: tuple, max_steps: int) -> EnvSpec:
    discrete, dim, low, high, _ = action
    return EnvSpec(name, obs_shape, discrete, dim, low, high, max_steps)


# --- gymnax-style -------------------------------------------------------------------------


def _gymnax_parts(obj: Any, params: Any, name: str) -> EnvParts:
    """The :class:`EnvParts` of a gymnax-style object (see the module's docstring)."""
    obs_space = _called(name, "observation_space(params)", obj.observation_space, params)
    if not all(hasattr(obs_space, a) for a in ("low", "high", "shape")):
        raise ConfigError(
            "env", f"{name}: its observation space is a {type(obs_space).__name__}; a Box is taken"
        )
    space = _called(name, "action_space(params)", obj.action_space, params)
    action = _action_spec(name, space, "action space")
    key = jax.random.key(0)
    obs, state = _traced(name, "reset(key, params)", lambda k: obj.reset(k, params), key)
    max_steps = int(getattr(params, "max_steps_in_episode", DEFAULT_MAX_STEPS))
    _one_array(name, obs)
    flat, fields = flattened(name, obs, action[0], action[1], (action[1],))
    spec = dataclasses.replace(_spec(name, flat.shape, action, max_steps), **fields)
    act = _example_action(*action[:2], action[4])
    out = _traced(
        name,
        f"step(key, state, {act.dtype}{list(act.shape)} action, params)",
        lambda k, s, a: obj.step(k, s, a, params),
        key,
        state,
        act,
    )
    info = out[-1] if isinstance(out, tuple) and len(out) in (5, 6) else None
    if not isinstance(info, dict):
        raise ConfigError(
            "env",
            f"{name}: step returned {_outputs(out)}; expected (obs, state, reward, "
            "terminated, truncated, info) or (obs, state, reward, done, info)",
        )
    hooks = all(callable(getattr(type(obj), h, None)) for h in ("step_env", "reset_env"))
    if "final_observation" not in info and not (len(out) == 5 and hooks):
        raise ConfigError(
            "env",
            f"{name}: its step resets by itself but reports no info['final_observation'] "
            "(the observation an episode ended on, to bootstrap from); add it, or subclass "
            "gymnax.environments.environment.Environment (write step_env and reset_env)",
        )
    shape = action[4]

    def reset_one(key: jax.Array) -> tuple[jax.Array, Any]:
        obs, state = obj.reset(key, params)
        return (flat(obs), state) if len(out) == 6 else (flat(obs), (state, jnp.int32(0)))

    def as_taken(a: jax.Array) -> jax.Array:
        return a.reshape(shape) if not spec.discrete and shape == () else a

    if len(out) == 6:

        def step_one(key, state, action):
            obs, state, reward, terminated, truncated, info = obj.step(
                key, state, as_taken(action), params
            )
            return flat(obs), state, reward, terminated, truncated, flat(info["final_observation"])

    else:
        step_one = _classic_step(
            obj, params, max_steps, "final_observation" in info, as_taken, flat
        )
    return EnvParts(spec, reset_one, jax.vmap(step_one), obj)


def _outputs(out: Any) -> str:
    return f"{len(out)} values" if isinstance(out, tuple) else f"a {type(out).__name__}"


def _classic_step(
    obj: Any, params: Any, max_steps: int, reported: bool, as_taken: Any, flat: Flattened
) -> Any:
    """The per-env step of a classic gymnax env (``(obs, state, reward, done, info)``): its
    state carries the episode's step count, for the time limit. ``reported``: its info has
    the final observation; else ``step_env``/``reset_env`` are stepped as gymnax's own
    step does, keeping it."""

    def step_one(key, inner, action):
        state, steps = inner
        action = as_taken(action)
        if reported:
            obs, state, reward, done, info = obj.step(key, state, action, params)
            final = info["final_observation"]
        else:  # gymnax's classic step: the first key steps, the second resets
            k_step, k_reset = jax.random.split(key)
            final, after, reward, done, info = obj.step_env(k_step, state, action, params)
            obs_re, state_re = obj.reset_env(k_reset, params)
            done = jnp.asarray(done, bool)
            state = jax.tree.map(lambda x, y: jnp.where(done, x, y), state_re, after)
            obs = jax.tree.map(lambda x, y: jnp.where(done, x, y), obs_re, final)
        done = jnp.asarray(done, bool)
        steps = steps + 1
        truncated = info["truncated"] if "truncated" in info else done & (steps >= max_steps)
        truncated = jnp.asarray(truncated, bool)
        terminated = info["terminated"] if "terminated" in info else done & ~truncated
        inner = (state, jnp.where(done, 0, steps))
        return flat(obs), inner, reward, terminated, truncated, flat(final)

    return step_one


# --- Jumanji-style ------------------------------------------------------------------------

MASK_KEY = "action_mask"  # the field of a structured observation that holds the legal actions
MAX_JOINT = 1 << 16  # the most joint actions a multi-discrete action space is taken as


def _read_spec(obj: Any, attr: str) -> Any:
    spec = getattr(obj, attr)
    return spec() if callable(spec) and not hasattr(spec, "shape") else spec


@dataclasses.dataclass(frozen=True)
class Flattened:
    """How an env's observation becomes the one array jaxspreeze keeps (``__call__``).

    One array: kept one-byte as it is, else float32 (:func:`~jaxspreeze.core.types.kept_obs_dtype`). A structure (a
    NamedTuple, dataclass or dict of arrays, as Jumanji observes): its leaves flattened to
    float32 and concatenated in the structure's order, the legal-action mask (the leaf
    named :data:`MASK_KEY`, 1 legal) last; ``mask``: that leaf's index, None for none.
    """

    shape: tuple[int, ...]
    dtype: str
    structured: bool
    mask: int | None = None

    def __call__(self, obs: Any) -> jax.Array:
        if not self.structured:
            return jnp.asarray(obs).astype(self.dtype)
        leaves = jax.tree.leaves(obs)
        order = [x for i, x in enumerate(leaves) if i != self.mask]
        order += [] if self.mask is None else [leaves[self.mask]]
        return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in order])


def _key_name(key: Any) -> Any:
    """The name of a pytree path's entry (a field's or a dict key's), or None."""
    return getattr(key, "name", getattr(key, "key", None))


def flattened(
    name: str, obs: Any, discrete: bool, dim: int, joint: tuple
) -> tuple[Flattened, dict]:
    """``(how to flatten, the spec's fields it sets)`` of an observation ``obs`` (as
    ``jax.eval_shape`` gives it) for ``dim`` actions (``joint``: the shape of a joint
    multi-discrete action's mask, else ``(dim,)``). A mask sets ``action_mask`` and the
    ``actor_obs`` / ``critic_obs`` columns that leave it out; a mask of another size than
    the actions, or on continuous actions, is a ConfigError naming ``env``."""
    if isinstance(obs, jax.ShapeDtypeStruct):
        keep = kept_obs_dtype(obs.dtype)  # one-byte kept, else float32: every family's rule
        return Flattened(tuple(obs.shape), keep, False), {"obs_dtype": keep}
    paths = jax.tree_util.tree_flatten_with_path(obs)[0]
    if not paths or not all(isinstance(x, jax.ShapeDtypeStruct) for _, x in paths):
        raise ConfigError(
            "env",
            f"{name} observes a {type(obs).__name__}: one array or a structure of arrays "
            "(a NamedTuple, dataclass or dict) is taken",
        )
    total = sum(int(np.prod(x.shape)) for _, x in paths)
    masks = [i for i, (path, _) in enumerate(paths) if path and _key_name(path[-1]) == MASK_KEY]
    if not masks:
        return Flattened((total,), "float32", True), {}
    if len(masks) > 1:
        found = ", ".join(jax.tree_util.keystr(paths[i][0]) for i in masks)
        raise ConfigError(
            "env", f"{name}: its observation has several {MASK_KEY}s ({found}); one is taken"
        )
    shape = tuple(paths[masks[0]][1].shape)
    if not discrete or shape not in ((dim,), joint):
        what = f"the {dim} actions, shape {joint}" if discrete else "discrete actions"
        raise ConfigError(
            "env",
            f"{name}: its observation's {MASK_KEY} has shape {shape}; a mask of {what} is "
            f"taken (rename the field to train without it)",
        )
    columns = (0, total - dim)
    spec = {"actor_obs": columns, "critic_obs": columns, "action_mask": True}
    return Flattened((total,), "float32", True, masks[0]), spec


def _jumanji_action(name: str, space: Any) -> tuple[tuple, Any, tuple]:
    """``(the action's spec tuple as _action_spec gives it, env action of an action,
    the joint shape)`` of a Jumanji action spec: a multi-discrete one (``num_values`` of
    shape ``(k,)``) is one discrete action over their product (unravelled, C order); an
    integer one without ``num_values`` is a ConfigError."""
    n = getattr(space, "num_values", None)
    if n is not None and np.ndim(n) == 1:
        sizes = tuple(int(v) for v in np.asarray(n))
        total = int(np.prod(sizes))
        if total > MAX_JOINT:
            raise ConfigError(
                "env",
                f"{name}: its action_spec is a multi-discrete {list(sizes)}: {total} joint "
                f"actions, more than the {MAX_JOINT} taken",
            )
        to_env = lambda a: jnp.stack(jnp.unravel_index(a, sizes)).astype(jnp.int32)
        return (True, total, (), (), ()), to_env, sizes
    dtype = getattr(space, "dtype", None)
    if n is None and dtype is not None and jnp.issubdtype(jnp.dtype(dtype), jnp.integer):
        raise ConfigError(
            "env",
            f"{name}: its action_spec is integers of shape {tuple(space.shape)} without "
            "num_values (one action per agent?); a DiscreteArray, a MultiDiscreteArray or "
            "a float BoundedArray is taken",
        )
    action = _action_spec(name, space, "action_spec")
    shape = action[4]
    to_env = (lambda a: a.reshape(shape)) if not action[0] and shape == () else (lambda a: a)
    return action, to_env, (action[1],)


def jumanji_parts(obj: Any, name: str) -> EnvParts:
    """The :class:`EnvParts` of a Jumanji-style object, reset by :func:`auto_reset`
    (the ``jumanji/`` family's envs and a user's object)."""
    act_spec = _called(name, "action_spec", _read_spec, obj, "action_spec")
    action, to_env, joint = _jumanji_action(name, act_spec)
    max_steps = int(getattr(obj, "time_limit", None) or DEFAULT_MAX_STEPS)
    key = jax.random.key(0)
    _, first = _traced(name, "reset(key)", obj.reset, key)
    if not hasattr(first, "observation"):
        raise ConfigError(
            "env",
            f"{name}: reset(key) returned no timestep with an observation (Jumanji's TimeStep)",
        )
    flat, fields = flattened(name, first.observation, action[0], action[1], joint)

    def reset(key):
        state, timestep = obj.reset(key)
        return flat(timestep.observation), state

    def step(state, a):
        state, ts = obj.step(state, to_env(a))
        last = ts.last() if hasattr(ts, "last") else jnp.asarray(ts.step_type) == LAST
        ends = jnp.asarray(ts.discount) == 0
        return flat(ts.observation), state, ts.reward, last & ends, last & ~ends

    obs, state = _traced(name, "reset(key)", reset, key)
    spec = dataclasses.replace(_spec(name, flat.shape, action, max_steps), **fields)
    act = jax.ShapeDtypeStruct(spec.action_shape, jnp.int32 if spec.discrete else jnp.float32)
    out = _traced(name, "step(state, action)", step, state, act)
    if (out[0].shape, out[0].dtype) != (obs.shape, obs.dtype):
        raise ConfigError(
            "env",
            f"{name}: step observes {out[0].dtype}{list(out[0].shape)}, reset "
            f"{obs.dtype}{list(obs.shape)}",
        )
    made = auto_reset(reset, step, max_steps)
    return EnvParts(spec, made.reset_one, made.step_batch, obj, made.step_batch_no_reset)


# --- a pair of pure functions -------------------------------------------------------------

NAME_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclasses.dataclass(frozen=True)
class JaxEnv:
    """Your own JAX env as two pure functions: ``train(cfg, env=JaxEnv(reset, step, actions=4))``.

    - ``reset(key) -> (obs, state)``;
    - ``step(key, state, action)`` (gymnax's functional shape) or ``step(state, action)``
      (read from its signature), returning ``(obs, state, reward, done)``, ``(obs, state,
      reward, done, info)`` or ``(obs, state, reward, terminated, truncated[, info])``.

    ``step`` is the transition alone: jaxspreeze resets the env when an episode ends
    (``done``/``terminated``: a termination) or runs ``max_steps`` steps (a truncation), from
    initial states ``reset`` drew ahead, keeping the final observation for bootstrapping
    (:func:`~jaxspreeze.envs.base.auto_reset`). A ``step`` with a key gets a fresh one on
    every call (split from a key drawn at the reset, carried beside the state); ``info``
    is not read. ``state`` is any pytree of arrays, the same structure, shapes and dtypes
    after a step as after a reset. The observation is one array (one-byte kept as it
    is, else float32) or a structure of arrays (flattened, an ``action_mask`` leaf last:
    the legal actions).

    The actions are declared: ``actions=N`` (discrete, ``action`` an int32 scalar in
    ``[0, N)``) or ``action_bounds=(low, high)`` (continuous, ``action`` float32 ``[d]``;
    scalars for ``d = 1``). The observation's shape is read from one traced call of
    ``reset``; ``obs_shape``, if given, is checked against it. ``name``: the env trains as
    ``jax/<name>`` (default: ``step``'s name less ``step``, e.g. ``corridor_step`` gives
    ``jax/corridor``, else its module's). Anything that does not fit is one ConfigError
    naming ``env`` before anything compiles.

    A run directory records the functions by ``module:qualname``: functions an import
    finds (defined in a module, not in ``__main__``, a notebook or a function) are rebuilt
    from it by ``jaxspreeze.load(run)``; others are passed again (``load(run, env=...)``).
    """

    reset: Callable[..., Any]
    step: Callable[..., Any]
    actions: int | None = None
    action_bounds: tuple[Any, Any] | None = None
    obs_shape: tuple[int, ...] | None = None
    max_steps: int | None = None
    name: str | None = None

    def env_name(self) -> str:
        """The name it trains under, ``jax/<name>``."""
        if self.name is not None:
            return f"{PREFIX}/{self.name}"
        stem = getattr(self.step, "__name__", "").replace("step", "").strip("_")
        module = getattr(self.step, "__module__", None) or "__main__"
        if not stem or not NAME_CHARS.fullmatch(stem):
            stem = "env" if module == "__main__" else module.rpartition(".")[2]
        return f"{PREFIX}/{stem}"

    def record(self) -> dict[str, Any]:
        """What rebuilds it (:func:`rebuilt`): the functions' ``module:qualname``, the rest."""
        return {
            "reset": _qualified(self.reset),
            "step": _qualified(self.step),
            "actions": self.actions,
            "action_bounds": None if self.action_bounds is None else _bounds(self)[:2],
            "obs_shape": None if self.obs_shape is None else list(self.obs_shape),
            "max_steps": self.max_steps,
            "name": self.env_name().partition("/")[2],  # the one it trained under
        }


def _bounds(env: JaxEnv) -> tuple[list[float], list[float], int]:
    """``(low, high, d)`` of ``env.action_bounds``; ConfigError naming ``env`` for bad ones."""
    try:
        low, high = env.action_bounds  # type: ignore[misc]
        lo = np.asarray(low, np.float64)
        hi = np.asarray(high, np.float64)
    except (TypeError, ValueError):
        raise ConfigError(
            "env", f"action_bounds={env.action_bounds!r}: expected (low, high), floats or [d] each"
        ) from None
    d = max(lo.size, hi.size)
    if lo.ndim > 1 or hi.ndim > 1 or lo.size not in (1, d) or hi.size not in (1, d) or d == 0:
        raise ConfigError(
            "env",
            f"action_bounds of shapes {lo.shape} and {hi.shape}: low and high are floats or "
            "[d] each, of one size",
        )
    lo, hi = np.broadcast_to(lo.reshape(-1), (d,)), np.broadcast_to(hi.reshape(-1), (d,))
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
        raise ConfigError(
            "env", f"action_bounds=({lo.tolist()}, {hi.tolist()}): finite, with low < high"
        )
    return [float(x) for x in lo], [float(x) for x in hi], d


def _declared_action(name: str, env: JaxEnv) -> tuple[bool, int, tuple, tuple, tuple]:
    """The action's spec tuple (as :func:`_action_spec` gives it) of a :class:`JaxEnv`."""
    if env.actions is not None and env.action_bounds is not None:
        raise ConfigError(
            "env", f"{name}: give actions (discrete) or action_bounds (continuous), not both"
        )
    if env.actions is not None:
        n = env.actions
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ConfigError("env", f"{name}: actions={n!r}; the number of actions, an int >= 1")
        return True, int(n), (), (), ()
    if env.action_bounds is not None:
        low, high, d = _bounds(env)
        return False, d, tuple(low), tuple(high), (d,)
    raise ConfigError(
        "env",
        f"{name}: its actions are not declared: JaxEnv(reset, step, actions=N) for N discrete "
        "actions, or JaxEnv(reset, step, action_bounds=(low, high)) for continuous ones",
    )


def _takes_key(name: str, step: Any) -> bool:
    """Whether ``step`` is ``step(key, state, action)`` (else ``step(state, action)``)."""
    try:
        params = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):
        params = None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if params is not None and not any(p.kind == p.VAR_POSITIONAL for p in params):
        required = [p for p in params if p.default is p.empty and p.kind != p.VAR_KEYWORD]
        if len(required) in (2, 3) and all(p.kind in kinds for p in required):
            return len(required) == 3
    shown = "?" if params is None else f"({', '.join(str(p) for p in params)})"
    raise ConfigError(
        "env",
        f"{name}: step{shown} takes (key, state, action) or (state, action); "
        "wrap it, e.g. lambda key, state, action: ...",
    )


def _split_outputs(out: Any) -> tuple[Any, Any, Any, Any, Any] | None:
    """``(obs, state, reward, terminated, truncated or None)`` of a step's outputs, or None."""
    if not isinstance(out, tuple) or len(out) not in (4, 5, 6):
        return None
    obs, state, reward, done, *rest = out
    if len(out) == 4 or (len(out) == 5 and isinstance(rest[0], dict)):
        return obs, state, reward, done, None
    return obs, state, reward, done, rest[0]


def _leaf_difference(a: Any, b: Any) -> str | None:
    """Where two pytrees of shapes first differ (structure, a leaf's shape or dtype), or None."""
    if jax.tree.structure(a) != jax.tree.structure(b):
        return f"its structure ({jax.tree.structure(b)} after reset, {jax.tree.structure(a)} after step)"
    for (path, x), y in zip(
        jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b), strict=True
    ):
        if (x.shape, x.dtype) != (y.shape, y.dtype):
            where = jax.tree_util.keystr(path) or "the state"
            return f"{where}: {y.dtype}{list(y.shape)} after reset, {x.dtype}{list(x.shape)} after step"
    return None


def _raw_key(key: jax.Array) -> jax.Array:
    """The key as its ``uint32`` data (carried in a state :func:`auto_reset` selects)."""
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key


def _strong(tree: Any) -> Any:
    """``tree`` with no weak-typed leaf (the state a program takes is the one it returns)."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree)


def functions_entry(env: JaxEnv) -> Entry:
    """The :class:`Entry` of a :class:`JaxEnv` (checked as its docstring says)."""
    name = env.env_name()
    if not NAME_CHARS.fullmatch(name.partition("/")[2]):
        raise ConfigError("env", f"name={env.name!r}: letters, digits, '_', '.' and '-' are taken")
    for what, f in (("reset", env.reset), ("step", env.step)):
        if not callable(f):
            raise ConfigError("env", f"{name}: {what} is a {type(f).__name__}, not a function")
    action = _declared_action(name, env)
    keyed = _takes_key(name, env.step)
    max_steps = DEFAULT_MAX_STEPS if env.max_steps is None else env.max_steps
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ConfigError("env", f"{name}: max_steps={max_steps!r}; an int >= 1")
    key = jax.random.key(0)
    first = _traced(name, "reset(key)", env.reset, key)
    if not (isinstance(first, tuple) and len(first) == 2):
        raise ConfigError(
            "env", f"{name}: reset(key) returned {_outputs(first)}; expected (obs, state)"
        )
    discrete, dim = action[0], action[1]
    flat, fields = flattened(name, first[0], discrete, dim, (dim,))
    if env.obs_shape is not None and tuple(env.obs_shape) != flat.shape:
        raise ConfigError(
            "env",
            f"{name}: reset observes {flat.dtype}{list(flat.shape)}, not the "
            f"obs_shape={tuple(env.obs_shape)} given",
        )
    to_env = (lambda a: a.astype(jnp.int32)) if discrete else (lambda a: a.astype(jnp.float32))

    def reset(key):
        if not keyed:
            obs, state = env.reset(key)
            return flat(obs), _strong(state)
        k_reset, k_steps = jax.random.split(key)
        obs, state = env.reset(k_reset)
        return flat(obs), _strong((state, _raw_key(k_steps)))

    def step(carried, a):
        if keyed:
            state, k = carried
            k, k_step = jax.random.split(k)
            out = env.step(jax.random.wrap_key_data(k_step), state, to_env(a))
        else:
            out = env.step(carried, to_env(a))
        obs, state, reward, terminated, truncated = _split_outputs(out)  # type: ignore[misc]
        state = _strong((state, k) if keyed else state)
        reward, terminated = jnp.asarray(reward, jnp.float32), jnp.asarray(terminated, bool)
        if truncated is None:
            return flat(obs), state, reward, terminated
        return flat(obs), state, reward, terminated, jnp.asarray(truncated, bool)

    signature = "step(key, state, action)" if keyed else "step(state, action)"
    spec = dataclasses.replace(_spec(name, flat.shape, action, int(max_steps)), **fields)
    act = jax.ShapeDtypeStruct(spec.action_shape, jnp.int32 if discrete else jnp.float32)
    obs0, state0 = _traced(name, "reset(key)", reset, key)
    user_state = state0[0] if keyed else state0
    raw = _traced(
        name,
        signature,
        lambda s, a: env.step(*((key,) if keyed else ()), s, to_env(a)),
        user_state,
        act,
    )
    parts = _split_outputs(raw)
    if parts is None:
        raise ConfigError(
            "env",
            f"{name}: {signature} returned {_outputs(raw)}; expected (obs, state, reward, done"
            "[, info]) or (obs, state, reward, terminated, truncated[, info])",
        )
    out = _traced(name, signature, step, state0, act)
    for what, x in (("reward", parts[2]), ("done", parts[3]), ("truncated", parts[4])):
        if x is not None and tuple(getattr(x, "shape", ())) != ():
            raise ConfigError(
                "env",
                f"{name}: {signature} returns a {what} of shape {tuple(x.shape)}; one "
                "scalar per step is taken (the env is vmapped)",
            )
    if (out[0].shape, out[0].dtype) != (obs0.shape, obs0.dtype):
        raise ConfigError(
            "env",
            f"{name}: step observes {out[0].dtype}{list(out[0].shape)}, reset "
            f"{obs0.dtype}{list(obs0.shape)}",
        )
    differs = _leaf_difference(out[1], state0)
    if differs is not None:
        raise ConfigError("env", f"{name}: the state step returns differs from reset's: {differs}")
    made = auto_reset(reset, step, int(max_steps))
    made_parts = EnvParts(spec, made.reset_one, made.step_batch, env, made.step_batch_no_reset)
    functions = f"{_qualified(env.reset)} {_qualified(env.step)}"
    importable = _importable(env.reset) and _importable(env.step)
    return Entry(name, spec, made_parts, "functions", functions, importable, env.record())


def rebuilt(record: dict[str, Any]) -> JaxEnv:
    """The :class:`JaxEnv` a run directory's record names (its functions imported);
    ImportError or AttributeError when an import does not find them."""
    fns = []
    for where in (record["reset"], record["step"]):
        module, _, qualname = where.partition(":")
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        fns.append(found)
    bounds = record.get("action_bounds")
    shape = record.get("obs_shape")
    return JaxEnv(
        fns[0],
        fns[1],
        actions=record.get("actions"),
        action_bounds=None if bounds is None else (bounds[0], bounds[1]),
        obs_shape=None if shape is None else tuple(shape),
        max_steps=record.get("max_steps"),
        name=record.get("name"),
    )


# --- a run directory's record -------------------------------------------------------------


def save_record(run_dir: str | Path, name: str) -> Path:
    """Record the JAX env ``name`` in ``run_dir`` (:data:`RECORD_FILE`), atomically."""
    found = entry(name)
    if found.functions is not None:  # a JaxEnv: its functions, rebuilt by import
        how = {
            "source": "a pair of pure functions passed from Python: "
            "jaxspreeze.train(cfg, env=JaxEnv(reset, step, ...))",
            "kind": found.kind,
            "functions": found.functions,
            "importable": found.importable,
            "rebuild": "jaxspreeze.load(RUN_DIR) imports the functions by module:qualname"
            if found.importable
            else "not from this record (the functions are not importable: defined in "
            "__main__, a notebook or a function): pass them again, "
            "jaxspreeze.load(RUN_DIR, env=JaxEnv(...))",
        }
    else:
        how = {
            "source": "a JAX env object passed from Python: jaxspreeze.train(cfg, env=...)",
            "kind": found.kind,
            "class": found.cls,
            "importable": found.importable,
            "rebuild": "not from this record (its constructor's arguments and params are not "
            "kept): pass the object again, jaxspreeze.load(RUN_DIR, env=obj) or "
            "jaxspreeze.train(cfg, env=obj, resume=RUN_DIR)",
        }
    record = {"name": found.name, **how, "spec": dataclasses.asdict(found.spec)}
    path = Path(run_dir) / RECORD_FILE
    tmp = path.with_name(f".{RECORD_FILE}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load_record(run_dir: str | Path, steppable: bool = False) -> Entry | None:
    """The JAX env a run directory recorded; None when the run's env is not a JAX env
    (``steppable``: nor one that can step, so that what needs it asks for it again).

    The env this process has under its name already, if it can step; else a
    :class:`JaxEnv` whose functions an import finds, rebuilt from the record (when it gives
    the spec the run trained on); else the record's spec alone (``predict`` works; what
    steps the env raises, saying why and to pass it again).
    """
    path = Path(run_dir) / RECORD_FILE
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    known = _ENVS.get(record["name"])
    if known is not None and known.parts is not None:
        return known
    spec = EnvSpec.from_record(record["spec"])
    if spec.action_mask:  # the columns that leave the mask out (no keys: the env's own)
        columns = {k: tuple(record["spec"][k]) for k in ("actor_obs", "critic_obs")}
        spec = dataclasses.replace(spec, **columns)
    functions = record.get("functions")
    why = ""
    if functions is not None and record["importable"]:
        try:
            found = functions_entry(rebuilt(functions))
        except (ImportError, AttributeError, ConfigError) as e:
            why = f"its functions, rebuilt from the record, failed ({_line(e)})"
        else:
            if found.spec == spec:
                return _enter(found)
            why = f"its functions, rebuilt from the record, now give another spec ({_spec_change(spec, found.spec)})"
    elif functions is not None:
        why = "its functions are not importable (defined in __main__, a notebook or a function)"
    if steppable:
        return None
    cls = record.get("class") or " ".join((functions or {}).get(k, "") for k in ("reset", "step"))
    return _enter(
        Entry(record["name"], spec, None, record["kind"], cls, record["importable"], functions, why)
    )


def _spec_change(was: EnvSpec, now: EnvSpec) -> str:
    """The first field two specs differ in, as ``field: was -> now``."""
    for f in dataclasses.fields(EnvSpec):
        a, b = getattr(was, f.name), getattr(now, f.name)
        if a != b:
            return f"{f.name}: {a} in the run, {b} now"
    return "no field"
