"""``jaxspreeze plot RUN_DIR [RUN_DIR ...] [--out FILE]``: learning-curve and throughput PNGs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import fail

DESCRIPTION = (
    "Learning-curve and throughput PNGs for one run (written into the run directory) or a "
    "comparison of several runs."
)


@dataclass
class PlotArgs:
    """The options of ``jaxspreeze plot``."""

    run_dirs: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run directories."""
    out: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """PNG for a comparison figure (default: one run: its learning_curve.png and throughput.png, a population's members.png, a PBT run's lineage.png; several: comparison.png)."""


def main(argv: Sequence[str]) -> int:
    """Write the figures and print their paths."""
    args = parse(PlotArgs, argv, "jaxspreeze plot", description=DESCRIPTION)
    if not args.run_dirs:
        return fail("RUN_DIR: give at least one run directory")
    from jaxspreeze.sinks.figures import (  # after parsing: JAX, matplotlib
        compare_runs,
        write_run_plots,
    )

    try:
        if args.out is None and len(args.run_dirs) == 1:
            paths = write_run_plots(args.run_dirs[0])
        else:
            paths = [compare_runs(args.run_dirs, args.out or "comparison.png")]
    except (FileNotFoundError, ValueError) as e:
        return fail(str(e))
    for p in paths:
        print(p)
    return 0
