"""``jaxspreeze envs [FAMILY]``: the env ids of a family (or of every family) on this machine.

With a family, one id a line (``gymnax/Pendulum-v1``, ...), ready for ``--env``; without,
every family under its name and count, and a line for a family that is not installed.
"""

from __future__ import annotations

import os
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
DESCRIPTION = (
    "List the env ids of a family (gymnax, brax, playground, gymnasium, envpool) that load on "
    "this machine, one a line; without FAMILY, every family. Playground: the tasks whose "
    "models are present (the dm_control suite); gymnasium: its whole registry."
)


@dataclass
class EnvsArgs:
    """The options of ``jaxspreeze envs``."""

    family: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FAMILY")] = ""
    """One of gymnax, brax, playground, gymnasium, envpool ('' = every family)."""


def main(argv: Sequence[str]) -> int:
    """Print the env ids; exit 2 for an unknown or missing family."""
    args = parse(EnvsArgs, argv, "jaxspreeze envs", description=DESCRIPTION)
    from jaxspreeze.envs import env_ids
    family = args.family.strip().rstrip("/")
    try:
        if family:
            try:
                ids = env_ids(family)
            except UnknownEnvError as e:
                return fail(str(e))
            print("\n".join(ids))
            return 0
        _print_all()
    except BrokenPipeError:  # `jaxspreeze envs | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


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
