"""Your own JAX env on the device: ``jaxspreeze.train(cfg, env=<object>)``, named ``jax/<Class>``.

No registration: the object is entered here, for this process, under the reserved name
``jax/<ClassName>`` (:func:`register`), and from then on it is a device env like
``gymnax/`` ones: vmapped, stepped inside the jitted chunk, reset inside its step, its
final observation kept for bootstrapping. Two kinds of object are taken:

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

Observations are one array (a Box), kept in its own dtype (:attr:`EnvSpec.obs_dtype`;
floats as float32), or, Jumanji-style, a structure of arrays (a NamedTuple, dataclass or
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
env=obj)``, ``jaxspreeze.train(cfg, env=obj, resume=run)``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.core.types import EnvSpec
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "jax"  # the reserved prefix of the JAX envs passed to jaxspreeze.train(cfg, env=...)
RECORD_FILE = "jax_env.json"  # a run directory's record of its JAX env
DEFAULT_MAX_STEPS = EnvSpec.__dataclass_fields__["max_episode_steps"].default
GYMNAX_API = ("reset", "step", "action_space", "observation_space", "default_params")
JUMANJI_API = ("reset", "step", "observation_spec", "action_spec")
LAST = 2  # Jumanji's StepType.LAST


@dataclasses.dataclass(frozen=True)
class JaxEnv:
    """A JAX env under its reserved name: its spec and the functions that step it.

    ``parts``: None for an env known only by the record of a run directory (nothing to
    step). ``cls``: the object's class, ``module:qualname``; ``importable``: whether that
    names a class an import finds (not one of ``__main__`` or a function's locals).
    """

    name: str
    spec: EnvSpec
    parts: EnvParts | None
    kind: str  # "gymnax" or "jumanji"
    cls: str
    importable: bool


_ENVS: dict[str, JaxEnv] = {}


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


def _not_here(name: str) -> str:
    return (
        f"{name} is a JAX env object passed from Python (jaxspreeze.train(cfg, env=...)), "
        "which this process does not have: pass it again from Python "
        "(jaxspreeze.train(cfg, env=obj, resume=RUN_DIR) to resume; "
        "jaxspreeze.load(RUN_DIR, env=obj) to evaluate)"
    )


def entry(name: str) -> JaxEnv:
    """The registered JAX env ``name``; UnknownEnvError (saying to pass it again) if none."""
    found = _ENVS.get(name)
    if found is None:
        raise UnknownEnvError(_not_here(name))
    return found


def make(name: str) -> EnvParts:
    """The spec and per-env functions of the registered JAX env ``name``."""
    found = entry(name)
    if found.parts is None:
        raise UnknownEnvError(_not_here(name))
    return found.parts


# --- registering --------------------------------------------------------------------------


def register(env: Any) -> JaxEnv:
    """Enter a JAX env object under ``jax/<ClassName>``; its :class:`JaxEnv`.

    ``env``: a gymnax-style object, ``(object, params)`` or a Jumanji-style object (the
    module's docstring). Anything else, or an object whose reset or step fails on the
    shapes it declares, is a ConfigError naming ``env``. A later registration under the
    same name replaces the earlier one.
    """
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
    found = JaxEnv(
        name, parts.spec, parts, kind, f"{cls.__module__}:{cls.__qualname__}", _importable(cls)
    )
    _ENVS[name] = found
    return found


def _importable(cls: type) -> bool:
    """Whether ``module:qualname`` of ``cls`` finds it again by import."""
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return False
    found: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is cls


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

    One array: kept as it is (in its own dtype; floats as float32). A structure (a
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
        dtype = jnp.dtype(obs.dtype)
        keep = "float32" if jnp.issubdtype(dtype, jnp.floating) else str(dtype)
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


# --- a run directory's record -------------------------------------------------------------


def save_record(run_dir: str | Path, name: str) -> Path:
    """Record the JAX env ``name`` in ``run_dir`` (:data:`RECORD_FILE`), atomically."""
    found = entry(name)
    record = {
        "name": found.name,
        "source": "a JAX env object passed from Python: jaxspreeze.train(cfg, env=...)",
        "kind": found.kind,
        "class": found.cls,
        "importable": found.importable,
        "rebuild": "not from this record (its constructor's arguments and params are not "
        "kept): pass the object again, jaxspreeze.load(RUN_DIR, env=obj) or "
        "jaxspreeze.train(cfg, env=obj, resume=RUN_DIR)",
        "spec": dataclasses.asdict(found.spec),
    }
    path = Path(run_dir) / RECORD_FILE
    tmp = path.with_name(f".{RECORD_FILE}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load_record(run_dir: str | Path) -> JaxEnv | None:
    """The JAX env a run directory recorded, entered by its spec alone unless this process
    has it with its object already; None when the run's env is not a JAX env."""
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
    found = JaxEnv(
        record["name"], spec, None, record["kind"], record["class"], record["importable"]
    )
    _ENVS[found.name] = found
    return found
