"""The algorithm registry: the one list of algorithms, importable without JAX.

Each algorithm is two modules: ``algos/<name>_config.py`` (no JAX) holds its config
dataclass and exports one ``SPEC`` (an :class:`~jaxspreeze.algos.spec.AlgoSpec`: its
config class, on-policy or not, run-level defaults, ``supports``, ``validate``, its member
fields' names and ``maths``, the module of its JAX maths), and ``algos/<name>.py`` (the
maths: ``make`` and ``MEMBER_FIELDS``, the member fields' setters), imported at the first
``SPEC.make(...)``. Adding an algorithm is those two modules, one line in ``_SPECS`` and
its tests: RunConfig's ``--algo`` choices, its ``[<name>]`` section, the per-algorithm
defaults and the command line's early check all come from here.
"""

from __future__ import annotations

from jaxspreeze.algos import (
    ddpg_config,
    dqn_config,
    fastsac_config,
    fasttd3_config,
    ppo_config,
    pqn_config,
    sac_config,
    td3_config,
)
from jaxspreeze.algos.spec import AlgoSpec
from jaxspreeze.core.errors import ConfigError

_SPECS: tuple[AlgoSpec, ...] = (
    sac_config.SPEC,
    td3_config.SPEC,
    ddpg_config.SPEC,
    ppo_config.SPEC,
    fasttd3_config.SPEC,
    fastsac_config.SPEC,
    pqn_config.SPEC,
    dqn_config.SPEC,
)

NAMES: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
_BY_NAME: dict[str, AlgoSpec] = {spec.name: spec for spec in _SPECS}


def get(name: str) -> AlgoSpec:
    """The spec of algorithm ``name``; ConfigError("algo") for an unknown name."""
    spec = _BY_NAME.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ConfigError("algo", f"unknown algorithm {name!r}; choose one of {', '.join(NAMES)}")
    return spec


def all_specs() -> tuple[AlgoSpec, ...]:
    """Every registered algorithm's spec, in registry order (``NAMES``)."""
    return _SPECS
