"""Environments that run on the host CPU: ``gymnasium/<id>``, ``envpool/<task>`` or your own.

Your own gymnasium env trains without registering an id: ``jaxspreeze.train(cfg,
env=...)`` takes a ``gymnasium.Env`` instance, a factory (a zero-argument callable
returning one) or a gymnasium vector env, and enters it here under the reserved name
``user/<ClassName>`` (:func:`register_user_env`): from then on it is a host env like
the others, built by name by the sampling workers and the evaluator. An instance is
deep-copied for every env built (it is never stepped itself); a factory is called once
per env; a vector env lends its ``env_fns`` (SyncVectorEnv, AsyncVectorEnv). The run
directory records the env (:data:`USER_ENV_FILE`: how it was passed, its class, its
spec), so ``jaxspreeze.load(run)`` knows its spaces in a later process; stepping it there
needs it passed again from Python.

Every host env, whatever its library, is a batch of ``N`` envs driven through one numpy
contract close to the device one (:mod:`jaxspreeze.envs`)::

    env = make_host_env("gymnasium/HalfCheetah-v5", num_envs=8, seed=0)
    obs = env.reset(seed=0)                       # obs [N, *obs_shape] in spec.obs_dtype
    out = env.step(actions)                       # HostStep, every field [N, ...]
    out.obs, out.reward, out.terminated, out.truncated, out.final_obs, out.valid

and, for the sampling workers, the asynchronous form of the same (envpool's own)::

    env.async_reset(seed); out = env.recv()       # out.env_ids: which envs answered
    env.send(actions, out.env_ids); out = env.recv()

``terminated`` ends the return (bootstrap 0); ``truncated`` is a time limit (bootstrap
from ``final_obs``); ``final_obs`` is the true last observation of the step (the
observation before an automatic reset). ``obs`` is what the next action acts on.

**The reset step.** envpool and gymnasium vector envs auto-reset on the *next* step by
default: the step after an episode ends returns the reset observation with reward 0 and
ignores its action. Such a row is flagged ``valid=False``: it is no transition, is never
stored and never counted as an env step (count env steps as ``out.valid.sum()``); its
``obs`` is the reset observation the env acts on next. The rows returned by a reset are
``valid=False`` too. gymnasium ids are built with ``autoreset_mode=SAME_STEP`` (the reset
happens inside the step that ends the episode, the true final observation comes from
``info["final_obs"]``), so every row after the first reset is valid; a gymnasium vector env
you build yourself may use either mode. envpool only has the next-step mode.

Observations keep their space's dtype when it is one byte (a ``uint8`` frame, a ``bool``
grid, ``int8``: :func:`obs_dtype`), so the workers' blocks and the replay buffer hold them
at a quarter of a float32 copy; any other dtype (float64, int64, ...) becomes float32.

Actions: discrete envs take ``int`` actions ``[N]`` in ``[0, n)`` (a ``Discrete(n, start)``
is shifted for you); continuous envs take ``[N, d]`` floats inside the bounds of
:class:`~jaxspreeze.core.types.EnvSpec` (``action_low``/``action_high``), as for gymnax. The
algorithms take Box observations and Box(d,) or Discrete actions; any other space (Dict,
Tuple, MultiDiscrete, MultiBinary, unbounded actions, ...) is refused by name.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxspreeze.core import envids
from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.core.types import EnvSpec, kept_obs_dtype

FAMILIES = envids.host_families()  # the host families of the table (gymnasium, envpool)
USER = "user"  # the reserved prefix of the envs passed to jaxspreeze.train(cfg, env=...)
USER_ENV_FILE = "user_env.json"  # a run directory's record of its user env
ENVPOOL_INSTALL = 'pip install "jaxspreeze[envpool]"'
GYMNASIUM_INSTALL = 'pip install "gymnasium[mujoco]>=1.1"'
HOST_INSTALL = 'pip install "jaxspreeze[host]"'  # gymnasium[mujoco] and envpool (pyproject)
# gymnasium's async vectorisation starts its env processes from a fork server: forking a
# process that runs JAX's threads can deadlock
ASYNC_CONTEXT = "forkserver"
DEFAULT_MAX_EPISODE_STEPS = EnvSpec.__dataclass_fields__["max_episode_steps"].default


class HostStep(NamedTuple):
    """One answer of a batch of host envs; every field is ``[B, ...]`` for the envs in ``env_ids``."""

    obs: np.ndarray  # spec.obs_dtype [B, *obs_shape]: what the next action acts on
    reward: np.ndarray  # float32 [B]
    terminated: np.ndarray  # bool [B]
    truncated: np.ndarray  # bool [B] (never together with terminated)
    final_obs: np.ndarray  # spec.obs_dtype [B, *obs_shape]: the step's true last observation
    valid: np.ndarray  # bool [B]: False for reset rows (no transition, no env step)
    env_ids: np.ndarray  # int32 [B]: which envs of the batch these rows belong to


def is_host_env(name: str) -> bool:
    """Whether ``name`` names a host env (``gymnasium/...``, ``envpool/...`` or ``user/...``)."""
    prefix = name.partition("/")[0]
    return prefix in FAMILIES or prefix == USER


def is_user_env(name: str) -> bool:
    """Whether ``name`` is a user's env passed to ``jaxspreeze.train(cfg, env=...)``."""
    return name.partition("/")[0] == USER


# --- spaces -------------------------------------------------------------------------------


def obs_dtype(dtype: Any) -> str:
    """The dtype a host env's observations of ``dtype`` are kept in: the rule of every
    family (:func:`jaxspreeze.core.types.kept_obs_dtype`)."""
    return kept_obs_dtype(dtype)


def _spec_from_spaces(name: str, obs_space: Any, act_space: Any, max_steps: int | None) -> EnvSpec:
    """The :class:`EnvSpec` of a Box observation and Box(d,)/Discrete action, or a clear error."""
    spaces = _import_gymnasium().spaces
    if not isinstance(obs_space, spaces.Box):
        raise UnknownEnvError(
            f"{name}: observation space {obs_space} is not supported: the algorithms take a Box "
            "observation (a Dict, Tuple or Discrete observation can be flattened to a Box with "
            "gymnasium.wrappers.FlattenObservation)"
        )
    obs_shape = tuple(int(d) for d in obs_space.shape) or (1,)
    steps = int(max_steps) if max_steps else DEFAULT_MAX_EPISODE_STEPS
    dtype = obs_dtype(obs_space.dtype)
    if isinstance(act_space, spaces.Discrete):
        return EnvSpec(
            name, obs_shape, True, int(act_space.n), max_episode_steps=steps, obs_dtype=dtype
        )
    if isinstance(act_space, spaces.Box) and len(act_space.shape) <= 1:
        low = np.broadcast_to(np.asarray(act_space.low, np.float64), act_space.shape or (1,))
        high = np.broadcast_to(np.asarray(act_space.high, np.float64), act_space.shape or (1,))
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise UnknownEnvError(
                f"{name}: action space {act_space} is not supported: continuous actions need "
                "finite bounds (the policy squashes its actions into them)"
            )
        return EnvSpec(
            name,
            obs_shape,
            False,
            int(low.shape[0]),
            tuple(float(x) for x in low),
            tuple(float(x) for x in high),
            steps,
            obs_dtype=dtype,
        )
    raise UnknownEnvError(
        f"{name}: action space {act_space} is not supported: the algorithms take a Box(d,) "
        "(continuous) or a Discrete(n) action"
    )


class _Actions:
    """Turns the policy's actions into what the library's action space takes."""

    def __init__(self, spec: EnvSpec, act_space: Any):
        self.discrete = spec.discrete
        self.dtype = np.dtype(act_space.dtype)
        self.start = int(getattr(act_space, "start", 0)) if spec.discrete else 0
        self.scalar_box = not spec.discrete and act_space.shape == ()

    def __call__(self, actions: Any) -> np.ndarray:
        """Library actions for ``[B]`` discrete or ``[B, d]`` continuous policy actions."""
        a = np.asarray(actions)
        if self.discrete:
            return (a.reshape(-1) + self.start).astype(self.dtype, copy=False)
        if self.scalar_box:
            a = a.reshape(-1)
        return a.astype(self.dtype, copy=False)


# --- the contract -------------------------------------------------------------------------


class HostEnv:
    """A batch of ``num_envs`` host envs answering ``batch_size`` at a time (see the module doc)."""

    name: str
    spec: EnvSpec
    num_envs: int
    batch_size: int  # rows per recv(): num_envs, or fewer for envpool's async mode

    def __init__(self, name: str, spec: EnvSpec, num_envs: int, batch_size: int):
        self.name, self.spec, self.num_envs, self.batch_size = name, spec, num_envs, batch_size
        # per env: its previous row ended an episode, so its next row is a reset row
        self._reset_next = np.ones(num_envs, bool)
        # the env_ids of an answer from every env in order (the same object every time)
        self.all_ids = np.arange(num_envs, dtype=np.int32)
        self.all_ids.flags.writeable = False
        # the valid mask of an answer from every env with no reset row (the same object)
        self.all_valid = np.ones(num_envs, bool)
        self.all_valid.flags.writeable = False

    # the asynchronous form, implemented by each library's adapter
    def async_reset(self, seed: int) -> None:
        """Start resetting every env with seeds ``seed, seed+1, ...``; answers come by recv()."""
        raise NotImplementedError

    def send(self, actions: Any, env_ids: np.ndarray) -> None:
        """Start stepping the envs ``env_ids`` (those of the last recv) with ``actions``."""
        raise NotImplementedError

    def recv(self) -> HostStep:
        """Wait for the next ``batch_size`` envs to answer."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the envs (threads, processes); idempotent."""
        raise NotImplementedError

    # the synchronous form, built on the asynchronous one
    def reset(self, seed: int) -> np.ndarray:
        """Reset every env (env ``i`` with seed ``seed + i``): ``obs [N, *obs_shape]``."""
        self._need_sync()
        self.async_reset(seed)
        out = self.recv()
        obs = np.empty((self.num_envs, *self.spec.obs_shape), self.spec.obs_dtype)
        obs[out.env_ids] = out.obs
        return obs

    def step(self, actions: Any) -> HostStep:
        """Step every env with ``actions [N, ...]``; rows in env order."""
        self._need_sync()
        self.send(actions, self.all_ids)
        return self.recv()

    def _need_sync(self) -> None:
        if self.batch_size != self.num_envs:
            raise RuntimeError(
                f"{self.name}: reset()/step() need batch_size == num_envs; this pool answers "
                f"{self.batch_size} of {self.num_envs} envs at a time: use async_reset/send/recv"
            )

    def _rows(self, ids, obs, reward, terminated, truncated, final_obs=None) -> HostStep:
        """A HostStep from library arrays; rows after an episode end become reset rows."""
        everyone = ids is self.all_ids
        if not everyone:
            ids = np.asarray(ids, np.int32)
            if len(ids) == self.num_envs and (ids == self.all_ids).all():
                ids, everyone = self.all_ids, True
        obs = np.asarray(obs, self.spec.obs_dtype)
        if obs.shape[1:] != self.spec.obs_shape:
            obs = obs.reshape(len(ids), *self.spec.obs_shape)
        reward = np.asarray(reward, np.float32)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool) & ~terminated
        reset = self._reset_next if everyone else self._reset_next[ids]
        if everyone and not reset.any():
            valid = self.all_valid
        else:
            valid = ~reset
            if reset.any():  # reset rows: no reward, no episode end
                reward = np.where(valid, reward, np.float32(0.0))
                terminated = terminated & valid
                truncated = truncated & valid
        if everyone:
            np.logical_or(terminated, truncated, out=self._reset_next)
        else:
            self._reset_next[ids] = terminated | truncated
        final = obs if final_obs is None else final_obs
        return HostStep(obs, reward, terminated, truncated, final, valid, ids)

    def __enter__(self) -> HostEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, num_envs={self.num_envs})"


class GymnasiumHostEnv(HostEnv):
    """A gymnasium ``VectorEnv`` (sync or async vectorisation, either autoreset mode)."""

    def __init__(self, name: str, vec: Any, max_episode_steps: int | None = None):
        import gymnasium as gym  # lazy: optional heavy dependency

        mode = vec.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        mode = gym.vector.AutoresetMode(mode)
        if mode not in (gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP):
            vec.close()
            raise UnknownEnvError(
                f"{name}: autoreset_mode {mode.name} is not supported; build the vector env "
                "with autoreset_mode SAME_STEP (or NEXT_STEP)"
            )
        try:
            if max_episode_steps is None:
                env_spec = getattr(vec, "spec", None)
                max_episode_steps = getattr(env_spec, "max_episode_steps", None)
            spec = _spec_from_spaces(
                name, vec.single_observation_space, vec.single_action_space, max_episode_steps
            )
        except UnknownEnvError:
            vec.close()
            raise
        super().__init__(name, spec, int(vec.num_envs), int(vec.num_envs))
        self.vec = vec
        self.same_step = mode == gym.vector.AutoresetMode.SAME_STEP
        self._actions = _Actions(spec, vec.single_action_space)
        self._async = hasattr(vec, "step_async")
        self._pending: np.ndarray | None = None
        self._reset_seed: int | None = None  # set by async_reset until recv() answers it
        self._closed = False

    def async_reset(self, seed: int) -> None:
        """Start resetting every env (env ``i`` with seed ``seed + i``)."""
        self._reset_next[:] = True
        if self._async:
            self.vec.reset_async(seed=int(seed))
        else:
            self._pending = None
        self._reset_seed = int(seed)

    def send(self, actions: Any, env_ids: np.ndarray) -> None:
        """Start stepping every env (a gymnasium vector env steps all of them together)."""
        if len(env_ids) != self.num_envs:
            raise ValueError(f"{self.name}: a gymnasium vector env steps all {self.num_envs} envs")
        a = self._actions(actions)
        if self._async:
            self.vec.step_async(a)
        else:
            self._pending = a

    def recv(self) -> HostStep:
        """Wait for every env to answer the last send() (or async_reset())."""
        if self._reset_seed is not None:
            seed, self._reset_seed = self._reset_seed, None
            obs, _ = self.vec.reset_wait() if self._async else self.vec.reset(seed=seed)
            self._reset_next[:] = True
            z = np.zeros(self.num_envs, bool)
            return self._rows(self.all_ids, obs, np.zeros(self.num_envs), z, z)
        if self._async:
            obs, reward, terminated, truncated, info = self.vec.step_wait()
        else:
            obs, reward, terminated, truncated, info = self.vec.step(self._pending)
        if not self.same_step:
            return self._rows(self.all_ids, obs, reward, terminated, truncated)
        # same-step autoreset: no reset rows; where an episode ended, obs is already the
        # reset observation and the true final one is in info["final_obs"]
        self._reset_next[:] = False
        out = self._rows(self.all_ids, obs, reward, terminated, truncated)
        self._reset_next[:] = False
        if "_final_obs" not in info:
            return out
        final = out.obs.copy()
        shape = self.spec.obs_shape
        for i in np.flatnonzero(info["_final_obs"]):
            final[i] = np.asarray(info["final_obs"][i]).reshape(shape)
        return out._replace(final_obs=final)

    def close(self) -> None:
        """Close the vector env (its subprocesses, for async vectorisation)."""
        if not self._closed:
            self._closed = True
            self.vec.close()


class EnvpoolHostEnv(HostEnv):
    """An envpool pool (``env_type="gymnasium"``), synchronous or with async send/recv."""

    def __init__(self, name: str, task: str, num_envs: int, seed: int, **kwargs: Any):
        envpool = _import_envpool()
        spec_obj = envpool.make_spec(task, **_spec_kwargs(kwargs))
        obs_space = getattr(spec_obj, "gymnasium_observation_space", spec_obj.observation_space)
        act_space = getattr(spec_obj, "gymnasium_action_space", spec_obj.action_space)
        spec = _spec_from_spaces(name, obs_space, act_space, spec_obj.config.max_episode_steps)
        batch_size = int(kwargs.pop("batch_size", num_envs))
        super().__init__(name, spec, num_envs, batch_size)
        self.task, self.kwargs = task, kwargs
        self._actions = _Actions(spec, act_space)
        self.pool: Any = None
        self._seed: int | None = None
        self._build(seed)

    def _build(self, seed: int) -> None:
        if self.pool is not None:
            self.pool.close()
        self.pool = _import_envpool().make(
            self.task,
            env_type="gymnasium",
            num_envs=self.num_envs,
            batch_size=self.batch_size,
            seed=int(seed),
            **self.kwargs,
        )
        self._seed = int(seed)

    def async_reset(self, seed: int) -> None:
        """Start resetting every env; a new seed rebuilds the pool (envpool seeds at creation)."""
        if int(seed) != self._seed:
            self._build(seed)
        self._reset_next[:] = True
        self.pool.async_reset()

    def send(self, actions: Any, env_ids: np.ndarray) -> None:
        """Start stepping the envs ``env_ids``; envpool releases the GIL while they run."""
        self.pool.send(self._actions(actions), np.asarray(env_ids, np.int32))

    def recv(self) -> HostStep:
        """Wait for the next ``batch_size`` envs to answer."""
        obs, reward, terminated, truncated, info = self.pool.recv()
        return self._rows(info["env_id"], obs, reward, terminated, truncated)

    def close(self) -> None:
        """Stop the pool's threads."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None


# --- names and building -------------------------------------------------------------------


def _near(name: str, known: list[str]) -> str:
    """``"; nearest known: a, b, c"`` (difflib, case-insensitive) or ``""``."""
    lower = {k.lower(): k for k in known}
    near = difflib.get_close_matches(name.lower(), list(lower), n=5, cutoff=0.6)
    return f"; nearest known: {', '.join(lower[n] for n in near)}" if near else ""


def _import_envpool() -> Any:
    if importlib.util.find_spec("envpool") is None:
        raise UnknownEnvError(
            f"envpool/ environments need envpool, which is not installed: {ENVPOOL_INSTALL}"
        )
    import envpool  # lazy: optional heavy dependency (C++ pools)

    return envpool


def _import_gymnasium() -> Any:
    if importlib.util.find_spec("gymnasium") is None:
        raise UnknownEnvError(
            f"gymnasium/ environments need gymnasium, which is not installed: {GYMNASIUM_INSTALL}"
        )
    import gymnasium  # lazy: optional heavy dependency

    return gymnasium


def _spec_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The envpool kwargs make_spec takes (not the pool-only ones)."""
    pool_only = ("batch_size", "num_threads", "thread_affinity_offset")
    return {k: v for k, v in kwargs.items() if k not in pool_only}


def check_host_env_name(name: str) -> None:
    """Raise :class:`UnknownEnvError` for a host env name whose family, package or id is unknown."""
    family, sep, env_id = name.partition("/")
    if family == USER:
        _user_entry(name)
        return
    if not sep or family not in FAMILIES or not env_id:
        raise UnknownEnvError(
            f"unknown host environment {name!r}; names are gymnasium/<id> or envpool/<task>"
        )
    if family == "envpool":
        known = list(_import_envpool().list_all_envs())
        if env_id not in known:
            near = _near(env_id, known)
            raise UnknownEnvError(f"unknown envpool task {env_id!r} in {name!r}{near}")
        return
    gym = _import_gymnasium()
    module, colon, bare = env_id.rpartition(":")
    if colon:  # gymnasium's "package.module:Env-v0": importing the module registers the id
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UnknownEnvError(
                f"{name}: cannot import {module!r} to register {bare!r}: {e}"
            ) from None
    if bare not in gym.registry:
        known = list(gym.registry)
        raise UnknownEnvError(f"unknown gymnasium id {bare!r} in {name!r}{_near(bare, known)}")


def env_names(family: str) -> list[str]:
    """Every id of gymnasium's registry or every envpool task (sorted), without the prefix."""
    if family == "envpool":
        return sorted(_import_envpool().list_all_envs())
    if family == "gymnasium":
        return sorted(_import_gymnasium().registry)
    raise UnknownEnvError(f"unknown host env family {family!r}; one of {', '.join(FAMILIES)}")


def host_env_spec(name: str) -> EnvSpec:
    """The :class:`EnvSpec` of a named host env (checks the name and its spaces; builds one env
    once per name; a user env's spec is the one registered)."""
    if is_user_env(name):
        return _user_entry(name).spec
    return _library_env_spec(name)


@functools.cache
def _library_env_spec(name: str) -> EnvSpec:
    with make_host_env(name, 1) as env:
        return env.spec


host_env_spec.cache_clear = _library_env_spec.cache_clear  # type: ignore[attr-defined]


def make_host_env(
    env: str | Callable[[], Any] | Any,
    num_envs: int,
    *,
    seed: int = 0,
    vectorization: str = "sync",
    batch_size: int | None = None,
    **kwargs: Any,
) -> HostEnv:
    """A batch of ``num_envs`` host envs from a name, a gymnasium env factory or env.

    ``env`` is ``"gymnasium/<id>"`` (``vectorization`` ``"sync"``: in this process,
    ``"async"``: one subprocess per env, started from a fork server, so a script needs
    the ``if __name__ == "__main__":`` guard), ``"envpool/<task>"`` (``batch_size < num_envs``
    for envpool's async mode; ``num_threads`` etc. in ``kwargs``), a callable returning a
    ``gymnasium.Env`` (called ``num_envs`` times), a ``gymnasium.Env`` (``num_envs=1``
    only) or a ``gymnasium.vector.VectorEnv``. ``kwargs`` go to the library's ``make``
    (e.g. ``max_episode_steps``). ``seed`` seeds envpool pools; gymnasium envs are seeded
    by :meth:`HostEnv.reset`.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if vectorization not in ("sync", "async"):
        raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
    if isinstance(env, str) and is_user_env(env):
        user = _user_entry(env)
        if user.fns is None:
            raise UnknownEnvError(_not_here(env))
        fns = [user.fns[i % len(user.fns)] for i in range(num_envs)]
        return _vector_of(env, fns, vectorization, user.spec.max_episode_steps)
    if isinstance(env, str):
        check_host_env_name(env)
        family, _, env_id = env.partition("/")
        if family == "envpool":
            if batch_size is not None:
                kwargs["batch_size"] = batch_size
            return EnvpoolHostEnv(env, env_id, num_envs, seed, **kwargs)
        gym = _import_gymnasium()
        vector_kwargs: dict[str, Any] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        if vectorization == "async":
            vector_kwargs["context"] = ASYNC_CONTEXT
        try:
            vec = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode=vectorization,
                vector_kwargs=vector_kwargs,
                **kwargs,
            )
        except gym.error.DependencyNotInstalled as e:
            raise UnknownEnvError(
                f"{env}: a package it needs is missing: {e} (gymnasium's MuJoCo tasks: "
                f"{HOST_INSTALL})"
            ) from None
        return GymnasiumHostEnv(env, vec, kwargs.get("max_episode_steps"))
    gym = _import_gymnasium()
    if isinstance(env, gym.vector.VectorEnv):
        return GymnasiumHostEnv(_user_name(env), env, kwargs.get("max_episode_steps"))
    if isinstance(env, gym.Env):
        if num_envs != 1:
            raise ValueError(
                "a gymnasium.Env instance is one env; pass a factory (a callable returning a "
                f"new env) to run {num_envs} of them"
            )
        fns = [lambda: env]
    elif callable(env):
        fns = [env] * num_envs
    else:
        raise TypeError(
            "env must be a name, a gymnasium env factory, Env or VectorEnv; "
            f"got {type(env).__name__}"
        )
    return _vector_of(None, fns, vectorization, kwargs.get("max_episode_steps"))


def _vector_of(
    name: str | None, fns: list[Callable[[], Any]], vectorization: str, max_steps: int | None
) -> GymnasiumHostEnv:
    """A same-step autoreset gymnasium vector env of ``fns`` (sync or async), adapted."""
    gym = _import_gymnasium()
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if vectorization == "async":
        vec = gym.vector.AsyncVectorEnv(fns, autoreset_mode=same_step, context=ASYNC_CONTEXT)
    else:
        vec = gym.vector.SyncVectorEnv(fns, autoreset_mode=same_step)
    return GymnasiumHostEnv(name or _user_name(vec), vec, max_steps)


def _user_name(vec: Any) -> str:
    """``gymnasium/<id>`` of a user's env when it has a registered spec, else its class name."""
    spec = getattr(vec, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return f"gymnasium/{spec.id}"
    envs = getattr(vec, "envs", None)
    inner = envs[0].unwrapped if envs else None
    cls = type(inner).__name__ if inner is not None else type(vec).__name__
    return f"gymnasium/{cls}"


# --- a user's env -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UserEnv:
    """A user's env under its reserved name: how to build it and its spec.

    ``fns``: the factories env ``i`` is built from (``fns[i % len(fns)]``); None for an env
    known only by the spec a run directory recorded (a loaded run: nothing to step).
    """

    name: str
    spec: EnvSpec
    fns: tuple[Callable[[], Any], ...] | None
    kind: str  # "instance", "factory" or "vector": how it was passed
    cls: str  # the unwrapped env's class, module.qualname
    vectorization: str = "sync"


_USER_ENVS: dict[str, UserEnv] = {}


def _not_here(name: str) -> str:
    return (
        f"{name} is a gymnasium env passed from Python (jaxspreeze.train(cfg, env=...)), "
        "which this process does not have: pass it again from Python "
        "(jaxspreeze.train(cfg, env=..., resume=RUN_DIR) to resume; "
        "jaxspreeze.load(RUN_DIR, env=...) to evaluate or render)"
    )


def _user_entry(name: str) -> UserEnv:
    entry = _USER_ENVS.get(name)
    if entry is None:
        raise UnknownEnvError(_not_here(name))
    return entry


def user_env(name: str) -> UserEnv | None:
    """The registered user env ``name`` (None if this process has none by that name)."""
    return _USER_ENVS.get(name)


def _class_of(env: Any) -> tuple[str, str]:
    """(class name, module.qualname) of a gymnasium env's innermost env."""
    cls = type(getattr(env, "unwrapped", env))
    return cls.__name__, f"{cls.__module__}.{cls.__qualname__}"


def register_user_env(env: Any) -> UserEnv:
    """Enter a user's gymnasium env under ``user/<ClassName>``; its :class:`UserEnv`.

    ``env``: a ``gymnasium.Env`` instance (deep-copied for every env built: it must
    support ``copy.deepcopy``), a zero-argument callable returning a new
    ``gymnasium.Env`` (called once here to read its spaces, then once per env), or a
    gymnasium vector env with ``env_fns`` (``SyncVectorEnv``, ``AsyncVectorEnv``,
    ``gymnasium.make_vec``'s). Spaces: a Box observation and a Box(d,) or Discrete
    action. Anything else is a :class:`~jaxspreeze.core.errors.ConfigError` naming ``env``.
    A later registration under the same name replaces the earlier one.
    """
    if importlib.util.find_spec("gymnasium") is None:
        raise ConfigError("env", f"a Python env needs gymnasium: {GYMNASIUM_INSTALL}")
    gym = _import_gymnasium()
    vectorization = "sync"
    if isinstance(env, gym.vector.VectorEnv):
        kind = "vector"
        env_fns = getattr(env, "env_fns", None)
        if not isinstance(env_fns, Sequence) or not env_fns:
            raise ConfigError(
                "env",
                f"the vector env {type(env).__name__} has no env_fns to build envs from; pass "
                "a factory (a callable returning a gymnasium.Env) instead",
            )
        fns = tuple(env_fns)
        if isinstance(env, gym.vector.AsyncVectorEnv):
            vectorization = "async"
        obs_space, act_space = env.single_observation_space, env.single_action_space
        max_steps = getattr(getattr(env, "spec", None), "max_episode_steps", None)
        probe = env.envs[0] if getattr(env, "envs", None) else None
        cls_name, cls = _class_of(probe) if probe is not None else _class_of(env)
    elif isinstance(env, gym.Env):
        kind = "instance"
        try:
            copy.deepcopy(env)
        except Exception as e:  # what a deep copy raises depends on the env's members
            raise ConfigError(
                "env",
                f"the gymnasium env {type(env).__name__} cannot be deep-copied "
                f"({type(e).__name__}: {e}); pass a factory instead, e.g. env=lambda: MyEnv()",
            ) from None
        fns = (functools.partial(copy.deepcopy, env),)
        obs_space, act_space = env.observation_space, env.action_space
        max_steps = getattr(getattr(env, "spec", None), "max_episode_steps", None)
        cls_name, cls = _class_of(env)
    elif callable(env) and not isinstance(env, str | bytes):
        kind = "factory"
        made = env()
        if not isinstance(made, gym.Env):
            raise ConfigError(
                "env",
                f"the factory {getattr(env, '__name__', env)!r} returned a "
                f"{type(made).__name__}, not a gymnasium.Env",
            )
        try:
            obs_space, act_space = made.observation_space, made.action_space
            max_steps = getattr(getattr(made, "spec", None), "max_episode_steps", None)
            cls_name, cls = _class_of(made)
        finally:
            made.close()
        fns = (env,)
    else:
        raise ConfigError(
            "env",
            "expected a gymnasium.Env, a factory returning one or a gymnasium vector env; "
            f"got {type(env).__name__}",
        )
    name = f"{USER}/{cls_name}"
    try:
        spec = _spec_from_spaces(name, obs_space, act_space, max_steps)
    except UnknownEnvError as e:
        raise ConfigError("env", str(e)) from None
    entry = UserEnv(name, spec, fns, kind, cls, vectorization)
    _USER_ENVS[name] = entry
    return entry


def save_user_env(run_dir: str | Path, name: str) -> Path:
    """Record the user env ``name`` in ``run_dir`` (:data:`USER_ENV_FILE`), atomically."""
    entry = _user_entry(name)
    record = {
        "name": entry.name,
        "source": "a gymnasium env passed from Python: jaxspreeze.train(cfg, env=...)",
        "passed_as": entry.kind,
        "class": entry.cls,
        "spec": dataclasses.asdict(entry.spec),
    }
    path = Path(run_dir) / USER_ENV_FILE
    tmp = path.with_name(f".{USER_ENV_FILE}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load_user_env(run_dir: str | Path) -> UserEnv | None:
    """The user env a run directory recorded, entered by its spec alone unless this process
    has it with its factories already; None when the run's env is not a user env."""
    path = Path(run_dir) / USER_ENV_FILE
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    known = _USER_ENVS.get(record["name"])
    if known is not None and known.fns is not None:
        return known
    spec = EnvSpec.from_record(record["spec"])
    entry = UserEnv(record["name"], spec, None, record["passed_as"], record["class"])
    _USER_ENVS[entry.name] = entry
    return entry
