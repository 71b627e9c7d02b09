"""Command line: ``jaxspreeze train|eval|autotune|bench|render|plot`` (also ``python -m jaxspreeze``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

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


def _pop_option(argv: list[str], name: str) -> str | None:
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


def parse_train_args(argv: Sequence[str]):
    """Parse ``train`` options into a RunConfig (``--config FILE`` supplies the defaults)."""
    import tyro

    from jaxspreeze.config import RunConfig, load

    argv = list(argv)
    preset = _pop_option(argv, "--config")
    base = load(preset) if preset else RunConfig()
    return tyro.cli(
        RunConfig,
        default=base,
        args=argv,
        prog="jaxspreeze train",
        description="Train an actor-critic agent. `--config FILE` loads a TOML preset "
        "(see experiments/); flags given after it override it.",
    )


def cmd_train(argv: Sequence[str]) -> int:
    """``jaxspreeze train [--config FILE] [flags]``."""
    from jaxspreeze.config import ConfigError, validate
    from jaxspreeze.devices import PlacementError

    try:
        cfg = parse_train_args(argv)
        validate(cfg)
    except ConfigError as e:
        return fail(f"{flag(e.field)}: {str(e).split(': ', 1)[1]}")
    from jaxspreeze.trainer import train

    try:
        train(cfg)
    except PlacementError as e:
        return fail(str(e))
    except ConfigError as e:
        return fail(f"{flag(e.field)}: {str(e).split(': ', 1)[1]}")
    return 0


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
