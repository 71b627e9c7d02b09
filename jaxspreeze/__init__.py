"""jaxspreeze: high-throughput actor-critic RL on one machine, in JAX."""

from __future__ import annotations

__version__ = "0.1.0"

from jaxspreeze.core import moved as _moved

_moved.install()  # the flat layout's import paths (jaxspreeze.config, ...) keep working

__all__ = ["JaxEnv", "RunConfig", "__version__", "load", "sweep", "train"]


def __getattr__(name: str):
    # lazy: `import jaxspreeze` stays cheap; jax and the envs load on first use
    if name == "RunConfig":
        from jaxspreeze.setup.config import RunConfig

        return RunConfig
    if name == "train":
        from jaxspreeze.run.trainer import train

        return train
    if name == "sweep":
        from jaxspreeze.run.sweeping import sweep

        return sweep
    if name == "JaxEnv":
        from jaxspreeze.envs.jaxenv import JaxEnv

        return JaxEnv
    if name == "load":
        from jaxspreeze.agent.agent import load

        return load
    raise AttributeError(name)
