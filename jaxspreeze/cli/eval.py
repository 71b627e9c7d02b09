"""``jaxspreeze eval RUN_DIR [--episodes N] [--seed S] [--json]``: evaluate a run's checkpoint.

RUN_DIR is a run directory (its newest intact checkpoint is evaluated; damaged newer ones
are named on stderr) or one checkpoint of it (``RUN/checkpoints/000000021000``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import at_least_one, fail, member_slots
from jaxspreeze.core.errors import CheckpointError, ConfigError

DESCRIPTION = (
    "Evaluate the newest intact checkpoint of a run directory (or the checkpoint directory "
    "given): one deterministic episode per env, N envs, every seed of the run."
)

FLAGS = (tyro.conf.FlagCreatePairsOff,)  # a bool option is one flag (no --no- pair)


@dataclass
class EvalArgs:
    """The options of ``jaxspreeze eval``."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """A run directory (holds checkpoints/) or one of its checkpoints."""
    episodes: int | None = None
    """Episodes per seed (default: the run's eval_episodes)."""
    seed: int | None = None
    """Evaluation seed."""
    member: int | None = None
    """A population's member (jaxspreeze sweep; RUN_DIR a run directory): its seeds only."""
    as_json: Annotated[bool, tyro.conf.arg(name="json")] = False
    """Print one JSON line."""


def main(argv: Sequence[str]) -> int:
    """Evaluate and print the return per seed (or one JSON line)."""
    args = parse(EvalArgs, argv, "jaxspreeze eval", markers=FLAGS, description=DESCRIPTION)
    if code := at_least_one(episodes=args.episodes):
        return code
    try:  # a population's member: checked before anything is evaluated
        slots = None if args.member is None else member_slots(args.run_dir, args.member)
    except ValueError as e:
        return fail(str(e))
    import numpy as np  # after parsing: a refused command line does not wait for JAX

    from jaxspreeze.run.checkpoint_eval import evaluate_checkpoint

    try:
        result = evaluate_checkpoint(args.run_dir, args.episodes, args.seed)
    except (CheckpointError, ConfigError) as e:
        return fail(str(e))
    for path, why in result["damaged"]:
        print(f"jaxspreeze: warning: skipped damaged checkpoint {path}: {why}", file=sys.stderr)
    if slots is not None:  # a population's member: its slots, in the JSON too
        for name in ("return_mean", "return_std", "length_mean"):
            result[name] = result[name][slots.start : slots.stop]
        result["member"] = args.member
    if args.as_json:
        print(json.dumps(result))
        return 0
    means, stds = result["return_mean"], result["return_std"]
    if slots is not None:
        print(f"member {args.member} (its seeds):")
    print(f"checkpoint: {result['checkpoint']} ({result['env_steps']} env steps per seed)")
    for i, (m, s) in enumerate(zip(means, stds, strict=True)):
        print(f"  seed {i}: return {m:.2f} +- {s:.2f} over {result['episodes']} episodes")
    if len(means) > 1:
        print(f"  mean over seeds: {np.mean(means):.2f} (std {np.std(means):.2f})")
    return 0
