"""One functional adapter over gymnax and brax: ``make_env("gymnax/Pendulum-v1", num_envs)``.

Every environment, whatever its library, is driven through the same vmapped contract::

    obs, state = env.reset(key)                                        # obs [N, ...]
    obs, state, reward, terminated, truncated, final_obs = env.step(key, state, action)

``terminated`` ends the return (bootstrap 0); ``truncated`` is a time limit (bootstrap
from ``final_obs``, the observation before the automatic reset). The returned ``state``
also tracks each env's running and last completed episode return and length.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze.errors import UnknownEnvError
from jaxspreeze.types import EnvSpec, PyTree

BRAX_ENVS = (
    "ant",
    "fast",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "pusher",
    "reacher",
    "swimmer",
    "walker2d",
)
BRAX_EPISODE_LENGTH = 1000


class EnvState(NamedTuple):
    """Batched env state: the library's own state plus episode bookkeeping, all ``[N]``."""

    inner: PyTree
    episode_return: jax.Array  # running return of the current episode
    episode_length: jax.Array  # steps taken in the current episode
    last_return: jax.Array  # return of the most recently finished episode (0 before any)
    last_length: jax.Array
    episodes: jax.Array  # episodes finished so far


StepOut = tuple[jax.Array, EnvState, jax.Array, jax.Array, jax.Array, jax.Array]


@dataclass(frozen=True, eq=False)
class VecEnv:
    """``num_envs`` copies of one environment, stepped together; pure and jittable."""

    spec: EnvSpec
    num_envs: int
    reset_one: Callable[[jax.Array], tuple[jax.Array, PyTree]]
    step_one: Callable[[jax.Array, PyTree, jax.Array], tuple]
    render_state: Any = None  # the library's (env, params), kept for renderers

    def reset(self, key: jax.Array) -> tuple[jax.Array, EnvState]:
        """Reset all envs: ``obs [N, *obs_shape]`` and a fresh :class:`EnvState`."""
        obs, inner = jax.vmap(self.reset_one)(jax.random.split(key, self.num_envs))
        zf = jnp.zeros((self.num_envs,), jnp.float32)
        zi = jnp.zeros((self.num_envs,), jnp.int32)
        return obs, EnvState(inner, zf, zi, zf, zi, zi)

    def step(self, key: jax.Array, state: EnvState, action: jax.Array) -> StepOut:
        """Step all envs (auto-reset inside); see the module docstring for the outputs."""
        keys = jax.random.split(key, self.num_envs)
        obs, inner, reward, terminated, truncated, final_obs = jax.vmap(self.step_one)(
            keys, state.inner, action
        )
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

    def random_actions(self, key: jax.Array) -> jax.Array:
        """Uniform random actions for all envs (warm-up)."""
        spec = self.spec
        if spec.discrete:
            return jax.random.randint(key, (self.num_envs,), 0, spec.action_dim)
        low = jnp.asarray(spec.action_low, jnp.float32)
        high = jnp.asarray(spec.action_high, jnp.float32)
        u = jax.random.uniform(key, (self.num_envs, spec.action_dim))
        return low + u * (high - low)


def available_envs() -> list[str]:
    """Every name :func:`make_env` accepts."""
    return [f"gymnax/{n}" for n in _gymnax_names()] + [f"brax/{n}" for n in BRAX_ENVS]


@functools.cache
def _gymnax_names() -> tuple[str, ...]:
    import gymnax

    return tuple(gymnax.registered_envs)


def check_env_name(name: str) -> None:
    """Raise :class:`UnknownEnvError` (listing the known names) for an unknown name."""
    lib, _, env_name = name.partition("/")
    known = (lib == "gymnax" and env_name in _gymnax_names()) or (
        lib == "brax" and env_name in BRAX_ENVS
    )
    if not known:
        raise UnknownEnvError(
            f"unknown environment {name!r}; available: {', '.join(available_envs())}"
        )


@functools.cache
def env_spec(name: str) -> EnvSpec:
    """The :class:`EnvSpec` of a named environment (builds the env once, no jit)."""
    return _make_one(name)[0]


def make_env(name: str, num_envs: int) -> VecEnv:
    """Build ``num_envs`` vmapped copies of ``gymnax/<Name>`` or ``brax/<name>``."""
    spec, reset_one, step_one, render_state = _make_one(name)
    return VecEnv(spec, num_envs, reset_one, step_one, render_state)


@functools.cache
def _make_one(name: str) -> tuple:
    check_env_name(name)
    lib, _, env_name = name.partition("/")
    if lib == "gymnax":
        return _gymnax(env_name)
    return _brax(env_name)


def _gymnax(env_name: str) -> tuple:
    import gymnax
    from gymnax.environments import spaces

    env, params = gymnax.make(env_name)
    space = env.action_space(params)
    obs_shape = tuple(env.observation_space(params).shape)
    if isinstance(space, spaces.Discrete):
        spec = EnvSpec(f"gymnax/{env_name}", obs_shape, True, int(space.n))
    else:
        shape = tuple(space.shape) or (1,)
        low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape)
        high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape)
        spec = EnvSpec(
            f"gymnax/{env_name}",
            obs_shape,
            False,
            shape[0],
            tuple(float(x) for x in low),
            tuple(float(x) for x in high),
        )
    spec = EnvSpec(**{**spec.__dict__, "max_episode_steps": int(params.max_steps_in_episode)})

    def reset_one(key):
        obs, state = env.reset(key, params)
        return obs.astype(jnp.float32), state

    def step_one(key, state, action):
        obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
        final_obs = info["final_observation"].astype(jnp.float32)
        return obs.astype(jnp.float32), state, reward, terminated, truncated, final_obs

    return spec, reset_one, step_one, (env, params)


class BraxInner(NamedTuple):
    """brax state plus what the adapter needs for its own auto-reset."""

    state: Any
    first: Any  # the state this env returns to on an episode end
    steps: jax.Array


def _brax(env_name: str) -> tuple:
    from brax import envs as brax_envs

    env = brax_envs.get_environment(env_name)
    spec = EnvSpec(
        f"brax/{env_name}",
        (env.observation_size,),
        False,
        env.action_size,
        (-1.0,) * env.action_size,
        (1.0,) * env.action_size,
        BRAX_EPISODE_LENGTH,
    )

    def reset_one(key):
        state = env.reset(key)
        return state.obs, BraxInner(state, state, jnp.zeros((), jnp.int32))

    def step_one(key, inner, action):
        del key  # brax steps are deterministic; resets return to the env's first state
        nxt = env.step(inner.state, action)
        steps = inner.steps + 1
        terminated = nxt.done > 0.5
        truncated = steps >= BRAX_EPISODE_LENGTH
        done = terminated | truncated
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), inner.first, nxt)
        state = state.replace(done=jnp.zeros_like(nxt.done))
        steps = jnp.where(done, 0, steps)
        obs = jnp.where(done, inner.first.obs, nxt.obs)
        return obs, BraxInner(state, inner.first, steps), nxt.reward, terminated, truncated, nxt.obs

    return spec, reset_one, step_one, env
