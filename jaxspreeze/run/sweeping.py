"""``jaxspreeze.sweep``: train a population of members in one program (Python API).

A thin layer over :func:`jaxspreeze.train`: the grid and the sampled fields become the
config's ``population`` (:mod:`jaxspreeze.setup.population`), and the run's result lists the members
(``result.summary["members"]``, ``result.summary["best_member"]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from jaxspreeze import algos
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.run.trainer import RunResult, train
from jaxspreeze.setup import population as sweep_lib
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.store import rundir

Grid = Mapping[str, Iterable[float]] | Iterable[str]
Sample = Mapping[str, str] | Iterable[str]


def _items(spec: Grid | Sample | None, join: Any) -> list[str]:
    """``{"actor_lr": [1e-3, 3e-4]}`` or ``["actor_lr=1e-3,3e-4"]`` -> the flag's strings."""
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return [f"{k}={join(v)}" for k, v in spec.items()]
    return [str(s) for s in spec]


def _grid_values(values: Any) -> str:
    """A grid entry's values (a list or tuple of numbers) as the flag's ``a,b,c``; a
    string or a scalar is a ConfigError naming ``grid`` (a string would split into its
    characters: ``"01"`` is not ``[0, 1]``)."""
    numbers = isinstance(values, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    )
    if not numbers or not values:
        raise ConfigError(
            "grid", f"each grid entry must be a list of numbers, e.g. [1e-3, 3e-4]; got {values!r}"
        )
    return ",".join(repr(float(v)) for v in values)


def population_config(
    cfg: RunConfig, grid: Grid | None = None, sample: Sample | None = None, members: int = 1
) -> RunConfig:
    """``cfg`` with the population that ``grid`` x ``sample`` (``members`` samples) gives.

    ConfigError (before anything is compiled) for a field that is not a member field of
    ``cfg.algo`` (it changes the program or the shapes), a bad value or distribution.
    """
    spec = algos.get(resolve(cfg).algo)
    g = sweep_lib.parse_grid(spec, _items(grid, _grid_values))
    s = sweep_lib.parse_sample(spec, _items(sample, str))
    values = sweep_lib.members_of(cfg.seed, g, s, members)
    return dataclasses.replace(cfg, population=sweep_lib.encode(values))


def sweep(
    cfg: RunConfig | None = None,
    *,
    grid: Grid | None = None,
    sample: Sample | None = None,
    members: int = 1,
    **train_kwargs: Any,
) -> RunResult:
    """Train every member of a population in one program and return the run's result.

    ``grid``: ``{"actor_lr": [1e-3, 3e-4], "gamma": [0.98, 0.99]}`` (the product of all
    grids; ``"sac.actor_lr"`` also works) or the CLI's strings ``["actor_lr=1e-3,3e-4"]``;
    ``sample``: ``{"actor_lr": "log-uniform:1e-4:1e-2"}`` with ``members`` draws per grid
    point (from ``cfg.seed``). Each member trains ``cfg.num_seeds`` seeds. The result's
    ``summary["members"]`` lists each member's values, final and best return and steps to
    the best; ``summary["best_member"]`` the best; the run directory holds
    ``policy-<m>.msgpack`` for each member; it is named ``sweep-<algo>-<env>-<time>``
    unless ``cfg.run_name`` is set. ``result.final_return`` is the mean over every member's
    seeds (``summary["final_eval_return_per_member"]``: each member's). ``train_kwargs`` go
    to :func:`jaxspreeze.train`.
    """
    cfg = population_config(cfg or RunConfig(), grid, sample, members)
    return train(named(cfg), **train_kwargs)


def named(cfg: RunConfig) -> RunConfig:
    """``cfg`` with a run name that says it is a population (``sweep-<algo>-<env>-<time>``,
    ``pbt-...`` with PBT), unless it has one."""
    if cfg.run_name or not cfg.population:
        return cfg
    kind = "pbt" if cfg.pbt else "sweep"
    return dataclasses.replace(cfg, run_name=f"{kind}-{rundir.default_run_name(cfg)}")
