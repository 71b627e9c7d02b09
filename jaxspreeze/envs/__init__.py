"""Vmapped environments on the device, one adapter per family, picked by the name's prefix.

``make_env("gymnax/Pendulum-v1", num_envs)``, ``make_env("brax/reacher", n)``,
``make_env("playground/CartpoleBalance", n)``, and the JAX suites'
``make_env("craftax/Craftax-Classic-Symbolic-v1", n)``, ``make_env("xminigrid/MiniGrid-Empty-8x8", n)``,
``make_env("navix/Navix-Empty-5x5-v0", n)``: every family is driven through the
contract of :mod:`jaxspreeze.envs.base`. A family is one module exposing ``PREFIX``,
``names()``, ``check(env_name)`` and ``make(env_name) -> EnvParts``, registered once in
the family table (:data:`jaxspreeze.core.envids.FAMILIES`, its ``adapter``): :data:`FAMILIES`
here reads that table and imports each adapter when first used. A family whose envs may observe dicts sets
``OBS_KEYS = True`` and takes the keys to read, ``make(env_name, keys: ObsKeys)``
(asymmetric actor-critic, see :func:`check_obs_keys`); the others refuse keys.

Host envs (``gymnasium/<id>``, ``envpool/<task>``, and ``user/<ClassName>``: a gymnasium
env passed to ``jaxspreeze.train(cfg, env=...)``, :mod:`jaxspreeze.host.hostenvs`) step on the
host CPU, through the sampling workers of the host schedule: their names are checked and
their specs built here like the others', but :func:`make_env` gives only a placeholder
(the shapes of the env carry, no device step), see :func:`host_placeholder`.

Your own JAX env (``jax/<ClassName>``: a gymnax-style or Jumanji-style object passed to
``jaxspreeze.train(cfg, env=...)``, :mod:`jaxspreeze.envs.jaxenv`) is a device env of this
process, built from the object registered under its name (never a cached one).
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze.core import envids
from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.core.types import DEFAULT_OBS_KEYS, EnvSpec, ObsKeys
from jaxspreeze.envs import jaxenv
from jaxspreeze.envs.base import (
    REFRESH_EVERY,
    EnvParts,
    EnvState,
    ResetInner,
    StepOut,
    VecEnv,
    auto_reset,
)
from jaxspreeze.host import hostenvs

__all__ = [
    "FAMILIES",
    "REFRESH_EVERY",
    "EnvParts",
    "EnvState",
    "ResetInner",
    "StepOut",
    "VecEnv",
    "auto_reset",
    "available_envs",
    "check_env_name",
    "check_obs_keys",
    "env_ids",
    "env_spec",
    "host_placeholder",
    "is_host_env",
    "load_env_record",
    "make_env",
    "rebuild_env_record",
    "register_env",
]

is_host_env = hostenvs.is_host_env


class _Adapters(Mapping[str, ModuleType]):
    """The device families of the table (:data:`jaxspreeze.core.envids.FAMILIES`), name prefix ->
    adapter module, read at each use (each adapter imports its library lazily)."""

    def __getitem__(self, prefix: str) -> ModuleType:
        entry = envids.family(prefix)
        if entry is None or entry.host:
            raise KeyError(prefix)
        return importlib.import_module(entry.adapter)

    def __contains__(self, prefix: object) -> bool:
        return prefix in envids.device_families()

    def __iter__(self) -> Iterator[str]:
        return iter(envids.device_families())

    def __len__(self) -> int:
        return len(envids.device_families())


# the family registry: name prefix -> adapter module
FAMILIES: Mapping[str, ModuleType] = _Adapters()


def available_envs() -> list[str]:
    """Every name :func:`make_env` accepts on this machine (an optional family's only if
    installed)."""
    out: list[str] = []
    for prefix, family in FAMILIES.items():
        names = family.available() if hasattr(family, "available") else family.names()
        out += [f"{prefix}/{n}" for n in names]
    return out


def env_ids(family: str) -> list[str]:
    """The env ids of one family that load on this machine, ``<family>/<name>``.

    gymnax and brax: every task; Playground: the tasks whose models are present (the
    dm_control suite always); xminigrid: its MiniGrid ids (the XLand ones need a downloaded
    benchmark); gymnasium: every id of its registry (not all of them have the
    Box observation and Box or Discrete action the algorithms take); envpool: every task.
    UnknownEnvError for a family that is not installed (naming its install command) or
    unknown (naming the families).
    """
    if family in hostenvs.FAMILIES:
        return [f"{family}/{n}" for n in hostenvs.env_names(family)]
    module = FAMILIES.get(family)
    if module is None:
        near = difflib.get_close_matches(family, [*FAMILIES, *hostenvs.FAMILIES], n=2)
        hint = f"did you mean {' or '.join(near)}? " if near else ""
        raise UnknownEnvError(
            f"unknown env family {family!r}; {hint}families: "
            + ", ".join((*FAMILIES, *hostenvs.FAMILIES))
        )
    if hasattr(module, "installed") and not module.installed():
        module.check("")  # raises with the install command
    names = module.available() if hasattr(module, "available") else module.names()
    return [f"{family}/{n}" for n in names]


def check_env_name(name: str) -> None:
    """Raise :class:`UnknownEnvError` (saying why, naming near names) for a name that fails."""
    if is_host_env(name):
        hostenvs.check_host_env_name(name)
        return
    if jaxenv.is_jax_env(name):
        jaxenv.entry(name)
        return
    prefix, sep, env_name = name.partition("/")
    family = FAMILIES.get(prefix) if sep else None
    if family is None:
        # no family prefix: suggest the nearest names of the families that load cheaply
        cheap = [p for p in FAMILIES if envids.FAMILIES[p].suggested]
        known = [f"{p}/{n}" for p in cheap for n in FAMILIES[p].names()]
        near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        near += [k for k in known if k.partition("/")[2].lower() == name.lower()]
        hint = f"did you mean {', '.join(dict.fromkeys(near))}? " if near else ""
        raise UnknownEnvError(
            f"unknown environment {name!r}; {hint}names are <family>/<task> with family one "
            f"of {', '.join((*FAMILIES, *hostenvs.FAMILIES))} (e.g. gymnax/Pendulum-v1, brax/ant, "
            "playground/CartpoleBalance)"
        )
    family.check(env_name)


def _takes_keys(name: str) -> bool:
    """Whether the family of the env ``name`` reads dict observations at chosen keys."""
    prefix, sep, _ = name.partition("/")
    family = FAMILIES.get(prefix) if sep and not is_host_env(name) else None
    return bool(getattr(family, "OBS_KEYS", False))


def check_obs_keys(name: str, keys: ObsKeys) -> None:
    """ConfigError naming the field when ``keys`` are given for an env family without dicts.

    Whether the keys exist is checked when the env is built (:func:`env_spec`), since only
    the env knows what it observes.
    """
    if not keys.given or _takes_keys(name):
        return
    field = "actor_obs_key" if keys.actor else "critic_obs_key"
    takes = [p for p, f in FAMILIES.items() if getattr(f, "OBS_KEYS", False)]
    raise ConfigError(
        field,
        f"{name} observes one array: observation keys are chosen only for the dict "
        f"observations of {', '.join(f'{p}/' for p in takes)} tasks; drop "
        f"--{field.replace('_', '-')}",
    )


@functools.cache
def _parts(name: str, keys: ObsKeys = DEFAULT_OBS_KEYS) -> EnvParts:
    check_env_name(name)
    check_obs_keys(name, keys)
    prefix, _, env_name = name.partition("/")
    family = FAMILIES[prefix]
    return family.make(env_name, keys) if keys.given else family.make(env_name)


def env_spec(name: str, keys: ObsKeys = DEFAULT_OBS_KEYS) -> EnvSpec:
    """The :class:`EnvSpec` of a named environment (builds the env once, no jit).

    ``keys`` choose what the actor and the critic observe of a dict observation
    (:class:`~jaxspreeze.core.types.ObsKeys`); ConfigError for keys that do not fit the env.
    A user env's spec (``user/...``) is the one registered now, never a cached one.
    """
    if hostenvs.is_user_env(name):
        check_obs_keys(name, keys)
        return hostenvs.host_env_spec(name)
    if jaxenv.is_jax_env(name):
        check_obs_keys(name, keys)
        return jaxenv.entry(name).spec
    return _env_spec(name, keys)


@functools.cache
def _env_spec(name: str, keys: ObsKeys = DEFAULT_OBS_KEYS) -> EnvSpec:
    if is_host_env(name):
        check_obs_keys(name, keys)
        return hostenvs.host_env_spec(name)
    return _parts(name, keys).spec


def make_env(name: str, num_envs: int, keys: ObsKeys = DEFAULT_OBS_KEYS) -> VecEnv:
    """Build ``num_envs`` vmapped copies of the env ``<family>/<task>``, observed at ``keys``.

    A host env name gives :func:`host_placeholder` (host envs step on the host).
    """
    if is_host_env(name):
        return host_placeholder(env_spec(name, keys), num_envs)
    if jaxenv.is_jax_env(name):
        check_obs_keys(name, keys)
        return VecEnv.from_parts(jaxenv.make(name), num_envs)
    return VecEnv.from_parts(_parts(name, keys), num_envs)


def register_env(env: Any) -> str:
    """Enter your own env object for this process; the name it trains under.

    A gymnax-style or Jumanji-style object, or ``(object, params)``, is a device env,
    ``jax/<ClassName>`` (:func:`jaxspreeze.envs.jaxenv.register`); a gymnasium env, vector
    env or factory is a host env, ``user/<ClassName>``
    (:func:`jaxspreeze.host.hostenvs.register_user_env`). Anything else is a ConfigError
    naming ``env``.
    """
    if jaxenv.takes(env):
        return jaxenv.register(env).name
    return hostenvs.register_user_env(env).name


def load_env_record(run_dir: str | Path) -> None:
    """Enter the env a run directory recorded as passed from Python (a JAX env's or a
    gymnasium env's spec), unless this process has it already."""
    hostenvs.load_user_env(run_dir)
    jaxenv.load_record(run_dir)


def rebuild_env_record(run_dir: str | Path) -> None:
    """Enter the JAX env a run directory recorded if it can be rebuilt to step (functions
    an import finds, :func:`jaxenv.load_record`); otherwise nothing (a resume then asks
    for the env again, naming ``env``)."""
    jaxenv.load_record(run_dir, steppable=True)


def host_placeholder(spec: EnvSpec, num_envs: int) -> VecEnv:
    """The device side of ``num_envs`` host envs: shapes, bounds and random actions only.

    Its reset gives zero observations ``[N, *obs_shape]`` and no library state (so a
    training state, a memory estimate and a checkpoint have the usual layout); stepping it
    raises: host envs are stepped by :mod:`jaxspreeze.host.workers`, never inside a jitted
    rollout.
    """

    def reset_one(key: jax.Array) -> tuple[jax.Array, tuple[()]]:
        del key
        return jnp.zeros(spec.obs_shape, jnp.float32), ()

    def step_batch(keys: jax.Array, inner: tuple[()], action: jax.Array) -> tuple:
        raise TypeError(
            f"{spec.name} is a host env: it steps on the host through the sampling workers "
            "(the host schedule), not inside a jitted rollout"
        )

    return VecEnv(spec, num_envs, reset_one, step_batch)
