"""The XLand-MiniGrid family: ``xminigrid/<Id>`` (its MiniGrid ids, which run offline).

XLand-MiniGrid (``pip install "jaxspreeze[xminigrid]"``) registers two kinds of id: the
``MiniGrid-*`` tasks, whose layout and goal are built into the env, and the
``XLand-MiniGrid-R*`` meta-RL grids, whose goal and rules come from a benchmark of rulesets
that ``xminigrid.load_benchmark`` downloads from HuggingFace at run time. The first kind is
this family; an ``XLand-MiniGrid-*`` id is refused, in one line naming the benchmark it
needs, before JAX compiles anything (with no ruleset its goal can never be reached).

The env's step does not reset (``reset(params, key) -> TimeStep``, ``step(params,
timestep, action) -> TimeStep``): :func:`~jaxspreeze.envs.base.auto_reset` resets it, from
initial states drawn ahead (a new layout, position and direction where the task samples
them), the final observation kept for bootstrapping, in its plain order. The lean order
(``lean=True``, Navix's and Craftax's) steps the same transitions bit for bit here (the
grids are integers; rollouts of Empty-8x8, DoorKey-5x5 and FourRooms compared) but took
1-12% more CPU time per step on a CPU at 64 and 256 envs, in every interleaved measurement
(``experiments/results/suites_cpu.md``). A last step with discount 0 (the goal reached,
or a trap) is a termination; the env's own step limit (``params.max_steps``) is a
truncation. Observations are the agent's egocentric view ``[view, view, 2]`` (tile and
colour ids), kept in their own dtype (``uint8``, :attr:`EnvSpec.obs_dtype`).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.core.types import EnvSpec, keep_obs
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "xminigrid"
INSTALL = 'pip install "jaxspreeze[xminigrid]"'
BENCHMARK_IDS = "XLand-MiniGrid-"  # the ids whose rules come from a downloaded benchmark
LAST = 2  # xminigrid.types.StepType.LAST


def installed() -> bool:
    """Whether ``xminigrid`` can be imported (without importing it)."""
    return importlib.util.find_spec("xminigrid") is not None


def _xminigrid() -> Any:
    """The ``xminigrid`` package, or the error that gives its install command."""
    if not installed():
        raise UnknownEnvError(
            f"{PREFIX}/ environments need XLand-MiniGrid, which is not installed: {INSTALL}"
        )
    return _import()


@functools.cache
def _import() -> Any:
    import xminigrid  # lazy: optional

    return xminigrid


def names() -> tuple[str, ...]:
    """Every id XLand-MiniGrid registers (without the prefix); ``()`` when not installed."""
    return tuple(_xminigrid().registered_environments()) if installed() else ()


def available() -> tuple[str, ...]:
    """The ids that run offline: the ``MiniGrid-*`` ones."""
    return tuple(n for n in names() if not n.startswith(BENCHMARK_IDS))


def _data_path() -> str:
    """Where XLand-MiniGrid keeps (and would download) its benchmarks."""
    return os.environ.get("XLAND_MINIGRID_DATA", os.path.expanduser("~/.xland_minigrid"))


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` saying why ``xminigrid/<env_name>`` cannot load: the
    package missing (its install command), an unknown id (the nearest ones), or an id whose
    rules come from a benchmark that would be downloaded (what it needs). Nothing is
    downloaded."""
    full = f"{PREFIX}/{env_name}"
    all_names = _xminigrid().registered_environments()
    if env_name not in all_names:
        lower = {n.lower(): n for n in all_names}
        near = [lower[n] for n in difflib.get_close_matches(env_name.lower(), lower, n=3)]
        hint = f"did you mean {', '.join(f'{PREFIX}/{n}' for n in near)}? " if near else ""
        raise UnknownEnvError(f"unknown environment {full!r}; {hint}see `jaxspreeze envs {PREFIX}`")
    if env_name.startswith(BENCHMARK_IDS):
        raise UnknownEnvError(
            f"{full} draws its goal and rules from a benchmark of rulesets "
            "(xminigrid.load_benchmark, e.g. 'trivial-21k', downloaded from HuggingFace into "
            f"{_data_path()}), which jaxspreeze does not load: choose a MiniGrid id, e.g. "
            f"{PREFIX}/MiniGrid-Empty-8x8 (`jaxspreeze envs {PREFIX}`)"
        )


def load_env(env_name: str) -> tuple[Any, Any]:
    """XLand-MiniGrid's own ``(env, params)`` for ``env_name``, after :func:`check`."""
    check(env_name)
    return _xminigrid().make(env_name)


def _strong(tree: Any) -> Any:
    """``tree`` with no weak-typed leaf (a reset's Python scalars are weak, a step's are not:
    the state a program takes must be the state it returns)."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree)


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``xminigrid/<env_name>`` (reset by
    :func:`~jaxspreeze.envs.base.auto_reset`)."""
    env, params = load_env(env_name)
    max_steps = int(params.max_steps)

    def reset(key):
        timestep = _strong(env.reset(params, key))
        return keep_obs(timestep.observation), timestep

    def step(timestep, action):
        timestep = env.step(params, timestep, action)
        last = timestep.step_type == LAST
        ends = timestep.discount == 0
        return (
            keep_obs(timestep.observation),
            timestep,
            timestep.reward.astype(jnp.float32),
            last & ends,
            last & ~ends,
        )

    obs = jax.eval_shape(reset, jax.random.key(0))[0]
    spec = EnvSpec(
        f"{PREFIX}/{env_name}",
        tuple(obs.shape),
        True,
        int(env.num_actions(params)),
        max_episode_steps=max_steps,
        obs_dtype=str(obs.dtype),
    )
    made = auto_reset(reset, step, max_steps)  # plain order: lean is slower here (above)
    return EnvParts(spec, made.reset_one, made.step_batch, (env, params), made.step_batch_no_reset)


def frames(render_state: Any, states: Any) -> np.ndarray:
    """The RGB frames ``[T, H, W, 3]`` (uint8) of the adapter's states stacked ``[T, ...]``
    (XLand-MiniGrid's ``TimeStep``), drawn by its own renderer (``env.render(params,
    timestep)`` in ``rgb_array`` mode: the whole grid, the agent's view highlighted)."""
    env, params = render_state
    params = params.replace(render_mode="rgb_array")
    host = jax.device_get(states)
    count = len(jax.tree.leaves(host)[0])
    drawn = [env.render(params, jax.tree.map(lambda x, t=t: x[t], host)) for t in range(count)]
    return np.stack([np.asarray(f, np.uint8)[..., :3] for f in drawn])
