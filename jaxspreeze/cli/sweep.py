"""``jaxspreeze sweep [train flags] --grid FIELD=V1,V2,... --sample FIELD=LAW:LO:HI --members N``.

A population of members that differ in the chosen algorithm's member fields (learning
rates, gamma, tau, noise scales, clip ranges, loss coefficients, ...: docs/sweeps.md), trained in one program: the train command's
flags plus ``--grid`` (repeatable; the product of all grids), ``--sample`` (repeatable;
``log-uniform:LO:HI`` or ``uniform:LO:HI``, ``--members`` draws per grid point, from
``--seed``). A TOML preset may hold a ``[sweep]`` table (``grid = {"sac.actor_lr" =
[...]}``, ``sample = {...}``, ``members = N``); flags add to it. A field that changes the
program or the shapes is refused with one line naming it (exit 2) before anything is
compiled. A population run resumes like any run: ``jaxspreeze train --resume RUN_DIR``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from jaxspreeze.cli.args import Group, option_value, parse_grouped
from jaxspreeze.cli.train import RUN_GROUPS, TrainArgs, train
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Repeated = Annotated[tuple[str, ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="FIELD=...")]

DESCRIPTION = (
    "Train a population in one program: members that differ in the algorithm's member fields "
    "(learning rates, gamma, tau, noise scales, clip ranges, loss coefficients, ...), each with "
    "--num-seeds seeds. The train command's flags "
    "plus --grid/--sample/--members (docs/sweeps.md); per member: metrics columns, a row of "
    "summary.json's members table and policy-<m>.msgpack."
)


@dataclass
class SweepArgs(TrainArgs):
    """The options of ``jaxspreeze sweep``: train's and the population's."""

    grid: Repeated = ()
    """FIELD=V1,V2,...: the population is the product of all grids. FIELD is a
    member field of the chosen algorithm: sac.actor_lr, sac.actor-lr or actor_lr."""
    sample: Repeated = ()
    """FIELD=log-uniform:LO:HI or FIELD=uniform:LO:HI: --members draws per grid
    point, from --seed."""
    members: int = 0
    """Members drawn per grid point with --sample (0: the [sweep] table's, else 1)."""


# train's boxes of --help, the population's with sweep's own flags
SWEEP_GROUPS = tuple(
    Group(g.title, g.about, ("grid", "sample", "members", *g.fields))
    if g.title == "population"
    else g
    for g in RUN_GROUPS
)


def _table(preset: str | None) -> tuple[RunConfig, dict[str, Any]]:
    """The preset's RunConfig and its ``[sweep]`` table (``{}`` without one)."""
    if not preset or not preset.endswith(".toml") or not Path(preset).is_file():
        return (config.load(preset) if preset else RunConfig()), {}
    try:
        data = tomllib.loads(Path(preset).read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("config", f"{preset} is not valid TOML: {e}") from None
    table = data.pop("sweep", {})
    if not isinstance(table, dict) or set(table) - {"grid", "sample", "members"}:
        raise ConfigError("config", f"{preset}: [sweep] holds grid, sample and members only")
    _check_table(preset, table)
    return config.from_dict(data), table


def _check_table(preset: str, table: dict[str, Any]) -> None:
    """ConfigError naming the file for a ``[sweep]`` value of the wrong type: ``grid`` a
    table of lists of numbers, ``sample`` a table of strings, ``members`` an integer >= 1
    (a string grid would be split into its characters, a number not iterated at all)."""
    where = f"{preset}: [sweep]"
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    examples = {
        "grid": "grid = {gamma = [0.9, 0.99]}",
        "sample": 'sample = {tau = "uniform:0.001:0.01"}',
    }
    for key, example in examples.items():
        if not isinstance(table.get(key, {}), dict):
            raise ConfigError("config", f"{where} {key} must be a table, e.g. {example}; got "
                              f"{table[key]!r}")  # fmt: skip
    for name, values in table.get("grid", {}).items():
        if not isinstance(values, list) or not values or not all(map(number, values)):
            raise ConfigError("config", f"{where} grid.{name} must be a list of numbers, e.g. "
                              f"[0.005, 0.01]; got {values!r}")  # fmt: skip
    for name, law in table.get("sample", {}).items():
        if not isinstance(law, str):
            raise ConfigError("config", f"{where} sample.{name} must be a string such as "
                              f"\"log-uniform:1e-4:1e-2\"; got {law!r}")  # fmt: skip
    members = table.get("members", 1)
    if not isinstance(members, int) or isinstance(members, bool) or members < 1:
        raise ConfigError("config", f"{where} members must be an integer >= 1; got {members!r}")


def parse(argv: Sequence[str]) -> tuple[SweepArgs, RunConfig]:
    """The options and the population's RunConfig (refusals: ConfigError, before JAX)."""
    from jaxspreeze.run.sweeping import population_config

    base, table = _table(option_value(argv, "--config"))
    config.check_types(base)
    default = SweepArgs(run=base)
    args = parse_grouped(
        SweepArgs, argv, "jaxspreeze sweep", default, SWEEP_GROUPS, description=DESCRIPTION
    )
    grid = [f"{k}={','.join(map(str, v))}" for k, v in table.get("grid", {}).items()]
    sample = [f"{k}={v}" for k, v in table.get("sample", {}).items()]
    members = args.members or int(table.get("members", 1))
    cfg = population_config(args.run, [*grid, *args.grid], [*sample, *args.sample], members)
    return args, cfg


def main(argv: Sequence[str]) -> int:
    """Train one population; errors reach ``cli.main`` (one line, exit 2 or 1)."""
    argv = list(argv)
    from jaxspreeze.cli.common import fail

    if option_value(argv, "--resume"):
        return fail("--resume: resume a population with `jaxspreeze train --resume RUN_DIR`")
    args, cfg = parse(argv)
    if args.autotune or args.profile:
        return fail("--autotune: tune a single run, then sweep with its sizes")
    from jaxspreeze.core import terminal
    from jaxspreeze.setup.plan import plan

    terminal.quiet_third_party(cfg.env)
    plan(cfg, on_devices=False)  # exit 2 on a bad config or member, before any compile
    if not cfg.population:
        return fail("--grid: give --grid or --sample (a population of one is `jaxspreeze train`)")
    from jaxspreeze.run.sweeping import named

    train(named(cfg), signals="kill", overwrite=args.overwrite)  # sweep-<algo>-<env>-<time>
    return 0
