"""RunConfig: every knob of a run, validated before anything is compiled or allocated.

The dataclasses here are the CLI (tyro turns each field and its docstring into a flag),
the preset file format (TOML, see ``experiments/``) and the Python API at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jaxspreeze.algos.ddpg import DDPGConfig
from jaxspreeze.algos.ppo import PPOConfig
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.algos.td3 import TD3Config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ALGOS = ("sac", "td3", "ddpg", "ppo")
SINKS = ("console", "jsonl", "csv", "tensorboard", "wandb", "plots")


class ConfigError(ValueError):
    """A bad config value: names the field and says how to fix it."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class RunConfig:
    """A training run. Sizes are per seed; ``--num-seeds K`` trains K agents at once."""

    algo: Literal["sac", "td3", "ddpg", "ppo"] = "sac"
    """Algorithm."""
    env: str = "gymnax/Pendulum-v1"
    """Environment, ``gymnax/<Name>`` or ``brax/<name>``."""
    total_steps: int = 20_000
    """Environment steps to train for (summed over envs, per seed)."""
    num_envs: int = 8
    """Parallel environments (vmapped on the device)."""
    rollout_steps: int = 1
    """Env steps per iteration per env (T); PPO's rollout length."""
    grad_steps: int = 8
    """Gradient steps per iteration (G) for the critic (off-policy algorithms)."""
    batch_size: int = 256
    """Samples per gradient step (off-policy) or per minibatch (PPO)."""
    buffer_size: int = 100_000
    """Replay buffer capacity in transitions (off-policy)."""
    learning_starts: int = 1_000
    """Random-action env steps before the first update (off-policy)."""
    chunk_iterations: int = 250
    """Iterations fused into one jitted chunk (K); the host dispatches once per chunk."""
    seed: int = 0
    """Random seed; seed i of a ``--num-seeds`` run uses ``seed + i``."""
    num_seeds: int = 1
    """Independent agents trained together with vmap in one program."""
    placement: Literal["auto", "single", "split"] = "auto"
    """Device placement: split = actor and critic on two devices, single = one device."""
    eval_every: int = 0
    """Evaluate every this many env steps (0: only at the end)."""
    eval_episodes: int = 16
    """Episodes per evaluation (deterministic policy, vmapped envs)."""
    logdir: str = "runs"
    """Directory that holds run directories."""
    run_name: str = ""
    """Run directory name (default: ``<algo>-<env>-<time>``)."""
    sinks: tuple[str, ...] = ("console", "jsonl", "csv", "tensorboard", "plots")
    """Metric sinks: console, jsonl, csv, tensorboard, wandb, plots."""
    checkpoint_every: int = 0
    """Write a checkpoint every this many env steps (0: only at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (oldest removed first)."""
    replay_ratio: float = 0.0
    """Target update samples per env step for autotune (0: the algorithm's default)."""
    autotune_budget_s: float = 30.0
    """Wall-clock budget of the autotune probe, in seconds."""
    compile_cache: str = ""
    """Persistent compilation cache directory ('' = user cache dir, 'off' = disabled)."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC hyperparameters."""
    td3: TD3Config = field(default_factory=TD3Config)
    """TD3 hyperparameters."""
    ddpg: DDPGConfig = field(default_factory=DDPGConfig)
    """DDPG hyperparameters."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO hyperparameters."""

    @property
    def algo_config(self) -> Any:
        """The hyperparameters of the chosen algorithm."""
        return getattr(self, self.algo)

    @property
    def steps_per_iteration(self) -> int:
        """Env steps per iteration per seed (num_envs x rollout_steps)."""
        return self.num_envs * self.rollout_steps

    @property
    def num_iterations(self) -> int:
        """Iterations after warm-up needed to reach ``total_steps``."""
        remaining = max(self.total_steps - self.warmup_steps, 0)
        return math.ceil(remaining / self.steps_per_iteration)

    @property
    def warmup_steps(self) -> int:
        """Random-action steps taken before training (a multiple of num_envs)."""
        if self.algo == "ppo" or self.learning_starts == 0:
            return 0
        return math.ceil(self.learning_starts / self.num_envs) * self.num_envs

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (nested: ``{"sac": {"gamma": 0.9}}``)."""
        return from_dict({**to_dict(self), **changes}, base=None)


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict of a (nested) config dataclass."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def from_dict(data: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """Build a RunConfig from a (possibly partial, nested) dict over ``base``."""
    base = base or RunConfig()
    known = {f.name: f for f in dataclasses.fields(RunConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(name, f"unknown field; known fields: {', '.join(known)}")
        current = getattr(base, name)
        if dataclasses.is_dataclass(current):
            sub = {f.name for f in dataclasses.fields(current)}
            if not isinstance(value, dict):
                raise ConfigError(name, "expected a table of hyperparameters")
            bad = [k for k in value if k.replace("-", "_") not in sub]
            if bad:
                raise ConfigError(f"{name}.{bad[0]}", f"unknown field; known: {', '.join(sub)}")
            value = {k.replace("-", "_"): v for k, v in value.items()}
            value = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
            value = dataclasses.replace(current, **value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return dataclasses.replace(base, **kwargs)


def load(path: str | Path, base: RunConfig | None = None) -> RunConfig:
    """Read a preset (TOML, or the JSON ``config.json`` of a run directory)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("config", f"no such file {str(path)!r}")
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("config", f"{path} is not valid TOML: {e}") from None
    return from_dict(data, base)


def _non_negative(cfg: RunConfig, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(name, f"must be >= 0, got {value!r}")


def validate(cfg: RunConfig) -> None:
    """Check every field; raise :class:`ConfigError` naming the first bad one.

    Cheap: builds the env spec (no compile) to check the algorithm fits the env.
    """
    from jaxspreeze import algos, envs
    from jaxspreeze.algos.base import check_positive

    if cfg.algo not in ALGOS:
        raise ConfigError("algo", f"unknown algorithm {cfg.algo!r}; choose one of {ALGOS}")
    try:
        envs.check_env_name(cfg.env)
    except envs.UnknownEnvError as e:
        raise ConfigError("env", str(e)) from None
    check_positive(
        cfg,
        "",
        (
            "total_steps",
            "num_envs",
            "rollout_steps",
            "batch_size",
            "buffer_size",
            "chunk_iterations",
            "num_seeds",
            "eval_episodes",
            "keep_checkpoints",
            "autotune_budget_s",
        ),
    )
    _non_negative(
        cfg, ("grad_steps", "learning_starts", "eval_every", "checkpoint_every", "replay_ratio")
    )
    if not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ConfigError("seed", f"must be a non-negative integer, got {cfg.seed!r}")
    if cfg.placement not in ("auto", "single", "split"):
        raise ConfigError("placement", "choose auto, single or split")
    bad_sinks = [s for s in cfg.sinks if s not in SINKS]
    if bad_sinks:
        raise ConfigError("sinks", f"unknown sink {bad_sinks[0]!r}; choose from {SINKS}")
    if cfg.algo != "ppo":
        if cfg.batch_size > cfg.buffer_size:
            raise ConfigError(
                "batch_size",
                f"{cfg.batch_size} is larger than buffer_size {cfg.buffer_size}; "
                "lower --batch-size or raise --buffer-size",
            )
        if cfg.steps_per_iteration > cfg.buffer_size:
            raise ConfigError(
                "buffer_size",
                f"must hold one iteration's {cfg.steps_per_iteration} transitions "
                "(num_envs x rollout_steps)",
            )
        if cfg.grad_steps == 0:
            raise ConfigError("grad_steps", "off-policy algorithms need at least 1")
    else:
        rollout = cfg.steps_per_iteration
        if cfg.batch_size > rollout or rollout % cfg.batch_size:
            raise ConfigError(
                "batch_size",
                f"PPO minibatch {cfg.batch_size} must divide the rollout of {rollout} "
                "transitions (num_envs x rollout_steps)",
            )
    algos.get(cfg.algo).validate(cfg.algo_config, f"{cfg.algo}.", cfg)
    spec = envs.env_spec(cfg.env)
    reason = algos.get(cfg.algo).supports(spec)
    if reason:
        raise ConfigError("algo", f"{cfg.algo} cannot train {cfg.env}: {reason}")
