"""``jaxspreeze envs [FAMILY] [--all]``: the env families, or the env ids of one, on this machine.

With a family, its ids one a line (``gymnax/Pendulum-v1``, ...), ready for ``--env``;
without, one line per family of the table (its name, whether it steps on the device or the
host, how many ids load here, and ``installed`` or the ``pip install`` that adds it);
``--all``, every family's ids under its name.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import fail
from jaxspreeze.core import envids
from jaxspreeze.core.errors import UnknownEnvError

# the env registry (and JAX) is imported in main, after parsing
FLAGS = (tyro.conf.FlagCreatePairsOff,)  # a bool option is one flag (no --no- pair)
DESCRIPTION = (
    f"List the env ids of a family ({', '.join(envids.FAMILIES)}) that load on this "
    "machine, one a line; without FAMILY, one line per family (device or host, how many "
    "ids, installed or the pip install that adds it); --all, every family's ids. "
    "Playground: the tasks whose models are present (the dm_control suite); xminigrid: the "
    "MiniGrid ids (no download); gymnasium: its whole registry."
)
INSTALL = re.compile(r"pip install \S+")  # the install command inside a family's refusal


@dataclass
class EnvsArgs:
    """The options of ``jaxspreeze envs``."""

    family: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FAMILY")] = ""
    """A family of the table (`jaxspreeze envs` names them; '' = a line per family)."""
    all: bool = False
    """Without FAMILY: every family's ids, under its name (not a line per family)."""


def main(argv: Sequence[str]) -> int:
    """Print the families or the env ids; exit 2 for an unknown or missing family."""
    args = parse(EnvsArgs, argv, "jaxspreeze envs", markers=FLAGS, description=DESCRIPTION)
    from jaxspreeze.envs import env_ids

    family = args.family.strip().rstrip("/")
    try:
        if family:
            try:
                ids = env_ids(family)
            except UnknownEnvError as e:
                return fail(str(e))
            print("\n".join(ids))
        elif args.all:
            _print_all()
        else:
            _print_summary()
    except BrokenPipeError:  # `jaxspreeze envs | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def summary_lines() -> list[str]:
    """One line per family of the table, in its order: name, kind, ids here, installed or
    the install command (the family's own refusal when it names none)."""
    from jaxspreeze.envs import env_ids

    width = max(len(n) for n in envids.FAMILIES)
    lines = []
    for name, entry in envids.FAMILIES.items():
        kind = "host" if entry.host else "device"
        try:
            count, state = str(len(env_ids(name))), "installed"
        except UnknownEnvError as e:  # not installed: its install command
            found = INSTALL.search(str(e))
            count, state = "-", f"not installed: {found.group(0)}" if found else str(e)
        lines.append(f"{name:<{width}}  {kind:<6}  {count:>5} ids  {state}")
    return lines


def _print_summary() -> None:
    print("\n".join(summary_lines()))
    print("`jaxspreeze envs FAMILY` lists a family's ids; `jaxspreeze envs --all` every family's")


def _print_all() -> None:
    from jaxspreeze.envs import env_ids

    for name in envids.FAMILIES:  # every family of the table, in its order
        try:
            ids = env_ids(name)
        except UnknownEnvError as e:  # not installed: the line with its install command
            print(f"{name}: {e}")
            continue
        print(f"{name} ({len(ids)}):")
        print("\n".join(f"  {i}" for i in ids))
