"""Command line: ``jaxspreeze train|eval|autotune|bench|render|plot`` (also ``python -m jaxspreeze``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

USAGE = """usage: jaxspreeze COMMAND [options]

commands:
  train      train an agent (default config: SAC on gymnax/Pendulum-v1)
  eval       evaluate the latest checkpoint of a run directory
  autotune   measure this machine and pick num_envs, batch size and update ratio
  bench      run the throughput benchmarks and write bench.json / bench.md
  render     roll out a trained policy to a GIF (gymnax) or HTML (brax)
  plot       learning-curve and throughput PNGs for one or more run directories

`jaxspreeze COMMAND --help` lists a command's options.
"""


def fail(message: str, code: int = 2) -> int:
    """Print one error line to stderr and return the exit code."""
    print(f"jaxspreeze: error: {message}", file=sys.stderr)
    return code


def flag(field_name: str) -> str:
    """The CLI flag of a config field: ``sac.actor_lr`` -> ``--sac.actor-lr``."""
    return "--" + field_name.replace("_", "-")


def pop_option(argv: list[str], name: str) -> str | None:
    """Remove ``--name VALUE`` / ``--name=VALUE`` from argv and return VALUE."""
    for i, arg in enumerate(argv):
        if arg == name:
            if i + 1 >= len(argv):
                raise SystemExit(fail(f"{name} needs a value"))
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        if arg.startswith(name + "="):
            del argv[i]
            return arg.split("=", 1)[1]
    return None


def parse_train_args(argv: Sequence[str], base_file: str | Path | None = None):
    """Parse ``train`` options into a RunConfig (``--config FILE`` supplies the defaults).

    ``base_file`` (e.g. a run's config.json when resuming) is used when ``--config`` is not.
    """
    import tyro

    from jaxspreeze.config import RunConfig, load

    argv = list(argv)
    preset = pop_option(argv, "--config") or base_file
    base = load(preset) if preset else RunConfig()
    return tyro.cli(
        RunConfig,
        default=base,
        args=argv,
        prog="jaxspreeze train",
        description="Train an actor-critic agent. `--config FILE` loads a TOML preset "
        "(see experiments/); flags given after it override it.",
    )


TRAIN_EXTRA_HELP = """
extra train options:
  --config FILE      TOML preset (or a run's config.json) supplying the defaults
  --autotune         probe this machine first and train with the chosen num_envs,
                     batch size, grad steps and chunk length (flags you set are kept)
  --profile FILE     reuse the choice of an earlier `jaxspreeze autotune` (autotune.json)
  --resume RUN_DIR   continue a run from its latest checkpoint (its config.json gives the
                     defaults; e.g. raise --total-steps to train longer)
"""


def cmd_train(argv: Sequence[str]) -> int:
    """``jaxspreeze train [--config FILE] [--autotune | --profile FILE] [flags]``."""
    import dataclasses

    from jaxspreeze.config import validate
    from jaxspreeze.errors import ConfigError

    argv = list(argv)
    if "-h" in argv or "--help" in argv:
        print(TRAIN_EXTRA_HELP)
    autotune = "--autotune" in argv
    argv = [a for a in argv if a != "--autotune"]
    profile = pop_option(argv, "--profile")
    resume = pop_option(argv, "--resume")
    if resume and not (Path(resume) / "config.json").is_file():
        return fail(f"--resume: {resume} is not a run directory (no config.json in it)")
    if resume and (autotune or profile):
        return fail("--resume: a resumed run keeps its sizes; drop --autotune/--profile")
    if autotune and profile:
        return fail("--profile: give either --autotune (probe now) or --profile FILE, not both")
    try:
        cfg = parse_train_args(argv, Path(resume) / "config.json" if resume else None)
        validate(cfg)
        tuned: dict | None = None
        if autotune or profile:
            from jaxspreeze import autotune as autotune_lib

            pinned = autotune_lib.pinned_fields(argv)
            if profile:
                cfg = autotune_lib.apply_profile(cfg, profile, pinned)
            if autotune:
                from jaxspreeze.trainer import default_run_name

                cfg = dataclasses.replace(cfg, run_name=cfg.run_name or default_run_name(cfg))
                out_dir = Path(cfg.logdir) / cfg.run_name
                cfg, prof = autotune_lib.tune(cfg, out_dir=out_dir, pinned=pinned)
                tuned = prof["choice"]
            print(
                "autotune choice: "
                + ", ".join(f"{k}={getattr(cfg, k)}" for k in autotune_lib.TUNED)
            )
    except ConfigError as e:
        return fail(f"{flag(e.field)}: {str(e).split(': ', 1)[1]}")
    from jaxspreeze.errors import NonFiniteError
    from jaxspreeze.trainer import train

    try:
        result = train(cfg, resume=resume, signals="kill")
    except ConfigError as e:
        return fail(f"{flag(e.field)}: {str(e).split(': ', 1)[1]}")
    except NonFiniteError as e:
        return fail(str(e), code=1)
    if autotune or profile:
        _record_tuning(result.run_dir, cfg, tuned, profile)
    return 0


def _record_tuning(run_dir: Path, cfg, choice: dict | None, profile: str | None) -> None:
    """Add the autotuned sizes (and where they came from) to the run's summary.json."""
    import json
    import os

    path = Path(run_dir) / "summary.json"
    summary = json.loads(path.read_text())
    summary["autotune"] = {
        "source": profile or "autotune",
        "num_envs": cfg.num_envs,
        "batch_size": cfg.batch_size,
        "grad_steps": cfg.grad_steps,
        "chunk_iterations": cfg.chunk_iterations,
        "choice": choice,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, path)


def _lazy(module: str) -> Callable[[Sequence[str]], int]:
    """A command implemented by ``jaxspreeze.<module>.main(argv) -> int``, imported on use."""

    def run(argv: Sequence[str]) -> int:
        import importlib

        return importlib.import_module(f"jaxspreeze.{module}").main(argv)

    return run


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "train": cmd_train,
    "eval": _lazy("checkpoint"),
    "autotune": _lazy("autotune"),
    "bench": _lazy("bench"),
    "render": _lazy("render"),
    "plot": _lazy("plots"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxspreeze`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}; choose one of {', '.join(COMMANDS)}")
    return COMMANDS[command](rest)


if __name__ == "__main__":
    sys.exit(main())
