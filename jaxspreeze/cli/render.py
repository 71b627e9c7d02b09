"""``jaxspreeze render RUN_DIR [--out FILE]``: a trained policy's episode as a GIF or HTML.

The output path goes to stdout; the notes (the OpenGL backend MuJoCo's renderer used, that
the brax HTML viewer needs the internet) go to stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import fail, member_slot

DESCRIPTION = (
    "Roll out a trained policy (deterministic, one episode) to a GIF (every family; brax and "
    "Playground through MuJoCo's renderer on EGL or OSMesa) or brax's HTML viewer (.html; it "
    "loads its JavaScript from the internet)."
)


@dataclass
class RenderArgs:
    """The options of ``jaxspreeze render``."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """A finished run directory."""
    out: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """Output file: .gif (default <run>/render.gif), or .html for brax's online viewer."""
    seed_index: int = 0
    """Which seed's policy (with --member: which of the member's seeds)."""
    member: int | None = None
    """A population's member (jaxspreeze sweep): render its policy (slot member x
    num_seeds + seed_index)."""
    max_steps: int | None = None
    """Cap on the episode length."""
    fps: int = 30
    """GIF frames per second."""


def main(argv: Sequence[str]) -> int:
    """Render and print the output path."""
    args = parse(RenderArgs, argv, "jaxspreeze render", description=DESCRIPTION)
    from jaxspreeze.agent.render import render_run  # after parsing: a refused command line is quick

    try:
        path = render_run(
            args.run_dir,
            args.out,
            seed_index=member_slot(args.run_dir, args.member, args.seed_index),
            max_steps=args.max_steps,
            fps=args.fps,
            say=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except (FileNotFoundError, ValueError) as e:
        return fail(str(e))
    print(path)
    return 0
