"""RunConfig: every knob of a run, validated before anything is compiled or allocated.

The dataclasses here are the CLI (tyro turns each field and its docstring into a flag),
the preset file format (TOML, see ``experiments/``) and the Python API at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jaxspreeze.algos.ddpg import DDPGConfig
from jaxspreeze.algos.ppo import PPOConfig
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.algos.td3 import TD3Config
from jaxspreeze.errors import ConfigError, UnknownEnvError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ALGOS = ("sac", "td3", "ddpg", "ppo")
SINKS = ("console", "jsonl", "csv", "tensorboard", "wandb", "plots")


@dataclass(frozen=True)
class RunConfig:
    """A training run. Sizes are per seed; ``--num-seeds K`` trains K agents at once."""

    algo: Literal["sac", "td3", "ddpg", "ppo"] = "sac"
    """Algorithm."""
    env: str = "gymnax/Pendulum-v1"
    """Environment, ``gymnax/<Name>`` or ``brax/<name>``."""
    total_steps: int = 10_000
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
    chunk_iterations: int = 100
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


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether ``value`` matches the (simple) type annotation ``hint`` of a config field."""
    origin = typing.get_origin(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_type_ok(v, args[0]) for v in value)
        return len(args) == len(value) and all(map(_type_ok, value, args))
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    return True  # an annotation this checker does not know: leave it to the field's own check


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        return f"a list of {_describe(args[0])}" if args and args[-1] is Ellipsis else str(hint)
    if hint is float:
        return "a finite number"
    if hint is int:
        return "an integer"
    return getattr(hint, "__name__", str(hint))


def check_types(cfg: Any, prefix: str = "") -> None:
    """ConfigError unless every field of the (nested) config dataclass has its declared type.

    Floats must also be finite (NaN and inf are rejected everywhere).
    """
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        hint = hints.get(f.name)
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            check_types(value, f"{name}.")
            continue
        if hint is None:
            continue
        if not _type_ok(value, hint):
            raise ConfigError(name, f"must be {_describe(hint)}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(name, f"must be finite, got {value!r}")


def _non_negative(cfg: RunConfig, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(name, f"must be >= 0, got {value!r}")


MAX_SEED = 2**31 - 1


def validate(cfg: RunConfig) -> None:
    """Check every field; raise :class:`ConfigError` naming the first bad one.

    Covers every RunConfig field (types, ranges, cross-field limits), the chosen
    algorithm's own fields (its module's ``validate``) and the types of all algorithm
    configs. Cheap: the last step builds the env spec (no compile) to check that the
    algorithm fits the env.
    """
    from jaxspreeze import algos, envs
    from jaxspreeze.algos.base import check_positive

    if not isinstance(cfg, RunConfig):
        raise ConfigError("config", f"expected a RunConfig, got {type(cfg).__name__}")
    if cfg.algo not in ALGOS:
        raise ConfigError("algo", f"unknown algorithm {cfg.algo!r}; choose one of {ALGOS}")
    if cfg.placement not in ("auto", "single", "split"):
        raise ConfigError("placement", f"choose auto, single or split, got {cfg.placement!r}")
    bad_sinks = [s for s in cfg.sinks if s not in SINKS] if isinstance(cfg.sinks, tuple) else []
    if bad_sinks:
        raise ConfigError("sinks", f"unknown sink {bad_sinks[0]!r}; choose from {SINKS}")
    check_types(cfg)
    if len(set(cfg.sinks)) != len(cfg.sinks):
        raise ConfigError("sinks", f"lists a sink twice: {cfg.sinks!r}")
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
    if cfg.seed < 0 or cfg.seed + cfg.num_seeds - 1 > MAX_SEED:
        raise ConfigError(
            "seed",
            f"must be in [0, {MAX_SEED - cfg.num_seeds + 1}] (seed + i per seed), got {cfg.seed!r}",
        )
    if not cfg.logdir.strip():
        raise ConfigError("logdir", "must name a directory, got an empty string")
    if Path(cfg.logdir).exists() and not Path(cfg.logdir).is_dir():
        raise ConfigError("logdir", f"{cfg.logdir!r} exists and is not a directory")
    if cfg.run_name and (
        cfg.run_name in (".", "..") or "/" in cfg.run_name or "\\" in cfg.run_name
    ):
        raise ConfigError("run_name", f"must be a plain directory name, got {cfg.run_name!r}")
    if cfg.compile_cache not in ("", "off") and Path(cfg.compile_cache).is_file():
        raise ConfigError(
            "compile_cache", f"{cfg.compile_cache!r} is a file; give a directory, '' or 'off'"
        )
    try:
        envs.check_env_name(cfg.env)
    except UnknownEnvError as e:
        raise ConfigError("env", str(e)) from None
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
        if cfg.warmup_steps > cfg.buffer_size:
            raise ConfigError(
                "learning_starts",
                f"the warm-up of {cfg.warmup_steps} random steps (learning_starts rounded up "
                f"to a multiple of num_envs) does not fit in buffer_size {cfg.buffer_size}; "
                "lower --learning-starts or raise --buffer-size",
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
    module = algos.get(cfg.algo)
    own_validate = getattr(module, "validate", None)
    if own_validate is not None:
        own_validate(cfg.algo_config, f"{cfg.algo}.", cfg)
    spec = envs.env_spec(cfg.env)
    supports = getattr(module, "supports", None)
    reason = supports(spec) if supports is not None else None
    if reason:
        raise ConfigError("algo", f"{cfg.algo} cannot train {cfg.env}: {reason}")


# ------------------------------------------------------------------------------ memory
GiB = 2**30

# which option to lower when a component of the memory estimate does not fit
_MEMORY_FIELDS = {
    "replay_buffer": "buffer_size",
    "obs_buffer": "buffer_size",
    "env_states": "num_envs",
    "rollout": "num_envs",
    "batch": "batch_size",
    "actor_params": "hidden",
    "critic_params": "hidden",
}
_MEMORY_LABELS = {
    "replay_buffer": "replay buffer",
    "obs_buffer": "obs-only buffer",
    "env_states": "env states",
    "rollout": "rollout",
    "batch": "update batch",
    "actor_params": "actor+optimiser",
    "critic_params": "critic+targets+optimiser",
}
_ACTOR_SIDE = ("obs_buffer", "env_states", "rollout", "actor_params")
_CRITIC_SIDE = ("replay_buffer", "batch", "critic_params")


def _tree_nbytes(tree: Any) -> int:
    import jax
    import numpy as np

    total = 0
    for x in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            itemsize = 8  # threefry key data: 2 x uint32
        else:
            itemsize = np.dtype(x.dtype).itemsize
        total += math.prod(x.shape) * itemsize
    return total


def estimate_memory(cfg: RunConfig, *, split: bool | None = None) -> dict[str, int]:
    """Bytes the run will hold on its device(s), for all seeds, computed without allocating.

    Components: ``replay_buffer`` (``loop.buffer_nbytes``), ``obs_buffer`` (split only),
    ``env_states``, ``actor_params`` / ``critic_params`` (parameters, targets, optimiser
    states; from ``jax.eval_shape`` of the state init), ``rollout`` (one iteration's
    ``[T, N]`` transitions) and ``batch`` (sampled batches plus a rough 3x activation
    allowance per hidden layer, fwd and bwd); ``total`` sums them. ``split`` defaults to
    ``cfg.placement == "split"``. XLA's temporaries beyond these are not counted.
    """
    import jax

    from jaxspreeze import devices, replay
    from jaxspreeze.loop import Loop, _example_transition, buffer_nbytes
    from jaxspreeze.types import ObsOnly

    split = cfg.placement == "split" if split is None else split
    loop = Loop(cfg, devices.single())
    shapes = jax.eval_shape(
        lambda: jax.vmap(loop._init_one)(jax.random.split(jax.random.key(0), cfg.num_seeds))
    )
    example = _example_transition(loop.env)
    item = _tree_nbytes(jax.eval_shape(lambda: example))
    obs_item = _tree_nbytes(jax.eval_shape(lambda: example.obs))
    s = cfg.num_seeds
    off_policy = not loop.algo.on_policy
    hidden = getattr(cfg.algo_config, "hidden", (256, 256))
    activations = 4 * sum(hidden) * 3 * 2  # float32, fwd+bwd, actor and critic
    est = {
        "replay_buffer": buffer_nbytes(cfg, loop.env) if off_policy else 0,
        "obs_buffer": (
            replay.nbytes(ObsOnly(example.obs), cfg.buffer_size) * s if off_policy and split else 0
        ),
        "env_states": _tree_nbytes(shapes.env),
        "actor_params": _tree_nbytes(shapes.agent.actor),
        "critic_params": _tree_nbytes(shapes.agent.critic),
        "rollout": item * cfg.steps_per_iteration * s,
        "batch": cfg.batch_size * (item + obs_item + activations) * s,
    }
    est["total"] = sum(est.values())
    return est


def format_memory(est: dict[str, int]) -> str:
    """One line: the total and each non-zero component, in human units."""

    def human(n: int) -> str:
        for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
            if n >= size:
                return f"{n / size:.1f} {unit}"
        return f"{n} B"

    parts = [f"{_MEMORY_LABELS[k]} {human(v)}" for k, v in est.items() if k != "total" and v]
    return f"memory estimate {human(est['total'])} ({', '.join(parts)})"


def available_memory(device: Any) -> tuple[int | None, str]:
    """(bytes free for new arrays on ``device`` or None if unknown, where that was read).

    Accelerators: ``bytes_limit - bytes_in_use`` of ``device.memory_stats()``. CPU: the
    host's ``MemAvailable`` (``/proc/meminfo``), else ``os.sysconf`` available pages.
    """
    import os

    if getattr(device, "platform", "cpu") != "cpu":
        try:
            stats = device.memory_stats() or {}
        except Exception:  # pragma: no cover - backends without stats
            stats = {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), str(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "host memory"
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "host memory"
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None, "unknown"


def _fit(cfg: RunConfig, est: dict[str, int], keys: tuple[str, ...], device: Any) -> None:
    need = sum(est[k] for k in keys)
    free, where = available_memory(device)
    if free is None or need <= free:
        return
    biggest = max(keys, key=lambda k: est[k])
    name = _MEMORY_FIELDS[biggest]
    field_name = f"{cfg.algo}.{name}" if name == "hidden" else name
    flag = "--" + field_name.replace("_", "-")
    parts = ", ".join(
        f"{_MEMORY_LABELS[k]} {est[k] / GiB:.2f}" for k in keys if est[k] >= 0.01 * need
    )
    seeds = f" or --num-seeds (now {cfg.num_seeds})" if cfg.num_seeds > 1 else ""
    raise ConfigError(
        field_name,
        f"the run needs about {need / GiB:.2f} GiB ({parts} GiB) but {where} has "
        f"{free / GiB:.2f} GiB available; lower {flag} (now {_get_field(cfg, field_name)!r})"
        f"{seeds}",
    )


def _get_field(cfg: RunConfig, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def check_memory(
    cfg: RunConfig, device: Any = None, *, split: bool | None = None
) -> dict[str, int]:
    """Raise ConfigError (naming the option to lower) when the run would not fit; else the estimate.

    ``device`` is a ``jax.Device`` (everything on it) or a ``devices.Placement`` (a split
    placement checks the actor side on the actor device and the critic side on the
    critic device; CPU devices share the host's memory, so their sum is checked). Call
    it before ``Loop.init()`` allocates anything.
    """
    from jaxspreeze import devices

    placement = device if isinstance(device, devices.Placement) else None
    if placement is not None:
        split = placement.split if split is None else split
    est = estimate_memory(cfg, split=split)
    everything = tuple(k for k in est if k != "total")
    if placement is None:
        _fit(cfg, est, everything, device if device is not None else devices.single().actor)
    elif not placement.split or placement.actor.platform == "cpu":
        _fit(cfg, est, everything, placement.actor)
    else:
        _fit(cfg, est, _ACTOR_SIDE, placement.actor)
        _fit(cfg, est, _CRITIC_SIDE, placement.critic)
    return est
