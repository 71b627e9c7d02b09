"""The Navix family: ``navix/<Id>`` (MiniGrid in JAX; navix 0.7.x, the last for Python 3.11).

Navix (``pip install "jaxspreeze[navix]"``) builds each id with ``navix.make(id)``: its
own defaults, a symbolic observation ``[H, W, 3]`` of the whole grid (``uint8``, kept in
that dtype: :attr:`EnvSpec.obs_dtype`) and a step limit of 100 (``navix.make``'s
``max_steps``). Navix's ``step`` resets one call *after* an episode ends (the action of
that call is dropped) under a ``lax.cond``, which ``vmap`` turns into computing both the
step and a reset on every call; this adapter steps with the env's ``_step`` (the
transition alone) and resets with :func:`~jaxspreeze.envs.base.auto_reset` (initial states
drawn ahead, the final observation kept) in its lean order (``lean=True``: the start
selected at the next step, inside the step's own kernels; the draws' keys hashed
unrolled): the same transitions, bit for bit, as the plain order on the same keys (Navix's
state is integers), cheaper per step on a CPU (``experiments/results/suites_cpu.md``).
A termination step type (the goal reached, lava) is a termination, a truncation step type
(the step limit) a truncation.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.core.types import EnvSpec, keep_obs
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "navix"
INSTALL = 'pip install "jaxspreeze[navix]"'
TRUNCATION, TERMINATION = 1, 2  # navix.environments.environment.StepType


def installed() -> bool:
    """Whether ``navix`` can be imported (without importing it)."""
    return importlib.util.find_spec("navix") is not None


def _navix() -> Any:
    """The ``navix`` package, or the error that gives its install command."""
    if not installed():
        raise UnknownEnvError(
            f"{PREFIX}/ environments need Navix, which is not installed: {INSTALL}"
        )
    return _import()


@functools.cache
def _import() -> Any:
    import navix  # lazy: optional

    return navix


def names() -> tuple[str, ...]:
    """Every id Navix registers (without the prefix); ``()`` when not installed."""
    return tuple(_navix().registry()) if installed() else ()


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` unless Navix is installed (else its install command)
    and registers ``env_name`` (else the nearest ids)."""
    _navix()  # not installed: raises with the install command
    all_names = names()
    if env_name not in all_names:
        lower = {n.lower(): n for n in all_names}
        near = [lower[n] for n in difflib.get_close_matches(env_name.lower(), lower, n=3)]
        hint = f"did you mean {', '.join(f'{PREFIX}/{n}' for n in near)}? " if near else ""
        raise UnknownEnvError(
            f"unknown environment {f'{PREFIX}/{env_name}'!r}; {hint}see `jaxspreeze envs {PREFIX}`"
        )


def load_env(env_name: str) -> Any:
    """Navix's own env for ``env_name`` (``navix.make``'s defaults), after :func:`check`."""
    check(env_name)
    return _navix().make(env_name)


def _strong(tree: Any) -> Any:
    """``tree`` with no weak-typed leaf (a reset's Python scalars are weak, a step's are not:
    the state a program takes must be the state it returns)."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree)


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``navix/<env_name>`` (reset by
    :func:`~jaxspreeze.envs.base.auto_reset`)."""
    env = load_env(env_name)

    nx = _navix()
    drawn = env.observation_fn in (nx.observations.rgb, nx.observations.rgb_first_person)

    def reset(key):
        timestep = env.reset(key)
        if not drawn:  # the sprites of the grid, read only to draw RGB observations
            state = timestep.state
            empty = state.cache.replace(patches=state.cache.patches[:0])
            timestep = timestep.replace(state=state.replace(cache=empty))
        timestep = _strong(timestep)
        return keep_obs(timestep.observation), timestep

    def step(timestep, action):
        timestep = env._step(timestep, action)  # the transition, without navix's reset
        return (
            keep_obs(timestep.observation),
            timestep,
            timestep.reward.astype(jnp.float32),
            timestep.step_type == TERMINATION,
            timestep.step_type == TRUNCATION,
        )

    obs = jax.eval_shape(reset, jax.random.key(0))[0]
    spec = EnvSpec(
        f"{PREFIX}/{env_name}",
        tuple(obs.shape),
        True,
        len(env.action_set),
        max_episode_steps=int(env.max_steps),
        obs_dtype=str(obs.dtype),
    )
    made = auto_reset(reset, step, int(env.max_steps), lean=True)  # integer grids
    return EnvParts(spec, made.reset_one, made.step_batch, env, made.step_batch_no_reset)


def frames(render_state: Any, states: Any) -> np.ndarray:
    """The RGB frames ``[T, H, W, 3]`` (uint8) of the adapter's states stacked ``[T, ...]``
    (Navix's ``Timestep``), drawn by Navix's own ``observations.rgb`` (the whole grid, its
    sprites; the rendering cache the adapter drops for symbolic observations is rebuilt
    from the grid)."""
    del render_state  # the state holds all that is drawn
    nx = _navix()
    cache = importlib.import_module("navix.rendering.cache").RenderingCache

    def draw(timestep: Any) -> jax.Array:
        state = timestep.state
        return nx.observations.rgb(state.replace(cache=cache.init(state.grid)))

    return np.asarray(jax.jit(jax.vmap(draw))(states), np.uint8)
