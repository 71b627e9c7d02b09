"""The algorithm registry: the one list of algorithms.

Each ``algos/<name>.py`` exports one ``SPEC`` (an :class:`~jaxspreeze.algos.base.AlgoSpec`:
its config class, on-policy or not, run-level defaults, ``supports``, ``validate``,
``make``). Adding an algorithm is its own module, one line in ``_SPECS`` and its tests:
RunConfig's ``--algo`` choices, its ``[<name>]`` section and the per-algorithm defaults
all come from here.
"""

from __future__ import annotations

from jaxspreeze.algos import ddpg, fastsac, fasttd3, ppo, sac, td3
from jaxspreeze.algos.base import AlgoSpec
from jaxspreeze.errors import ConfigError

_SPECS: tuple[AlgoSpec, ...] = (
    sac.SPEC,
    td3.SPEC,
    ddpg.SPEC,
    ppo.SPEC,
    fasttd3.SPEC,
    fastsac.SPEC,
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
