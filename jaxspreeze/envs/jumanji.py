"""The Jumanji family: ``jumanji/<Id>`` (InstaDeep's JAX suite, ``jumanji.make(id)``).

Each env is wrapped the way :mod:`jaxspreeze.envs.jaxenv` wraps a Jumanji-style object
(:func:`~jaxspreeze.envs.jaxenv.jumanji_parts`): its structured observation (a NamedTuple
of arrays) flattened to one float32 vector with the legal-action mask last
(:attr:`EnvSpec.action_mask`, :mod:`jaxspreeze.algos.masks`: the policies never pick an
illegal action), multi-discrete actions with a joint mask (Minesweeper's row and column)
taken as one discrete action over their product, reset by
:func:`~jaxspreeze.envs.base.auto_reset` at the env's ``time_limit`` (1000 steps for the
envs without one; Jumanji's own time limits end with discount 0: terminations, as its
step says). The ids (:func:`names`) are jumanji's registry; the ones trained
(:func:`available`) leave out :data:`REFUSED`: the multi-agent envs (one action per agent)
and the one that downloads its levels when built, each refused with one line saying why.

Jumanji is an optional extra: without it a ``jumanji/`` id is one line naming
:data:`INSTALL`.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib
import importlib.util
from typing import Any

import jax
import numpy as np

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.envs import jaxenv
from jaxspreeze.envs.base import EnvParts

PREFIX = "jumanji"
INSTALL = 'pip install "jaxspreeze[jumanji]"'
_AGENTS = "multi-agent (one action per agent); jaxspreeze trains one agent per env"
# the registered ids jaxspreeze does not take, and why (jumanji 1.1.2)
REFUSED = {
    "Cleaner-v0": _AGENTS,
    "Connector-v3": _AGENTS,
    "JobShop-v0": "one action per machine (a joint action over 21^10 choices)",
    "LevelBasedForaging-v0": _AGENTS,
    "MMST-v0": _AGENTS,
    "MultiCVRP-v0": _AGENTS,
    "RobotWarehouse-v0": _AGENTS,
    "SearchAndRescue-v0": _AGENTS,
    "Sokoban-v0": "it downloads its levels from Hugging Face when built (jaxspreeze does "
    "not download at run time)",
}


FIGURE_INCHES = 3.2  # the side of a rendered frame's figure (320 pixels at matplotlib's 100 dpi)


def installed() -> bool:
    """Whether ``jumanji`` can be imported (without importing it)."""
    return importlib.util.find_spec("jumanji") is not None


def _jumanji() -> Any:
    """The ``jumanji`` package, or the error that gives its install command."""
    if not installed():
        raise UnknownEnvError(
            f"{PREFIX}/ environments need Jumanji, which is not installed: {INSTALL}"
        )
    return importlib.import_module("jumanji")


@functools.cache
def names() -> tuple[str, ...]:
    """Every id jumanji registers, sorted (the family table's static ids); ``()`` when
    jumanji is not installed."""
    if not installed():
        return ()
    return tuple(sorted(_jumanji().registered_environments()))


def available() -> tuple[str, ...]:
    """The ids jaxspreeze trains: :func:`names` less :data:`REFUSED`."""
    return tuple(n for n in names() if n not in REFUSED)


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` saying why ``jumanji/<env_name>`` cannot load: jumanji
    missing (its install command), an id jaxspreeze does not take (why), or an unknown id
    (the nearest ones)."""
    _jumanji()
    full = f"{PREFIX}/{env_name}"
    if env_name in REFUSED:
        raise UnknownEnvError(f"{full} is not taken: {REFUSED[env_name]}")
    if env_name not in names():
        lower = {n.lower(): n for n in available()}
        near = [lower[n] for n in difflib.get_close_matches(env_name.lower(), lower, n=3)]
        hint = f"did you mean {', '.join(f'{PREFIX}/{n}' for n in near)}? " if near else ""
        raise UnknownEnvError(
            f"unknown environment {full!r}; {hint}Jumanji ids: "
            + ", ".join(f"{PREFIX}/{n}" for n in available())
        )


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``jumanji/<env_name>``."""
    check(env_name)
    return jaxenv.jumanji_parts(_jumanji().make(env_name), f"{PREFIX}/{env_name}")


def frames(render_state: Any, states: Any) -> np.ndarray:
    """The RGB frames ``[T, H, W, 3]`` (uint8) of the adapter's states stacked ``[T, ...]``
    (the env's own ``State``), drawn by the env's own viewer (Jumanji's matplotlib viewers)
    in its ``rgb_array`` mode, on a :data:`FIGURE_INCHES` figure; ValueError (one line)
    for an env whose viewer draws no RGB frames."""
    env = render_state
    viewer = getattr(env, "_viewer", None) or getattr(env, "viewer", None)
    if not (hasattr(viewer, "render") and hasattr(viewer, "_display_rgb_array")):
        raise ValueError(
            f"its viewer ({type(viewer).__name__}) has no rgb_array mode (Jumanji's "
            "MatplotlibViewer) to draw frames with"
        )
    drawer = copy.copy(viewer)  # the env's own viewer keeps its mode and size
    drawer._display = drawer._display_rgb_array
    if hasattr(drawer, "figure_size"):
        drawer.figure_size = (FIGURE_INCHES, FIGURE_INCHES)
    host = jax.device_get(states)
    count = len(jax.tree.leaves(host)[0])
    drawn = []
    try:
        for t in range(count):  # a copy of each: the viewer draws every frame into one buffer
            frame = drawer.render(jax.tree.map(lambda x, t=t: x[t], host))
            drawn.append(np.array(np.asarray(frame)[..., :3], np.uint8))
    finally:
        drawer.close()
    return np.stack(drawn)
