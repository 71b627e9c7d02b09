"""Algorithms: one module each, all exposing ``<Algo>Config``, ``supports``, ``validate``, ``make``."""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ("sac", "td3", "ddpg", "ppo")


def get(name: str) -> ModuleType:
    """The module of algorithm ``name`` (``sac``, ``td3``, ``ddpg`` or ``ppo``)."""
    if name not in NAMES:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {NAMES}")
    return importlib.import_module(f"jaxspreeze.algos.{name}")
