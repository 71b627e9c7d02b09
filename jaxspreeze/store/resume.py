"""Resume: where a run continues from, and what a changed config does to it.

A run resumes from its newest *intact* checkpoint (:func:`find`: newer ones that fail
their checksums are reported and skipped). The config given for the resumed run is
compared with the checkpoint's, field by field, and one rule decides every difference:

- **refused** (ConfigError naming every such field, before anything is allocated): a
  field that shapes the saved state (:func:`shape_fields`: algo, env, the observation
  keys (what the saved networks read), num_envs, num_seeds, the off-policy buffer size,
  the algorithm's own shape fields such as the network sizes, and the split/single
  placement of an off-policy run), or one that acts only when a run starts (the ``start``
  fields: the seed, the off-policy warm-up, and an algorithm field that only sets
  initial values, e.g. ``sac.init_alpha``: found by building the agent's initial state
  with and without the change). A ``total_steps`` at or below the checkpoint's env steps
  is refused too (nothing would be left to train).
- **unused** (listed, nothing to do): the sections of other algorithms and the fields
  only autotune reads (the ``autotune`` fields), and the off-policy sizes for an
  on-policy algorithm.

Which field is which is metadata on the fields (:func:`jaxspreeze.setup.config.fields_of`:
``shape``, ``start``, ``autotune``, ``off_policy``, ``location``).
- **applied** (listed; takes effect from the first resumed update): everything else.
  Hyperparameters that live in the state (learning rates inside the optimiser states,
  gamma, tau, GAE lambda, the noise scales, clip ranges, loss coefficients and reward
  scale: :data:`HYPERPARAMETER_LEAVES`) are taken from a state built from the new config
  (:func:`apply_hyperparameters`); the others (epochs, sizes per update, the evaluation
  and checkpoint cadence, sinks) come with the run rebuilt from the new config.

Restoring into a fresh state is :func:`restore`; with an unchanged config the state then
continues bitwise as if it had never stopped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze import algos
from jaxspreeze.algos import members
from jaxspreeze.algos.base import AlgoSpec
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import Placement
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup import distributed
from jaxspreeze.setup.config import RunConfig, fields_of
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import checkpoint
from jaxspreeze.store.rundir import RunDir

# what each field is to a resume, read once from the fields' metadata (config.fields_of):
# RunConfig's fields of each kind, and the shape fields of every algorithm's config
KINDS = {kind: fields_of(kind) for kind in ("shape", "start", "off_policy", "autotune", "location")}
ALGO_SHAPE = {spec.name: fields_of("shape", spec.config_cls) for spec in algos.all_specs()}
# the names of the agent-state leaves that hold a hyperparameter (set from the config)
HYPERPARAMETER_LEAVES = (
    frozenset({"learning_rate", "lr", "gamma", "tau", "gae_lambda"}) | members.ADDED_LEAVES
)


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from, and how the config given differs from its own."""

    run_dir: Path
    checkpoint: Path
    env_steps: int  # per seed, at the checkpoint
    chunk: int  # the last chunk the checkpoint includes
    saved: RunConfig  # the config the checkpoint was written with (resolved)
    saved_algo: AlgoSpec  # its algorithm (the run's, or the resume is refused)
    changes: dict[str, tuple[Any, Any]]  # field (dotted) -> (saved value, new value)
    unused: tuple[str, ...] = ()  # the changed fields this run does not read
    damaged: tuple[tuple[Path, str], ...] = field(default=())  # newer checkpoints skipped

    @property
    def first_chunk(self) -> int:
        """The chunk the resumed run starts with."""
        return self.chunk + 1

    @property
    def applied(self) -> dict[str, tuple[Any, Any]]:
        """The changes that take effect from the first resumed update."""
        return {k: v for k, v in self.changes.items() if k not in self.unused}

    @property
    def hyperparameters_changed(self) -> bool:
        """True when a field of the run's own algorithm changed (its state leaves are reset)."""
        return any(k.startswith(f"{self.saved.algo}.") for k in self.applied)

    def record(self) -> dict[str, Any]:
        """The JSON-ready account of this resume (``resumes.jsonl``, ``summary.json``)."""
        return {
            "checkpoint": str(self.checkpoint),
            "env_steps": self.env_steps,
            "applied": {k: list(v) for k, v in self.applied.items()},
            "unused": {k: list(self.changes[k]) for k in self.unused},
            "damaged": [[str(p), why] for p, why in self.damaged],
        }


def find(run_dir: str | Path, plan: RunPlan) -> tuple[ResumePoint, RunPlan]:
    """The point to resume ``run_dir`` from, and ``plan`` pointed at that run directory.

    ``plan`` has a placement. ConfigError("resume") when the run has no intact
    checkpoint, a ConfigError naming every refused field (see the module docstring) when
    the plan's config cannot continue it, and ConfigError("total_steps") when nothing is
    left to train. Reads only: nothing in the run directory changes.
    """
    cfg, placement = plan.cfg, plan.placement
    assert placement is not None, "a resumed run's plan has its placement"
    run_dir = Path(run_dir)
    path, damaged = checkpoint.newest_intact(run_dir)
    if path is None:
        raise ConfigError("resume", _no_checkpoint(run_dir, damaged))
    saved = checkpoint.read_config(path)
    if saved is None:
        try:
            saved = RunDir(run_dir).read_config()
        except ConfigError as e:
            raise ConfigError("resume", f"{path} has no config.json and {e}") from None
    saved_algo = algos.get(saved.algo)
    saved = config_lib.resolve(saved, saved_algo)
    manifest = checkpoint.read_manifest(path)
    check_layout(path, manifest, placement)
    _check_all(saved, saved_algo, plan, saved_split=checkpoint.saved_split(path))
    env_steps = int(manifest["env_steps"])
    # a run stopped after its last checkpoint but before its summary (killed, a power cut)
    # is finished by resuming it as it was: the final evaluation, the summary, the policy
    unfinished = cfg.total_steps == saved.total_steps and not (run_dir / "summary.json").exists()
    if cfg.total_steps <= env_steps and not unfinished:
        raise ConfigError(
            "total_steps",
            f"the run already has {env_steps:,} env steps per seed (checkpoint {path}); "
            f"to continue it give --total-steps above {env_steps}",
        )
    plan = plan.relocated(logdir=str(run_dir.parent), run_name=run_dir.name)
    location = KINDS["location"]
    changes = {k: v for k, v in config_changes(saved, plan.cfg).items() if k not in location}
    point = ResumePoint(
        run_dir=run_dir,
        checkpoint=path,
        env_steps=env_steps,
        chunk=int(manifest["chunk"]),
        saved=saved,
        saved_algo=saved_algo,
        changes=changes,
        unused=tuple(k for k in changes if not _used(saved, saved_algo, k)),
        damaged=tuple(damaged),
    )
    return point, plan


def check_layout(path: Path, manifest: dict[str, Any], placement: Placement) -> None:
    """ConfigError unless this run has the processes and data-parallel devices that wrote
    the checkpoint (its manifest's ``extra.layout``; older checkpoints: one process, not
    data-parallel)."""
    saved = {**distributed.OLD_LAYOUT, **(manifest.get("extra", {}).get("layout") or {})}
    now = distributed.layout(placement)
    if all(saved[k] == now[k] for k in distributed.MATCHED):
        return
    hint = (
        f"jaxspreeze launch --processes {saved['processes']} -- train --resume {path.parent.parent}"
        if saved["processes"] > 1
        else f"jaxspreeze train --resume {path.parent.parent} (one process)"
    )
    if saved.get("placement_kind") == "split-data" and saved["processes"] == now["processes"]:
        hint += f" with {2 * saved['data_devices']} devices and --placement split-data"
    elif saved["data_parallel"] and saved["processes"] == now["processes"]:
        hint += f" with {saved['data_devices']} devices and --placement data"
    raise ConfigError(
        "num_processes" if saved["processes"] != now["processes"] else "placement",
        f"cannot resume {path}: it was written by {distributed.describe_layout(saved)} and "
        f"this run has {distributed.describe_layout(now)}; resume it the same way: {hint}",
    )


def _no_checkpoint(run_dir: Path, damaged: list[tuple[Path, str]]) -> str:
    """Why ``run_dir`` cannot be resumed: no checkpoint, or only damaged ones."""
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        return f"{run_dir} has no intact checkpoint: {damaged[0][1]}{more}"
    if RunDir(run_dir).not_started:
        return (
            f"{run_dir} has no checkpoint: the run stopped before its first one "
            "(NOT_STARTED); start it again instead (same --run-name)"
        )
    return f"{run_dir} has no checkpoint (looked in {checkpoint.checkpoint_dir(run_dir)})"


def _used(cfg: RunConfig, spec: AlgoSpec, name: str) -> bool:
    """Whether a run of ``cfg`` (of algorithm ``spec``) reads the (dotted) field ``name``."""
    section = name.split(".", 1)[0] if "." in name else None
    if section is not None:
        return section == cfg.algo
    if name in KINDS["autotune"]:
        return False
    return not (spec.on_policy and name in KINDS["off_policy"])


def restore(point: ResumePoint, template: TrainState) -> TrainState:
    """The state saved at ``point``, in ``template``'s structure and on its devices.

    :func:`find` verified the whole checkpoint; a leaf that changed since (or a checkpoint
    that does not fit the template) raises :class:`~jaxspreeze.core.errors.CheckpointError`.
    """
    state, _ = checkpoint.restore(point.checkpoint, template, check=False)
    return state


def _leaf_name(path: tuple[Any, ...]) -> str:
    """The last key of a pytree path: a field, dict key or index, as a string."""
    last = path[-1] if path else None
    for attr in ("name", "key", "idx"):
        if hasattr(last, attr):
            return str(getattr(last, attr))
    return str(last)


def is_hyperparameter(path: tuple[Any, ...]) -> bool:
    """Whether the agent-state leaf at ``path`` holds a hyperparameter of the config."""
    return _leaf_name(path) in HYPERPARAMETER_LEAVES


def apply_hyperparameters(state: TrainState, fresh: TrainState) -> TrainState:
    """``state`` with every hyperparameter leaf of its agent taken from ``fresh``.

    ``fresh`` is a state built from the new config (e.g. the restore template): its
    hyperparameter leaves (:data:`HYPERPARAMETER_LEAVES`) hold the new config's values, on the right
    devices. Everything else (parameters, optimiser moments and step counts, the buffer,
    keys) stays as restored.
    """
    agent = jax.tree_util.tree_map_with_path(
        lambda path, old, new: new if is_hyperparameter(path) else old, state.agent, fresh.agent
    )
    return state._replace(agent=agent)


def shape_fields(spec: AlgoSpec) -> list[str]:
    """The fields of a run of algorithm ``spec`` (dotted for the algorithm's) that change
    the state's shapes: the ``shape`` fields of RunConfig (the off-policy ones only for an
    off-policy algorithm) and of the algorithm's config."""
    fields = [n for n in KINDS["shape"] if not (spec.on_policy and n in KINDS["off_policy"])]
    fields += [f"{spec.name}.{name}" for name in ALGO_SHAPE[spec.name]]
    return fields


def _get(cfg: RunConfig, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _check_all(
    saved: RunConfig, saved_algo: AlgoSpec, plan: RunPlan, saved_split: bool | None
) -> None:
    """One ConfigError naming every refused field: those that change the state's shapes
    (:func:`check_compatible`) and those that act only at a run's start
    (:func:`check_start_fields`), in one line."""
    refused: list[ConfigError] = []
    try:
        check_compatible(saved, saved_algo, plan, saved_split=saved_split)
    except ConfigError as e:
        refused.append(e)
    try:
        check_start_fields(saved, saved_algo, plan)
    except ConfigError as e:
        refused.append(e)
    except Exception:  # the shapes differ too much to build the start state: named above
        if not refused:
            raise
    if refused:
        why = "; and ".join(str(e).split(": ", 1)[1] for e in refused)
        raise ConfigError(refused[0].field, why)


def check_compatible(
    saved_cfg: RunConfig,
    saved_algo: AlgoSpec,
    plan: RunPlan,
    *,
    saved_split: bool | None = None,
    split: bool | None = None,
) -> None:
    """ConfigError naming every field whose change alters the run state's shapes.

    Shape fields: :func:`shape_fields` of the saved run (``saved_cfg``, of algorithm
    ``saved_algo``); and the placement when it switches between split and single for an
    off-policy algorithm (the split keeps an extra observation-only buffer).
    ``saved_split`` / ``split`` are the resolved placements, when known (``split``: the
    plan's placement's, if not given).
    """
    cfg = plan.cfg
    if split is None and plan.placement is not None:
        split = plan.placement.split
    changed = []
    for name in shape_fields(saved_algo):
        old = _get(saved_cfg, name)
        try:
            new = _get(cfg, name)
        except AttributeError:
            new = None
        if old != new:
            changed.append((name, old, new))
    off_policy = not plan.on_policy
    if saved_split is not None and split is not None and saved_split != split and off_policy:
        where = lambda s: "split" if s else "single"
        changed.append(("placement", where(saved_split), where(split)))
    if changed:
        listing = ", ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changed)
        raise ConfigError(
            changed[0][0],
            "cannot resume: these settings change the shapes or the inputs of the saved "
            f"state: {listing}; resume with the run's own values (its config.json) or start a new run",
        )


def _initial_agent(
    cfg: RunConfig, spec: AlgoSpec, plan: RunPlan, algo_cfg: Any
) -> dict[str, np.ndarray]:
    """The initial agent state of one seed of ``cfg`` (of algorithm ``spec``; its env is
    the plan's) with ``algo_cfg``, by leaf path."""
    algo = spec.make(algo_cfg, plan.env_spec, cfg)
    agent = algo.init(jax.random.key(0))
    return {
        jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(agent)[0]
        if not is_hyperparameter(path)
    }


def start_only_fields(saved_cfg: RunConfig, spec: AlgoSpec, plan: RunPlan) -> dict[str, str]:
    """The changed fields that act only when a run starts: ``{field: why}``.

    The saved run is ``saved_cfg`` of algorithm ``spec``; the new one ``plan`` (of the
    same algorithm and env, else :func:`check_compatible` refuses it first). RunConfig's
    ``start`` fields (``learning_starts`` for off-policy algorithms only), and each
    changed field of the algorithm whose change alters a leaf of the initial agent state
    other than a hyperparameter leaf (e.g. ``sac.init_alpha`` sets the initial
    temperature): a resumed state carries what that leaf has become.
    """
    out: dict[str, str] = {}
    cfg = plan.cfg
    for name in KINDS["start"]:
        if spec.on_policy and name in KINDS["off_policy"]:
            continue
        if getattr(saved_cfg, name) != getattr(cfg, name):
            out[name] = "it acts only when a run starts (the saved state carries its effect)"
    old_algo, new_algo = getattr(saved_cfg, spec.name), getattr(cfg, spec.name)
    shape = ALGO_SHAPE[spec.name]
    changed = [
        f.name
        for f in dataclasses.fields(old_algo)
        if f.name not in shape and getattr(old_algo, f.name) != getattr(new_algo, f.name)
    ]
    if not changed:
        return out
    base = _initial_agent(saved_cfg, spec, plan, old_algo)
    for name in changed:
        variant = dataclasses.replace(old_algo, **{name: getattr(new_algo, name)})
        leaves = _initial_agent(saved_cfg, spec, plan, variant)
        moved = [
            p
            for p, v in leaves.items()
            if p not in base or v.shape != base[p].shape or not np.array_equal(v, base[p])
        ]
        if moved:
            out[f"{saved_cfg.algo}.{name}"] = (
                f"it only sets the initial {moved[0]} (the saved state carries what it became)"
            )
    return out


def check_start_fields(saved_cfg: RunConfig, spec: AlgoSpec, plan: RunPlan) -> None:
    """ConfigError naming every changed field that acts only when a run starts
    (:func:`start_only_fields`)."""
    cfg = plan.cfg
    refused = start_only_fields(saved_cfg, spec, plan)
    if refused:
        listing = "; ".join(
            f"{name} {_get(saved_cfg, name)!r} -> {_get(cfg, name)!r}: {why}"
            for name, why in refused.items()
        )
        raise ConfigError(
            next(iter(refused)),
            f"cannot resume with a changed start setting ({listing}); resume with the run's "
            "own value (its config.json) or start a new run",
        )


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_changes(saved_cfg: RunConfig, cfg: RunConfig) -> dict[str, tuple[Any, Any]]:
    """Every field (dotted for algorithm fields) whose value differs: ``{name: (old, new)}``."""
    old, new = _flat(config_lib.to_dict(saved_cfg)), _flat(config_lib.to_dict(cfg))
    return {
        k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
    }


__all__ = [
    "ResumePoint",
    "apply_hyperparameters",
    "check_compatible",
    "check_start_fields",
    "config_changes",
    "find",
    "restore",
    "shape_fields",
    "start_only_fields",
]
