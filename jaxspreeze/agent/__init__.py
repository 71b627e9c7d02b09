"""A trained policy: saved, loaded, evaluated, rendered (``jaxspreeze.load``)."""

from __future__ import annotations

__all__ = ["Agent", "load"]


def __getattr__(name: str):
    # ``from jaxspreeze.agent import load`` (the flat layout's path) without importing JAX
    # for the package's other modules
    if name in __all__:
        from jaxspreeze.agent import agent

        return getattr(agent, name)
    raise AttributeError(name)
