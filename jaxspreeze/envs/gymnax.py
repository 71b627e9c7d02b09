"""The gymnax family: ``gymnax/<Name>`` (gymnax resets by itself inside its step).

Observations are float32, except the MinAtar games' 0/1 grids, kept as bool
(:func:`obs_dtype`)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.core.types import EnvSpec
from jaxspreeze.envs.base import EnvParts

PREFIX = "gymnax"
# the envs whose observations are 0/1 grids: gymnax emits them as float32, the adapter
# keeps them as bool (one byte a cell; the networks widen them at their input)
BOOL_OBS_SUFFIX = "-MinAtar"


def obs_dtype(env_name: str) -> str:
    """The dtype ``gymnax/<env_name>``'s observations are kept in: ``bool`` for the MinAtar
    games (0/1 grids), ``float32`` for the others (as gymnax emits them)."""
    return "bool" if env_name.endswith(BOOL_OBS_SUFFIX) else "float32"


class _Deferred(types.ModuleType):
    """A stand-in for a module that imports the real one at its first attribute read."""

    def __getattr__(self, attr: str) -> Any:
        # a deferred submodule read off a deferred parent (``import a.b as c``, ``from a
        # import b``) is the submodule's stand-in, not a reason to import the parent
        child = sys.modules.get(f"{self.__name__}.{attr}")
        if isinstance(child, _Deferred):
            return child
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


@contextlib.contextmanager
def _deferred(name: str) -> Iterator[None]:
    """While open, ``import name`` gives a stand-in that imports the module when first
    used; the stand-in leaves ``sys.modules`` on exit (a later import is the real one).
    A package's stand-in carries its ``__path__``, so that its submodules are found (and
    deferred) without importing it."""
    spec = None if name in sys.modules else importlib.util.find_spec(name)
    if spec is None:  # imported already, or not installed: nothing to defer
        yield
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    if spec.submodule_search_locations is not None:
        stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


# what gymnax's modules import for their renders alone (Pong's colour palette: seaborn,
# and with it scipy.stats; several envs' figures: pyplot and matplotlib's colors, and
# matplotlib itself under them): about 2 s of a gymnax run's start on a 2-core CPU, on
# the path to its first compile. A parent comes before its submodules. jaxspreeze draws
# its own figures without pyplot (and imports matplotlib when it draws).
RENDER_ONLY = ("seaborn", "matplotlib", "matplotlib.pyplot", "matplotlib.colors")


def _gymnax() -> Any:
    """gymnax, imported on first need with :data:`RENDER_ONLY` deferred: each loads when
    a gymnax render first uses it."""
    if "gymnax" not in sys.modules:
        with contextlib.ExitStack() as deferring:
            for name in RENDER_ONLY:
                deferring.enter_context(_deferred(name))
            import gymnax  # noqa: F401
    return sys.modules["gymnax"]


@functools.cache
def names() -> tuple[str, ...]:
    """The task names gymnax registers (without the family prefix)."""
    return tuple(_gymnax().registered_envs)


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` unless gymnax registers ``env_name``."""
    if env_name not in names():
        raise UnknownEnvError(
            f"unknown environment {f'{PREFIX}/{env_name}'!r}; available: "
            + ", ".join(f"{PREFIX}/{n}" for n in names())
        )


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``gymnax/<env_name>``."""
    gymnax = _gymnax()  # only when a gymnax env is built
    from gymnax.environments import spaces

    env, params = gymnax.make(env_name)
    space = env.action_space(params)
    obs_shape = tuple(env.observation_space(params).shape)
    if isinstance(space, spaces.Discrete):
        spec = EnvSpec(f"{PREFIX}/{env_name}", obs_shape, True, int(space.n))
    else:
        shape = tuple(space.shape) or (1,)
        low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape)
        high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape)
        spec = EnvSpec(
            f"{PREFIX}/{env_name}",
            obs_shape,
            False,
            shape[0],
            tuple(float(x) for x in low),
            tuple(float(x) for x in high),
        )
    dtype = obs_dtype(env_name)
    spec = EnvSpec(
        **{
            **spec.__dict__,
            "max_episode_steps": int(params.max_steps_in_episode),
            "obs_dtype": dtype,
        }
    )

    def reset_one(key):
        obs, state = env.reset(key, params)
        return obs.astype(dtype), state

    def step_one(key, state, action):
        # gymnax auto-resets inside its step (with this key) and reports the final obs
        obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
        final_obs = info["final_observation"].astype(dtype)
        return obs.astype(dtype), state, reward, terminated, truncated, final_obs

    return EnvParts(spec, reset_one, jax.vmap(step_one), (env, params))
