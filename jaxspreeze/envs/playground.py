"""The MuJoCo Playground family: ``playground/<Name>`` (pure-JAX MJX, ``impl="jax"``).

Playground's 25 dm_control suite tasks ship their models in the wheel and run offline;
its locomotion and manipulation tasks clone the MuJoCo Menagerie from GitHub when first
loaded, so they are refused (before anything is downloaded) unless the models are there.
Episodes are reset by :func:`~jaxspreeze.envs.base.auto_reset` (freshly drawn initial
states; the final observation kept; termination apart from the time limit), not by
Playground's training wrapper, which drops the final observation.

Dict observations (the locomotion tasks' ``{"state", "privileged_state"}``) are read at
the keys of :class:`~jaxspreeze.core.types.ObsKeys` (asymmetric actor-critic): the actor's,
``state`` by default, and the critic's, the actor's by default. When the two differ the
env's observation is both, flattened and concatenated (the actor's first), and the spec's
``actor_obs`` / ``critic_obs`` columns tell each network which part it reads.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.util
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.core.types import DEFAULT_OBS_KEYS, EnvSpec, ObsKeys
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "playground"
INSTALL = 'pip install "jaxspreeze[playground]"'
OBS_KEY = "state"  # the actor's default key of dict observations (Playground's policy input)
OBS_KEYS = True  # make() takes ObsKeys: the tasks may observe dicts (see envs.check_obs_keys)
CONFIG_OVERRIDES = {"impl": "jax"}  # pure-JAX MJX: runs without warp, on any JAX backend


def installed() -> bool:
    """Whether ``mujoco_playground`` can be imported (without importing it)."""
    return importlib.util.find_spec("mujoco_playground") is not None


def _playground() -> Any:
    """The ``mujoco_playground`` package, or the error that gives its install command."""
    if not installed():
        raise UnknownEnvError(
            f"{PREFIX}/ environments need MuJoCo Playground, which is not installed: {INSTALL}"
        )
    return _import()


@functools.cache
def _import() -> Any:
    # lazy: mujoco_playground is heavy (about 4 s) and optional. Without warp installed,
    # mujoco.mjx prints "Failed to import warp" on stdout; the JAX implementation used here
    # does not need it, so that noise is swallowed.
    with contextlib.redirect_stdout(io.StringIO()):
        import mujoco_playground
    return mujoco_playground


def _suites() -> dict[str, tuple[str, ...]]:
    pg = _playground()
    return {
        "dm_control_suite": tuple(pg.dm_control_suite.ALL_ENVS),
        "locomotion": tuple(pg.locomotion.ALL_ENVS),
        "manipulation": tuple(pg.manipulation.ALL_ENVS),
    }


def names() -> tuple[str, ...]:
    """Every Playground task name (without the prefix); ``()`` when not installed."""
    return tuple(_playground().registry.ALL_ENVS) if installed() else ()


def menagerie_path() -> Path:
    """Where Playground looks for (and would clone) the MuJoCo Menagerie models."""
    _playground()
    from mujoco_playground._src import mjx_env  # lazy, loaded by _playground (not re-exported)

    return Path(str(mjx_env.MENAGERIE_PATH))


def models_present(env_name: str) -> bool:
    """Whether ``env_name``'s models are on disk (dm_control tasks ship in the wheel)."""
    suites = _suites()
    return env_name in suites["dm_control_suite"] or menagerie_path().exists()


def available() -> tuple[str, ...]:
    """The task names that load on this machine: installed, and their models present."""
    if not installed():
        return ()
    return tuple(n for n in names() if models_present(n))


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` saying why ``playground/<env_name>`` cannot load.

    Three reasons: the package is missing (the message gives the install command), the
    name is unknown (it names the nearest ones), or the task's models are absent (it
    says where Playground expects them). Nothing is downloaded.
    """
    full = f"{PREFIX}/{env_name}"
    _playground()  # the package missing: raises with the install command
    all_names = names()
    if env_name not in all_names:
        lower = {n.lower(): n for n in all_names}
        near = [lower[n] for n in difflib.get_close_matches(env_name.lower(), lower, n=3)]
        hint = f"did you mean {', '.join(f'{PREFIX}/{n}' for n in near)}? " if near else ""
        raise UnknownEnvError(
            f"unknown environment {full!r}; {hint}Playground tasks that run offline: "
            + ", ".join(_suites()["dm_control_suite"])
        )
    if not models_present(env_name):
        suite = next(s for s, ns in _suites().items() if env_name in ns)
        raise UnknownEnvError(
            f"{full} is a Playground {suite} task whose models (the MuJoCo Menagerie) are "
            f"absent: Playground would clone them from GitHub into {menagerie_path()} when "
            "the task loads, and jaxspreeze does not download at run time. Clone "
            "https://github.com/google-deepmind/mujoco_menagerie there (on a machine with "
            "internet access), or choose a dm_control suite task, e.g. playground/CartpoleBalance"
        )


def load_env(env_name: str) -> Any:
    """Playground's own ``MjxEnv`` for ``env_name``, pure-JAX MJX, after :func:`check`."""
    check(env_name)
    return _playground().registry.load(env_name, config_overrides=dict(CONFIG_OVERRIDES))


def make(env_name: str, keys: ObsKeys = DEFAULT_OBS_KEYS) -> EnvParts:
    """The spec and per-env functions of ``playground/<env_name>`` (pure-JAX MJX)."""
    return from_env(load_env(env_name), f"{PREFIX}/{env_name}", keys)


def _shape(size: Any) -> tuple[int, ...]:
    return (size,) if isinstance(size, int) else tuple(size)


def _read_keys(size: Any, name: str, keys: ObsKeys) -> tuple[str, ...]:
    """The dict keys to observe, actor's first (one key when both read the same).

    ConfigError naming the field for a key the env does not observe, or for keys given
    to an env that observes one array.
    """
    if not isinstance(size, Mapping):
        if keys.given:
            field = "actor_obs_key" if keys.actor else "critic_obs_key"
            raise ConfigError(
                field,
                f"{name} observes one array, not a dict: there is no key to choose; drop "
                f"--{field.replace('_', '-')} (dict observations come from Playground's "
                "locomotion tasks)",
            )
        return ()
    actor = keys.actor or OBS_KEY
    critic = keys.critic or actor
    for field, key in (("actor_obs_key", actor), ("critic_obs_key", critic)):
        if key not in size:
            raise ConfigError(
                field,
                f"{name} observes a dict with keys {', '.join(sorted(size))}; there is no "
                f"key {key!r}: choose one of those",
            )
    return (actor,) if critic == actor else (actor, critic)


def from_env(env: Any, name: str, keys: ObsKeys = DEFAULT_OBS_KEYS) -> EnvParts:
    """Adapt a Playground ``MjxEnv`` (any object with its ``reset``/``step``/``_config``).

    Dict observations are read at ``keys`` (the module docstring); the time limit is the
    config's ``episode_length`` in env steps, each repeating the action ``action_repeat``
    times. ConfigError (``actor_obs_key`` / ``critic_obs_key``) for keys that do not fit.
    """
    config = getattr(env, "_config", None) or {}
    repeat = int(config.get("action_repeat", 1))
    max_steps = int(config.get("episode_length", 1000)) // repeat
    size = env.observation_size
    read = _read_keys(size, name, keys)
    columns: dict[str, Any] = {}
    if len(read) == 2:  # asymmetric: both flattened, side by side
        actor_width, critic_width = (math.prod(_shape(size[k])) for k in read)
        obs_shape: tuple[int, ...] = (actor_width + critic_width,)
        columns = {
            "actor_obs": (0, actor_width),
            "critic_obs": (actor_width, actor_width + critic_width),
        }
    else:
        obs_shape = _shape(size[read[0]] if read else size)
    n = int(env.action_size)
    spec = EnvSpec(name, obs_shape, False, n, (-1.0,) * n, (1.0,) * n, max_steps, **columns)

    def observe(obs: Any) -> jax.Array:
        if not isinstance(obs, Mapping):
            return obs.astype(jnp.float32)
        if len(read) == 2:
            return jnp.concatenate([obs[k].reshape(-1).astype(jnp.float32) for k in read])
        return obs[read[0] if read else OBS_KEY].astype(jnp.float32)

    def reset(key: jax.Array):
        state = env.reset(key)
        return observe(state.obs), state

    def step(state, action: jax.Array):
        reward = jnp.zeros((), jnp.float32)
        for _ in range(repeat):  # static: Playground's dm_control tasks all use 1
            state = env.step(state, action)
            reward = reward + state.reward
        terminated = state.done > 0.5
        return (
            observe(state.obs),
            state.replace(done=jnp.zeros_like(state.done)),
            reward,
            terminated,
        )

    reset_one, step_batch, step_batch_no_reset = auto_reset(reset, step, max_steps)
    return EnvParts(spec, reset_one, step_batch, env, step_batch_no_reset)
