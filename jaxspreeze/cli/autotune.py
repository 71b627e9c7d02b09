"""``jaxspreeze autotune [--out DIR] [train flags]``: probe this machine, choose, write the profile.

Measures env steps/s over num_envs and the time of a gradient step over batch sizes for
the configured algo/env, and picks num_envs, batch_size, grad_steps and chunk_iterations
that keep the algorithm's gradient steps per env step (the batch grows only while a step
costs no more time; num_envs by predicted wall time for the budget). Writes
DIR/autotune.json (reuse it with ``jaxspreeze train --profile DIR/autotune.json``),
autotune.md and autotune.png. Flags you set (e.g. ``--batch-size 512``) are pinned; the
probe's time is bounded by ``--autotune-budget-s`` (default 30).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from jaxspreeze.cli.train import parse_run_args, pinned_fields
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup.config import RunConfig

DESCRIPTION = (
    "Measure env steps/s over num_envs and the time of a gradient step over batch sizes on "
    "this machine for the configured algo/env; pick num_envs, batch_size, grad_steps and "
    "chunk_iterations that keep the algorithm's gradient steps per env step (the batch grows "
    "only while a step costs no more time, num_envs by predicted wall time); write "
    "DIR/autotune.json (reuse it with `jaxspreeze train --profile DIR/autotune.json`), "
    "autotune.md and autotune.png. Flags you set (e.g. --batch-size 512) are pinned; the "
    "probe's time is bounded by --autotune-budget-s (default 30). Host envs (gymnasium/<id>, "
    "envpool/<task>): the sampling workers' env steps/s over --host-workers x --num-envs and "
    "the learner's over batch sizes; the run goes at the slower side, at the kept replay ratio."
)


@dataclass
class AutotuneArgs:
    """The options of ``jaxspreeze autotune``: train's, and where to write."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")] = field(default_factory=RunConfig)
    out: Annotated[str, tyro.conf.arg(metavar="DIR")] = "."
    """Folder for autotune.json, autotune.md and autotune.png."""
    config: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """TOML preset (or a run's config.json) supplying the defaults."""


def main(argv: Sequence[str]) -> int:
    """Probe, choose and write the profile; a ConfigError reaches ``cli.main`` (exit 2)."""
    argv = list(argv)
    args = parse_run_args(AutotuneArgs, argv, "jaxspreeze autotune", description=DESCRIPTION)
    from jaxspreeze import autotune  # after parsing: a refused command line does not wait

    out = Path(args.out)
    if out.suffix == ".json" or out.is_file():
        raise ConfigError(
            "out",
            f"{args.out!r} names a file; --out takes a folder (autotune.json, autotune.md "
            "and autotune.png are written in it)",
        )
    autotune.tune(args.run, out_dir=out, pinned=pinned_fields(argv))
    print(f"train with it: jaxspreeze train --profile {out / 'autotune.json'}")
    return 0
