"""The brax family: ``brax/<name>``, reset by :func:`~jaxspreeze.envs.base.auto_reset`.

brax's own AutoResetWrapper returns each env to a cached first state and drops the final
observation; here new episodes start from freshly drawn ``env.reset`` states (a new
target for reacher, a new object position for pusher) and ``final_obs`` is kept.

The observation size is read from the abstract shape of the jitted reset the run uses
anyway (``jax.eval_shape``: one trace, reused by every program), not from brax's
``env.observation_size``, which resets the env eagerly: hundreds of ops, each compiled on
its own (halfcheetah: about 50 distinct programs, tens of seconds on a CPU, too small for
the persistent compilation cache).

brax 0.14's fluid forces (swimmer's viscosity, ``brax.fluid``) call ``jnp.clip`` with the
``a_min`` keyword that jax 0.10 removed; :func:`_fluid_on_new_jax` gives that module a
``clip`` that takes it (nothing else in brax changes, nothing when jax still has it).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp

from jaxspreeze.core.envids import BRAX_NAMES
from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.core.types import EnvSpec
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "brax"
NAMES = BRAX_NAMES
EPISODE_LENGTH = 1000


def names() -> tuple[str, ...]:
    """The brax task names (without the family prefix)."""
    return NAMES


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` unless ``env_name`` is a brax task."""
    if env_name not in NAMES:
        raise UnknownEnvError(
            f"unknown environment {f'{PREFIX}/{env_name}'!r}; available: "
            + ", ".join(f"{PREFIX}/{n}" for n in NAMES)
        )


def _clip(x, min=None, max=None, *, a_min=None, a_max=None):
    """``jnp.clip`` taking the ``a_min``/``a_max`` keywords of jax before 0.10 too."""
    return jnp.clip(x, a_min if min is None else min, a_max if max is None else max)


class _NumpyWithOldClip:
    """jax.numpy, whose ``clip`` is :func:`_clip`."""

    clip = staticmethod(_clip)

    def __getattr__(self, name: str):
        return getattr(jnp, name)


def _fluid_on_new_jax() -> None:
    """Let ``brax.fluid`` (swimmer's viscosity) run on a jax whose ``clip`` has no
    ``a_min``: that module's ``jp`` becomes :class:`_NumpyWithOldClip`."""
    if "a_min" in inspect.signature(jnp.clip).parameters:
        return
    from brax import fluid

    if not isinstance(fluid.jp, _NumpyWithOldClip):
        fluid.jp = _NumpyWithOldClip()


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``brax/<env_name>``."""
    from brax import envs as brax_envs  # lazy: brax is heavy to import

    _fluid_on_new_jax()
    env = brax_envs.get_environment(env_name)

    @jax.jit
    def reset(key: jax.Array):
        state = env.reset(key)
        return state.obs, state

    obs = jax.eval_shape(lambda: reset(jax.random.key(0))[0])  # one trace, for every program
    spec = EnvSpec(
        f"{PREFIX}/{env_name}",
        obs.shape,
        False,
        env.action_size,
        (-1.0,) * env.action_size,
        (1.0,) * env.action_size,
        EPISODE_LENGTH,
    )

    def step(state, action: jax.Array):
        nxt = env.step(state, action)
        return nxt.obs, nxt.replace(done=jnp.zeros_like(nxt.done)), nxt.reward, nxt.done > 0.5

    reset_one, step_batch, step_batch_no_reset = auto_reset(reset, step, EPISODE_LENGTH)
    return EnvParts(spec, reset_one, step_batch, env, step_batch_no_reset)
