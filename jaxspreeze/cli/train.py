"""``jaxspreeze train [--config FILE] [--autotune | --profile FILE] [--resume RUN_DIR] [flags]``.

Every RunConfig field is a flag (``--total-steps``, ``--sac.actor-lr``); ``--config FILE``
(a TOML preset or a run's ``config.json``) supplies the defaults that the flags override.
``--resume RUN_DIR`` continues a run (its config.json supplies the defaults; every flag
that changes a setting is listed, then applied or refused: see :mod:`jaxspreeze.store.resume`);
a run directory that already holds a run is refused unless resumed or ``--overwrite``.
``--coordinator HOST:PORT --num-processes N --process-id I`` (or the environment of
``jaxspreeze launch``, or a SLURM job) makes this process one of N of one data-parallel
run (:mod:`jaxspreeze.setup.distributed`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import tyro

from jaxspreeze.cli.args import Group, option_value, parse_grouped
from jaxspreeze.cli.common import fail
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig

# autotune, distributed, envs, plan, rundir and the trainer are imported after parsing (in
# the functions that use them): a refused command line does not wait for them, and the
# early check (cli/fastcheck.py) reads TrainArgs without JAX

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Flag = Annotated[bool, tyro.conf.FlagCreatePairsOff]  # --autotune (no --no-autotune)


DESCRIPTION = (
    "Train an actor-critic agent. `--config FILE` loads a TOML file of settings (a preset: "
    "keys are the flags' names with underscores, [sac] etc. for an algorithm's section; a "
    "run's config.json also works); flags given with it override it. Example presets ship "
    "in the package's presets/ folder (experiments/presets/ in a source checkout)."
)


@dataclass
class TrainArgs:
    """The options of ``jaxspreeze train``: a RunConfig and where its defaults come from."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")] = field(default_factory=RunConfig)
    config: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """TOML preset (or a run's config.json) supplying the defaults."""
    autotune: Flag = False
    """Probe this machine first and train with the chosen sizes (flags you set are kept)."""
    profile: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """Reuse the choice of an earlier `jaxspreeze autotune` (its autotune.json)."""
    resume: Annotated[str | None, tyro.conf.arg(metavar="RUN_DIR")] = None
    """Continue a run from its newest intact checkpoint (its config.json gives the defaults;
    changed settings are listed, then applied from the first update or refused)."""
    overwrite: Flag = False
    """Replace the run in the run directory, if it holds one (its files are removed)."""
    coordinator: Annotated[str | None, tyro.conf.arg(metavar="HOST:PORT")] = None
    """Join a multi-process run: the address of process 0's coordinator (with
    --num-processes and --process-id; `jaxspreeze launch` and SLURM set them for you)."""
    num_processes: int | None = None
    """Processes in the multi-process run (jax.distributed)."""
    process_id: int | None = None
    """This process's index in the multi-process run, 0 .. N-1 (process 0 writes the run)."""


# The boxes of `train --help` (and `autotune --help`), in order: the everyday flags first.
# Only the help is grouped: every flag keeps its name (no box prefix), default and meaning.
# Each algorithm's section (--sac.*, --td3.*, ...) keeps its own box, after these.
RUN_GROUPS = (
    Group(
        "",
        "",
        (
            *("algo", "env", "total_steps", "seed", "num_seeds", "num_envs", "logdir"),
            *("config", "resume", "eval_every", "eval_episodes", "stop_at_return"),
        ),
    ),
    Group(
        "algorithm",
        "The sizes of an iteration, per seed; unset (None) takes the chosen algorithm's "
        "default. Each algorithm's own hyperparameters are in its box at the end "
        "(--sac.*, --td3.*, --ddpg.*, --ppo.*, --fasttd3.*, --fastsac.*).",
        (
            *("rollout_steps", "grad_steps", "batch_size", "buffer_size"),
            *("learning_starts", "chunk_iterations"),
        ),
    ),
    Group("dict observations", "", ("actor_obs_key", "critic_obs_key")),
    Group("host workers", "", ("host_workers", "host_stall_timeout_s")),
    Group(
        "placement and processes",
        "",
        ("placement", "coordinator", "num_processes", "process_id"),
    ),
    Group(
        "run directory and checkpoints",
        "",
        ("run_name", "overwrite", "checkpoint_every", "keep_checkpoints"),
    ),
    Group("sinks", "", ("sinks",)),
    Group(
        "autotune",
        "Choose num_envs, batch size and update ratio for this machine.",
        ("autotune", "profile", "replay_ratio", "autotune_budget_s"),
    ),
    Group(
        "population",
        "Members that differ in the algorithm's member fields, in one program: `jaxspreeze "
        "sweep` writes them, with --pbt population-based training (docs/sweeps.md).",
        ("population", "pbt", "pbt_interval", "pbt_quantile"),
    ),
    Group(
        "compile and programs",
        "In the environment: JAXSPREEZE_CACHE_DIR, the cache's directory when "
        "--compile-cache is not given; JAXSPREEZE_PROGRAM_CACHE=off, trace every program "
        "and keep none.",
        ("compile_cache", "compile"),
    ),
)

Args = TypeVar("Args")


def parse_run_args(
    cls: type[Args],
    argv: Sequence[str],
    prog: str,
    base_file: str | Path | None = None,
    description: str = DESCRIPTION,
) -> Args:
    """Parse a command whose ``run`` field is a RunConfig (``--config FILE``: its defaults).

    ``base_file`` (e.g. a run's config.json when resuming) is used when ``--config`` is not.
    """
    preset = option_value(argv, "--config") or base_file
    base = config.load(preset) if preset else RunConfig()
    config.check_types(base)  # a wrong type in the file: its one line, before tyro warns
    default = cls(run=base)  # type: ignore[call-arg]
    return parse_grouped(cls, argv, prog, default, RUN_GROUPS, description=description)


def parse_train_args(argv: Sequence[str], base_file: str | Path | None = None) -> RunConfig:
    """Parse ``train`` options into a RunConfig (``--config FILE`` supplies the defaults)."""
    return parse_run_args(TrainArgs, argv, "jaxspreeze train", base_file).run


def pinned_fields(argv: Sequence[str]) -> set[str]:
    """The tuned fields a ``train``-style argv sets explicitly (a flag, or a key of its --config)."""
    from jaxspreeze import autotune

    pinned: set[str] = set()
    for name in autotune.HOST_TUNED:
        flags = {"--" + name.replace("_", "-"), "--" + name}
        if any(a.split("=", 1)[0] in flags for a in argv):
            pinned.add(name)
    preset = option_value(argv, "--config")
    if preset and Path(preset).is_file():
        text = Path(preset).read_text()
        data = json.loads(text) if preset.endswith(".json") else tomllib.loads(text)
        pinned |= {k.replace("-", "_") for k in data} & set(autotune.HOST_TUNED)
    return pinned


def _record_tuning(
    run_dir: Path, cfg: RunConfig, choice: dict[str, Any] | None, profile: str | None
) -> None:
    """Add the autotuned sizes (and where they came from) to the run's summary.json."""
    from jaxspreeze import envs
    from jaxspreeze.store import rundir

    path = rundir.RunDir(Path(run_dir)).summary_file
    summary = json.loads(path.read_text())
    summary["autotune"] = {
        "source": profile or "autotune",
        "num_envs": cfg.num_envs,
        "batch_size": cfg.batch_size,
        "grad_steps": cfg.grad_steps,
        "chunk_iterations": cfg.chunk_iterations,
        **({"host_workers": cfg.host_workers} if envs.is_host_env(cfg.env) else {}),
        "choice": choice,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, path)


def profile_file(profile: str) -> Path:
    """The autotune.json that ``--profile`` names: the file, or the one in a directory."""
    path = Path(profile)
    if path.is_dir():
        if (path / "autotune.json").is_file():
            return path / "autotune.json"
        raise ConfigError(
            "profile",
            f"{path} is a directory without an autotune.json; give the autotune.json that "
            "`jaxspreeze autotune --out DIR` wrote (DIR/autotune.json)",
        )
    if not path.is_file():
        raise ConfigError(
            "profile",
            f"no such file {str(path)!r}; give the autotune.json that `jaxspreeze autotune "
            "--out DIR` wrote (DIR/autotune.json)",
        )
    return path


def train(cfg: RunConfig, **kwargs: Any) -> Any:
    """:func:`jaxspreeze.run.trainer.train`, imported when a run starts (after parsing)."""
    from jaxspreeze.run.trainer import train as run

    return run(cfg, **kwargs)


def main(argv: Sequence[str]) -> int:
    """Train one run; errors reach ``cli.main`` (one line, exit 2 or 1)."""
    argv = list(argv)
    resume = option_value(argv, "--resume")
    if resume and not (Path(resume) / "config.json").is_file():
        return fail(f"--resume: {resume} is not a run directory (no config.json in it)")
    base_file = Path(resume) / "config.json" if resume else None
    try:
        args = parse_run_args(TrainArgs, argv, "jaxspreeze train", base_file)
    except ConfigError as e:
        if base_file is None or option_value(argv, "--config"):
            raise
        raise ConfigError("resume", f"{base_file}: {str(e).split(': ', 1)[1]}") from None
    from jaxspreeze import autotune, envs
    from jaxspreeze.core import terminal
    from jaxspreeze.setup import distributed
    from jaxspreeze.setup.plan import plan
    from jaxspreeze.store import rundir

    if args.resume and (args.autotune or args.profile):
        return fail("--resume: a resumed run keeps its sizes; drop --autotune/--profile")
    if args.resume and args.overwrite:
        return fail("--overwrite: give either --resume (continue the run) or --overwrite")
    if args.autotune and args.profile:
        return fail("--profile: give either --autotune (probe now) or --profile FILE, not both")
    # before anything touches a device: join the other processes (flags, the environment
    # `jaxspreeze launch` sets, or a cluster JAX detects, e.g. SLURM), else run alone
    several = distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    if several and (args.autotune or args.profile):
        return fail("--autotune: tune in one process, then train the processes with its sizes")
    cfg = args.run
    terminal.quiet_third_party(cfg.env)  # the plan builds the env: its warnings once
    plan(cfg, on_devices=False)  # exit 2 on a bad config, before any device is touched
    tuned: dict[str, Any] | None = None
    profile = str(profile_file(args.profile)) if args.profile else None
    if args.autotune or profile:
        pinned = pinned_fields(argv)
        if profile:
            cfg = autotune.apply_profile(cfg, profile, pinned)
        if args.autotune:
            cfg = dataclasses.replace(cfg, run_name=cfg.run_name or rundir.default_run_name(cfg))
            out_dir = Path(cfg.logdir) / cfg.run_name
            # refuse a run directory that holds a run before probing into it
            rundir.check_new(rundir.RunDir(out_dir), args.overwrite)
            cfg, prof = autotune.tune(cfg, out_dir=out_dir, pinned=pinned)
            tuned = prof["choice"]
        fields = autotune.HOST_TUNED if envs.is_host_env(cfg.env) else autotune.TUNED
        print("autotune choice: " + ", ".join(f"{k}={getattr(cfg, k)}" for k in fields))
    result = train(cfg, resume=args.resume, signals="kill", overwrite=args.overwrite)
    if args.autotune or profile:
        _record_tuning(result.run_dir, cfg, tuned, profile)
    return 0
