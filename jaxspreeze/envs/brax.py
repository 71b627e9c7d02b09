"""The brax family: ``brax/<name>``, reset by :func:`~jaxspreeze.envs.base.auto_reset`.

brax's own AutoResetWrapper returns each env to a cached first state and drops the final
observation; here new episodes start from freshly drawn ``env.reset`` states (a new
target for reacher, a new object position for pusher) and ``final_obs`` is kept.

The observation size is read from the abstract shape of the jitted reset the run uses
anyway (``jax.eval_shape``: one trace, reused by every program), not from brax's
``env.observation_size``, which resets the env eagerly: hundreds of ops, each compiled on
its own (halfcheetah: about 50 distinct programs, tens of seconds on a CPU, too small for
the persistent compilation cache).
"""

from __future__ import annotations

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


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``brax/<env_name>``."""
    from brax import envs as brax_envs  # lazy: brax is heavy to import

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
