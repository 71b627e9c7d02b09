"""RunConfig: every knob of a run, validated before anything is compiled or allocated.

The dataclasses here are the CLI (tyro turns each field and its docstring into a flag),
the preset file format (TOML, see ``experiments/``) and the Python API at once.

RunConfig is built from the algorithm registry (``jaxspreeze.algos``): its ``--algo``
choices, one ``[<name>]`` section of hyperparameters per algorithm (``--sac.actor-lr``)
and the help of the run-level sizes whose default depends on the algorithm. Those sizes
(``total_steps``, ``num_envs``, ``rollout_steps``, ``grad_steps``, ``batch_size``,
``buffer_size``, ``learning_starts``, ``chunk_iterations``) and ``eval_every`` are None
until :func:`resolve` fills them from the chosen algorithm's defaults; what the user set
is kept. :func:`check_fields` checks every field on its own (types, ranges, names);
what needs the algorithm or the env (its limits, the budget, whether it can train the env)
is :func:`jaxspreeze.setup.plan.plan`'s, which resolves and checks a config once for a run.

What a field is to a run beyond its value (a shape field, a start field, one that reaches
no program, ...: :data:`~jaxspreeze.algos.base.FIELD_KINDS`) is metadata on the field
itself, on RunConfig and on every algorithm's config; :func:`fields_of` reads it.
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

from jaxspreeze import algos
from jaxspreeze.algos.spec import (
    FIELD_KINDS,
    RUN_SIZES,
    AlgoSpec,
    check_positive,
    defaults_on,
    family_of,
    filled,
    kinds,
)
from jaxspreeze.core import envids
from jaxspreeze.core.errors import ConfigError, UnknownEnvError

if typing.TYPE_CHECKING:
    from jaxspreeze.core.types import ObsKeys

# no JAX at import (the command line's early check reads RunConfig): JAX's default backend
# (resolve) and the env registry (check_fields) are imported where they are used

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SINKS = ("console", "jsonl", "csv", "tensorboard", "wandb", "plots")
PLACEMENTS = ("auto", "single", "split", "data", "split-data")
COMPILE_MODES = ("auto", "full", "quick")  # RunConfig.compile (setup.plan.compile_mode)
EVALUATIONS = 10  # the default eval_every gives about this many evaluations per run
DEVICE_EVAL_EPISODES = 128  # eval_episodes unset: a device env's (vmapped: cheap)
HOST_EVAL_EPISODES = 16  # eval_episodes unset: a host env's (stepped on the host)
# eval_episodes unset, a brax or Playground env on a CPU: envids.Family.cpu_eval_episodes


def _per_algorithm(help_text: str, *kind: str) -> Any:
    """A run-level size that defaults to the chosen algorithm's value (None until resolved);
    ``kind``: its :data:`~jaxspreeze.algos.base.FIELD_KINDS`."""
    return field(default=None, metadata=kinds(*kind, help=help_text, per_algorithm=True))


def _is(default: Any, *kind: str) -> Any:
    """A field with ``default`` that is of ``kind`` (:data:`~jaxspreeze.algos.base.FIELD_KINDS`)."""
    return field(default=default, metadata=kinds(*kind))


@dataclass(frozen=True)
class _RunFields:
    """A training run. Sizes are per seed; ``--num-seeds K`` trains K agents at once."""

    algo: str = _is(algos.NAMES[0], "shape")
    """Algorithm."""
    env: str = _is("gymnax/Pendulum-v1", "shape")
    """Environment, ``<family>/<id>``: on the device ``gymnax/``, ``brax/``,
    ``playground/``, ``craftax/``, ``jumanji/``, ``xminigrid/``, ``navix/``; on the host CPU
    (sampling workers) ``gymnasium/`` or ``envpool/``. ``jaxspreeze envs`` lists them."""
    actor_obs_key: str = _is("", "shape")
    """Dict observations (Playground's locomotion tasks: ``state``, ``privileged_state``):
    the key the actor (the policy: acting, evaluation, the saved policy) reads; '' = ``state``.
    Refused for envs that observe one array."""
    critic_obs_key: str = _is("", "shape")
    """Dict observations: the key the critic (Q or value network) reads; '' = the actor's
    key. A different key gives asymmetric actor-critic: the env observes both keys side by
    side and each network reads only its own."""
    total_steps: int | None = _per_algorithm(
        "Environment steps to train for (summed over envs, per seed)."
    )
    num_envs: int | None = _per_algorithm("Parallel environments (vmapped on the device).", "shape")
    rollout_steps: int | None = _per_algorithm(
        "Env steps per iteration per env (T); PPO's rollout length."
    )
    grad_steps: int | None = _per_algorithm(
        "Gradient steps per iteration (G) for the critic (off-policy algorithms).", "off_policy"
    )
    batch_size: int | None = _per_algorithm(
        "Samples per gradient step (off-policy) or per minibatch (PPO)."
    )
    buffer_size: int | None = _per_algorithm(
        "Replay buffer capacity in transitions (off-policy).", "shape", "off_policy"
    )
    learning_starts: int | None = _per_algorithm(
        "Random-action env steps before the first update (off-policy).", "start", "off_policy"
    )
    chunk_iterations: int | None = _per_algorithm(
        "Iterations fused into one jitted chunk (K); the host dispatches once per chunk."
    )
    seed: int = _is(0, "start", "program_free")
    """Random seed; seed i of a ``--num-seeds`` run uses ``seed + i``."""
    num_seeds: int = _is(1, "shape")
    """Independent agents trained together with vmap in one program."""
    population: tuple[str, ...] = _is((), "shape")
    """A population's members (what ``jaxspreeze sweep`` writes from --grid/--sample): one
    ``field=value,field=value`` per member, each field a member field of the algorithm
    (docs/sweeps.md); every member trains num_seeds seeds in the same program. Empty: one
    member with the config's own values."""
    pbt: bool = _is(False, "program_free")
    """Population-based training of the population (``jaxspreeze sweep --pbt``, docs/sweeps.md):
    every pbt_interval env steps the bottom pbt_quantile of the members copy the agent state
    of members drawn from the top quantile and perturb the copied member-field values."""
    pbt_interval: int = _is(0, "program_free")
    """Env steps between PBT's exploit-and-explore steps, a whole number of chunks (0: ten
    chunks)."""
    pbt_quantile: float = _is(0.25, "program_free")
    """The share of members (at least one) PBT replaces at each interval, and the share it
    copies from; in (0, 0.5]."""
    placement: Literal["auto", "single", "split", "data", "split-data"] = "auto"
    """Device placement: split = actor and critic on two devices, single = one device, data =
    data-parallel over every device of every process (global num_envs, batch_size and
    buffer_size split evenly over them); split-data = both at once: with 2k devices, k carry
    the actor side and k the critic side, each side data-parallel over its k (sizes split
    evenly over k; each process needs an even number of devices); auto = data in a
    multi-process run, else split with two or more devices, else single."""
    host_workers: int = 1
    """Sampling worker threads for host envs (gymnasium/<id>, envpool/<task>); num_envs are
    split evenly over them."""
    host_stall_timeout_s: float = _is(60.0, "program_free")
    """Host envs: a sampling worker stuck this many seconds inside one env step (or policy
    call) is reported as stalled and the run stops (exit 1, naming the env and the worker)."""
    eval_every: int | None = _is(None, "program_free")
    """Evaluate every this many env steps (0: only at the end; None: total_steps // 10)."""
    eval_episodes: int | None = None
    """Episodes per evaluation and seed (deterministic policy; every evaluation draws fresh
    start states from the run's seed and its env step). None: 128 on device envs, 16 on
    host envs (gymnasium, envpool, a user's env: stepped one by one on the host) and on
    brax and Playground envs when JAX runs on a CPU (a physics step costs a CPU about 8x as
    long for 128 envs as for 16; an accelerator runs 128)."""
    stop_at_return: float | None = _is(None, "program_free")
    """Stop at the first evaluation whose return (mean over seeds) is at or above this: a
    clean stop with a checkpoint and the policy (None: train to total_steps)."""
    logdir: str = _is("runs", "location", "program_free")
    """Directory that holds run directories."""
    run_name: str = _is("", "location", "program_free")
    """Run directory name (default: ``<algo>-<env>-<time>``)."""
    sinks: tuple[str, ...] = _is(
        ("console", "jsonl", "csv", "tensorboard", "plots"), "program_free"
    )
    """Metric sinks: console, jsonl, csv, tensorboard, wandb, plots."""
    checkpoint_every: int = _is(0, "program_free")
    """Write a checkpoint every this many env steps (0: only at the end)."""
    keep_checkpoints: int = _is(2, "program_free")
    """Checkpoints kept on disk (oldest removed first)."""
    replay_ratio: float = _is(0.0, "autotune")
    """Target update samples per env step for autotune (0: the algorithm's default)."""
    autotune_budget_s: float = _is(30.0, "autotune", "program_free")
    """Wall-clock budget of the autotune probe, in seconds."""
    compile: Literal["auto", "full", "quick"] = field(default="auto", metadata=kinds(absent="full"))
    """What XLA optimises the run's programs for: full = run speed (XLA's defaults); quick =
    compile speed (on a CPU: about half the compile, the same run speed within about 10%,
    floats that differ from full's in their last bits); auto = quick for a short run (at
    most 32 chunks) of a device env on a CPU, on one or two devices, else full. The run's
    config.json records the choice (docs/checkpoints.md)."""
    compile_cache: str = _is("", "program_free")
    """Persistent compilation cache directory ('' = user cache dir, 'off' = disabled)."""

    @property
    def obs_keys(self) -> ObsKeys:
        """The dict-observation keys the actor and the critic read ('' : the default)."""
        from jaxspreeze.core.types import ObsKeys

        return ObsKeys(self.actor_obs_key, self.critic_obs_key)

    @property
    def members(self) -> int:
        """The population's members (1 for a plain run)."""
        return max(len(self.population), 1)

    @property
    def slots(self) -> int:
        """Agents vmapped in the run's program: members x num_seeds (slot ``m * num_seeds +
        i`` is member m's seed i, with key ``seed + i``)."""
        return self.members * self.num_seeds

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (nested: ``sac={"gamma": 0.9}`` changes that
        field of this config's section and keeps its others)."""
        data = to_dict(self)
        for name, value in changes.items():
            name = name.replace("-", "_")
            if isinstance(value, dict) and isinstance(data.get(name), dict):
                value = {**data[name], **value}
            data[name] = value
        return from_dict(data, base=None)


def _group(values: dict[str, int]) -> str:
    """``{"sac": 8, "td3": 8, "ppo": 16}`` -> ``"sac/td3 8, ppo 16"`` (thousands with commas)."""
    by_value: dict[int, list[str]] = {}
    for name, value in values.items():
        by_value.setdefault(value, []).append(name)
    return ", ".join(f"{'/'.join(names)} {value:,}" for value, names in by_value.items())


def _registry_fields() -> list[tuple[str, Any, Any]]:
    """RunConfig's fields that come from the registry: ``algo``'s choices, the help of
    the per-algorithm sizes (their defaults, listed) and one section per algorithm."""
    specs = algos.all_specs()
    out: list[tuple[str, Any, Any]] = [
        ("algo", Literal[algos.NAMES], _is(algos.NAMES[0], "shape"))  # type: ignore[valid-type]
    ]
    for f in dataclasses.fields(_RunFields):
        if f.metadata.get("per_algorithm"):
            listing = _group({s.name: s.defaults[f.name] for s in specs})
            gpu = {s.name: s.accelerator_defaults[f.name] for s in specs}
            gpu = {n: v for n, v in gpu.items() if v != algos.get(n).defaults[f.name]}
            if gpu:
                listing += f"; on a GPU or TPU {_group(gpu)}"
            help_text = f"{f.metadata['help']} None: the algorithm's default ({listing})."
            out.append((f.name, int | None, _per_algorithm(help_text, *f.metadata["kinds"])))
    for spec in specs:
        section = field(
            default_factory=spec.config_cls, metadata={"help": f"{spec.label} hyperparameters."}
        )
        out.append((spec.name, spec.config_cls, section))
    return out


RunConfig = dataclasses.make_dataclass(
    "RunConfig",
    _registry_fields(),
    bases=(_RunFields,),
    frozen=True,
)
RunConfig.__module__ = __name__  # so it pickles and prints as jaxspreeze.setup.config.RunConfig
RunConfig.__doc__ = _RunFields.__doc__


def fields_of(kind: str, cls: type | None = None, *, on_policy: bool = False) -> tuple[str, ...]:
    """The names of the fields of ``cls`` (RunConfig if None; an algorithm's config class)
    whose metadata names ``kind`` (:data:`~jaxspreeze.algos.base.FIELD_KINDS`), in order.

    ``on_policy``: leave out the fields only off-policy algorithms read (``off_policy``).
    """
    if kind not in FIELD_KINDS:
        raise ValueError(f"unknown field kind {kind!r}; known: {', '.join(FIELD_KINDS)}")
    return tuple(
        f.name
        for f in dataclasses.fields(cls or RunConfig)
        if kind in f.metadata.get("kinds", ())
        and not (on_policy and "off_policy" in f.metadata.get("kinds", ()))
    )


def is_resolved(cfg: RunConfig) -> bool:
    """True when no run-level size (nor eval_every, nor a family-dependent field of the
    run's algorithm) waits for :func:`resolve`."""
    if any(getattr(cfg, name) is None for name in (*RUN_SIZES, "eval_every", "eval_episodes")):
        return False
    spec = algos.get(cfg.algo) if cfg.algo in algos.NAMES else None
    section = getattr(cfg, cfg.algo, None) if spec else None
    return spec is None or all(getattr(section, n) is not None for n in spec.field_defaults)


def resolve(cfg: RunConfig, spec: AlgoSpec | None = None) -> RunConfig:
    """``cfg`` with every unset run-level size from its algorithm's defaults (on a GPU or
    TPU, JAX's default backend here, its ``accelerator_defaults``), and the unset fields of
    its algorithm's section for the env's family (``AlgoSpec.family_defaults``: PPO's
    policy on brax).

    Sizes and fields the user set are kept; ``eval_every`` unset becomes ``total_steps // 10``
    (about ten evaluations). Idempotent: a resolved config comes back unchanged (the same
    object). ``spec``: the algorithm's registry entry, when the caller holds it;
    ConfigError("algo") for an unknown algorithm.
    """
    spec = spec or algos.get(cfg.algo)
    if is_resolved(cfg):
        return cfg
    import jax  # lazy: RunConfig and its checks import no JAX

    defaults = defaults_on(spec, jax.default_backend())
    changes: dict[str, Any] = {n: defaults[n] for n in RUN_SIZES if getattr(cfg, n) is None}
    section = getattr(cfg, spec.name)
    if (own := filled(spec, section, family_of(cfg.env))) is not section:
        changes[spec.name] = own
    total = defaults["total_steps"] if cfg.total_steps is None else cfg.total_steps
    if cfg.eval_every is None and isinstance(total, int) and not isinstance(total, bool):
        changes["eval_every"] = max(total // EVALUATIONS, 0)
    if cfg.eval_episodes is None:
        changes["eval_episodes"] = default_eval_episodes(cfg.env, jax.default_backend())
    return dataclasses.replace(cfg, **changes) if changes else cfg


def default_eval_episodes(env: str, backend: str) -> int:
    """The episodes per evaluation of a run on ``env`` that leaves ``eval_episodes`` unset,
    with JAX's ``backend`` (``cpu``, ``gpu``, ...): :data:`DEVICE_EVAL_EPISODES`,
    :data:`HOST_EVAL_EPISODES` for a host env, or on a CPU the family's
    ``cpu_eval_episodes`` (brax and Playground: a physics step each)."""
    family = envids.family_of(env)
    if env.partition("/")[0] == "user" or (family is not None and family.host):
        return HOST_EVAL_EPISODES
    if backend == "cpu" and family is not None and family.cpu_eval_episodes:
        return family.cpu_eval_episodes
    return DEVICE_EVAL_EPISODES


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


def saved_before(data: dict[str, Any]) -> dict[str, Any]:
    """A saved run's config (``config.json``, a policy file's) with what it predates: a
    field added since with a new default, whose metadata says what a config without it
    meant (``absent``; FastTD3's ``normalize_obs``: False; the run's ``compile``: "full"),
    takes that value where the config (or the algorithm's table) lacks it, so an older run
    loads as it trained."""
    out = dict(data)
    for f in dataclasses.fields(RunConfig):  # the run's own fields (``compile``: "full")
        if "absent" in f.metadata and f.name not in out and f.name.replace("_", "-") not in out:
            out[f.name] = f.metadata["absent"]
    for spec in algos.all_specs():
        table = out.get(spec.name)
        if not isinstance(table, dict):
            continue
        given = {k.replace("-", "_") for k in table}
        absent = {
            f.name: f.metadata["absent"]
            for f in dataclasses.fields(spec.config_cls)
            if "absent" in f.metadata and f.name not in given
        }
        out[spec.name] = {**table, **absent}
    return out


def load(path: str | Path, base: RunConfig | None = None) -> RunConfig:
    """Read a preset (TOML, or the JSON ``config.json`` of a run directory)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("config", f"no such file {str(path)!r}")
    if path.is_dir():
        raise ConfigError(
            "config", f"{path} is a directory; give a TOML preset or a run's config.json"
        )
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ConfigError("config", f"{path} is not a text file (TOML or JSON)") from None
    except OSError as e:
        raise ConfigError("config", f"cannot read {path}: {e.strerror or e}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError("config", f"{path} is not valid JSON: {e}") from None
        if isinstance(data, dict):  # a run's config.json: as the run trained
            data = saved_before(data)
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("config", f"{path} is not valid TOML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} does not hold a table of settings")
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
    """A type annotation in words, for error messages."""
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        return f"a list of {_describe(args[0])}" if args and args[-1] is Ellipsis else str(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return " or ".join(_describe(a) for a in args)
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
        hint = hints[f.name]  # every field is annotated
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            check_types(value, f"{name}.")
            continue
        if not _type_ok(value, hint):
            raise ConfigError(name, f"must be {_describe(hint)}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(name, f"must be finite, got {value!r}")


def _non_negative(cfg: RunConfig, names: tuple[str, ...]) -> None:
    """ConfigError unless every named field is a number >= 0."""
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(name, f"must be >= 0, got {value!r}")


MAX_SEED = 2**31 - 1


def check_fields(cfg: RunConfig) -> None:
    """Check every field on its own; raise :class:`ConfigError` naming the first bad one.

    ``cfg`` is resolved (:func:`resolve`). Covers the types of every field and section,
    the ranges and names of RunConfig's fields, the env's name and observation keys; what
    needs the schedule, the algorithm or the env spec is checked by
    :func:`jaxspreeze.setup.plan.plan` after this.
    """
    if cfg.compile not in COMPILE_MODES:
        raise ConfigError(
            "compile", f"choose one of {', '.join(COMPILE_MODES)}, got {cfg.compile!r}"
        )
    if cfg.placement not in PLACEMENTS:
        raise ConfigError(
            "placement", f"choose one of {', '.join(PLACEMENTS)}, got {cfg.placement!r}"
        )
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
            "chunk_iterations",
            "num_seeds",
            "eval_episodes",
            "keep_checkpoints",
            "autotune_budget_s",
            "host_workers",
            "host_stall_timeout_s",
        ),
    )
    _non_negative(
        cfg,
        (
            "grad_steps",
            "buffer_size",
            "learning_starts",
            "eval_every",
            "checkpoint_every",
            "replay_ratio",
        ),
    )
    if cfg.seed < 0 or cfg.seed + cfg.num_seeds - 1 > MAX_SEED:
        raise ConfigError(
            "seed",
            f"must be in [0, {MAX_SEED - cfg.num_seeds + 1}] (seed + i per seed), got {cfg.seed!r}",
        )
    if cfg.stop_at_return is not None and not math.isfinite(cfg.stop_at_return):
        raise ConfigError(
            "stop_at_return", f"must be a finite return (or None), got {cfg.stop_at_return!r}"
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
    from jaxspreeze import envs  # lazy: the env registry imports JAX

    try:
        envs.check_env_name(cfg.env)
    except UnknownEnvError as e:
        raise ConfigError("env", str(e)) from None
    envs.check_obs_keys(cfg.env, cfg.obs_keys)
