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
    "given): one deterministic episode per env, N envs, every seed of the run, with the "
    "trainer's protocol (fresh starts from the evaluation seed and the checkpoint's env step)."
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
    """Evaluation seed (default: the run's, its seed + 10000: the run's own evaluation at
    the checkpoint's step, for the same episode count)."""
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
    for path in result["pruned"]:
        print(
            f"jaxspreeze: note: {path} was pruned by the live run while it was read; "
            "evaluated the newest one left",
            file=sys.stderr,
        )
    if slots is not None:  # a population's member: its slots, in the JSON too
        for name in ("return_mean", "return_se", "return_std", "length_mean"):
            result[name] = result[name][slots.start : slots.stop]
        result["member"] = args.member
        result["mean_return"] = float(np.mean(result["return_mean"]))
        result["mean_return_se"] = float(np.sqrt(np.sum(np.square(result["return_se"]))))
        result["mean_return_se"] /= len(result["return_se"])
    if args.as_json:
        print(json.dumps(result))
        return 0
    means, stds, ses = result["return_mean"], result["return_std"], result["return_se"]
    if slots is not None:
        print(f"member {args.member} (its seeds):")
    print(f"checkpoint: {result['checkpoint']} ({result['env_steps']} env steps per seed)")
    print(
        f"protocol: {result['episodes']} episodes per seed, {result['starts']} starts "
        f"(eval_seed {result['eval_seed']}, env step {result['env_steps']})"
    )
    for i, (m, se, s) in enumerate(zip(means, ses, stds, strict=True)):
        print(
            f"  seed {i}: return {m:.2f} ± {se:.2f} s.e. (std {s:.2f}) over "
            f"{result['episodes']} episodes"
        )
    if len(means) > 1:
        print(
            f"  mean over seeds: {result['mean_return']:.2f} ± {result['mean_return_se']:.2f} "
            f"s.e. (std over seeds {np.std(means):.2f})"
        )
    return 0
