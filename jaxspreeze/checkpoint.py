"""Checkpoints: the whole run state on disk, written atomically; ``jaxspreeze eval``.

A checkpoint is a directory ``<run_dir>/checkpoints/<env_steps, 12 digits>/`` holding

- ``arrays.bin``: the raw bytes of every leaf of the :class:`~jaxspreeze.loop.TrainState`
  pytree (all parameters, optimiser states, targets, temperature, replay buffer contents
  with its index and size, env states, PRNG keys as their raw ``key_data``, counters,
  normaliser statistics), exactly as the device held them (bitwise, same dtype), one
  after the other at 64-byte aligned offsets;
- ``manifest.json``: the key path, dtype, shape, offset and PRNG implementation of each
  leaf, the host-side counters (``env_steps``, ``chunk``) and the caller's ``extra``;
- ``config.json``: the run's :class:`~jaxspreeze.config.RunConfig`.

Writes are atomic: everything goes to a hidden ``.tmp-*`` directory next to the final one,
is fsynced, and is renamed into place in one ``rename(2)``; a crash at any point leaves the
previous checkpoints intact, and :func:`latest` never returns a half-written one. Old
checkpoints are removed the same way (renamed away, then deleted).

Why not orbax: this state has typed PRNG keys, bool and int leaves, and a split placement
whose halves must come back on their own devices; one raw file plus a JSON manifest gives
a bitwise round trip with full control of atomicity (and a test hook inside the write),
one fsync per checkpoint, a memory-mapped restore of a large replay buffer, and the module
imports in milliseconds where orbax takes about 2.5 s. Host memory: :func:`save` copies one
leaf at a time to the host.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxspreeze.config import RunConfig
from jaxspreeze.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from jaxspreeze.loop import TrainState

FORMAT = 1
DIGITS = 12
CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"

# Test hook: called with a stage name ("leaf:<i>", "before_commit", "after_commit") while a
# checkpoint is written, so a test can kill the process at a chosen point inside a save.
_HOOK: Callable[[str], None] | None = None

# Config fields of each algorithm that change the shapes of its state (besides RunConfig's).
# An algorithm module may declare its own ``SHAPE_FIELDS`` tuple, which takes precedence.
ALGO_SHAPE_FIELDS: dict[str, tuple[str, ...]] = {
    "sac": ("hidden",),
    "td3": ("hidden",),
    "ddpg": ("hidden",),
    "ppo": ("hidden", "normalize_obs"),
}


# ------------------------------------------------------------------------------ paths
def checkpoint_dir(run_dir: str | Path) -> Path:
    """The directory that holds a run's checkpoints."""
    return Path(run_dir) / CHECKPOINTS


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temp and half-deleted dirs ignored)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir() if p.name.isdigit() and p.is_dir() and (p / MANIFEST).is_file()
    ]
    return sorted(found, key=lambda p: int(p.name))


def latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (None when there is none)."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


# ------------------------------------------------------------------------------ save
def _is_key(x: Any) -> bool:
    import jax

    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_host(x: Any) -> tuple[np.ndarray, str | None]:
    """A host copy of one leaf and its PRNG implementation name (None for plain arrays)."""
    import jax

    if _is_key(x):
        return np.asarray(jax.random.key_data(x)), str(jax.random.key_impl(x))
    return np.asarray(x), None


ALIGN = 64
DATA = "arrays.bin"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def _remove(path: Path) -> None:
    """Delete a directory atomically from a reader's view: rename it away, then delete."""
    trash = path.parent / f".trash-{path.name}-{uuid.uuid4().hex[:8]}"
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _hook(stage: str) -> None:
    if _HOOK is not None:
        _HOOK(stage)


def save(
    run_dir: str | Path,
    state: TrainState,
    *,
    env_steps: int,
    chunk: int,
    extra: dict[str, Any] | None = None,
    keep: int = 2,
    config: RunConfig | None = None,
    require_finite: bool = True,
) -> Path:
    """Write the whole ``state`` as ``<run_dir>/checkpoints/<env_steps>``; returns its path.

    Blocks until every leaf is on the host and on disk, so call it *before* handing
    ``state`` to the next (donating) ``Loop.chunk``. ``config`` defaults to the run's
    ``config.json``. An existing checkpoint at the same step is replaced. Only the newest
    ``keep`` checkpoints are kept. With ``require_finite`` (default) a NaN or inf in any
    floating leaf of ``state.agent`` (parameters, targets, optimiser states, temperature)
    raises :class:`~jaxspreeze.errors.NonFiniteError` and nothing is committed, so the
    last good checkpoint stays the latest.
    """
    import jax

    from jaxspreeze import config as config_lib
    from jaxspreeze.metrics import clean

    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    run_dir = Path(run_dir)
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # left by a crashed save: never a valid checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    for stale in root.glob(".trash-*"):
        shutil.rmtree(stale, ignore_errors=True)

    name = f"{int(env_steps):0{DIGITS}d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)

    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    entries = []
    nonfinite: list[str] = []
    with open(tmp / DATA, "wb") as f:
        for i, (path, leaf) in enumerate(leaves_with_paths):
            arr, key_impl = _to_host(leaf)
            f.write(b"\0" * (-f.tell() % ALIGN))
            entries.append(
                {
                    "path": jax.tree_util.keystr(path),
                    "offset": f.tell(),
                    "nbytes": int(arr.nbytes),
                    "dtype": arr.dtype.name,
                    "shape": list(arr.shape),
                    "key_impl": key_impl,
                }
            )
            f.write(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
            key_str = entries[-1]["path"]
            if (
                require_finite
                and key_str.startswith(".agent")
                and np.issubdtype(arr.dtype, np.inexact)
                and not np.isfinite(arr).all()
            ):
                nonfinite.append(key_str)
            del arr
            _hook(f"leaf:{i}")
        f.flush()
        os.fsync(f.fileno())
    if nonfinite:
        from jaxspreeze.errors import NonFiniteError

        shutil.rmtree(tmp, ignore_errors=True)
        raise NonFiniteError(
            f"not saving the state at env step {int(env_steps)}: non-finite values in "
            f"{len(nonfinite)} leaves, e.g. {nonfinite[0]}; the last good checkpoint is kept"
        )

    if config is not None:
        cfg_data = config_lib.to_dict(config)
    elif (run_dir / "config.json").is_file():
        cfg_data = json.loads((run_dir / "config.json").read_text())
    else:
        cfg_data = None
    if cfg_data is not None:
        _write_json(tmp / "config.json", cfg_data)
    manifest = {
        "format": FORMAT,
        "env_steps": int(env_steps),
        "chunk": int(chunk),
        "extra": clean(extra or {}),
        "created": time.time(),
        "jax": jax.__version__,
        "treedef": str(treedef),
        "leaves": entries,
    }
    _write_json(tmp / MANIFEST, manifest)  # written last: a dir without it is incomplete
    _fsync_dir(tmp)
    _hook("before_commit")

    # commit: one rename makes the checkpoint visible, complete
    replaced = None
    if final.exists():  # same step saved before: move it aside, delete after the commit
        replaced = root / f".trash-{name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, replaced)
    os.rename(tmp, final)
    _fsync_dir(root)
    _hook("after_commit")
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)

    for old in list_checkpoints(run_dir)[:-keep]:
        _remove(old)
    _fsync_dir(root)
    return final


# ------------------------------------------------------------------------------ restore
def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the checkpoint at ``path`` (CheckpointError if incomplete)."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST})")
    manifest = json.loads(file.read_text())
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {manifest.get('format')!r}")
    return manifest


def read_config(path: str | Path) -> RunConfig | None:
    """The RunConfig stored with the checkpoint at ``path`` (None if it has none)."""
    from jaxspreeze import config as config_lib

    file = Path(path) / "config.json"
    return config_lib.load(file) if file.is_file() else None


def _placement_of(leaf: Any) -> Any:
    """Where a template leaf lives: its sharding (arrays) or None (default device)."""
    return getattr(leaf, "sharding", None)


def restore(
    path: str | Path, template: TrainState, *, partial: bool = False
) -> tuple[TrainState, dict[str, Any]]:
    """Load the checkpoint at ``path`` into the structure of ``template``.

    Each leaf comes back bitwise, with the template leaf's dtype, on the template leaf's
    device(s) (so the split placement's actor and critic halves return to their own
    devices). ``template`` is typically a fresh ``Loop.init()`` of the same config; its
    values are not read. With ``partial=True`` saved leaves that the template lacks are
    skipped (e.g. evaluating a split-placement run on one device).

    Returns ``(state, info)``; ``info`` has ``env_steps``, ``chunk``, ``extra``,
    ``config`` (a RunConfig or None) and ``path``.
    """
    import jax

    path = Path(path)
    manifest = read_manifest(path)
    saved = {e["path"]: e for e in manifest["leaves"]}
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    wanted = [jax.tree_util.keystr(p) for p, _ in leaves_with_paths]

    missing = [p for p in wanted if p not in saved]
    extra = [p for p in saved if p not in set(wanted)]
    if missing or (extra and not partial):
        parts = []
        if missing:
            parts.append(f"the checkpoint lacks {len(missing)} leaves, e.g. {missing[0]}")
        if extra and not partial:
            parts.append(f"it has {len(extra)} leaves the state lacks, e.g. {extra[0]}")
        raise CheckpointError(
            f"{path} does not match this run's state ({'; '.join(parts)}): the algorithm, "
            "its networks or the placement (split keeps an observation-only buffer) differ"
        )

    file = path / DATA
    data = (
        np.memmap(file, dtype=np.uint8, mode="r") if file.stat().st_size else np.zeros(0, np.uint8)
    )
    out = []
    for key_path, leaf in zip(wanted, (leaf for _, leaf in leaves_with_paths), strict=True):
        entry = saved[key_path]
        is_key = _is_key(leaf)
        want_dtype = np.dtype(jax.random.key_data(leaf).dtype) if is_key else np.dtype(leaf.dtype)
        want_shape = tuple(np.shape(jax.random.key_data(leaf)) if is_key else np.shape(leaf))
        if entry["dtype"] != want_dtype.name or tuple(entry["shape"]) != want_shape:
            raise CheckpointError(
                f"{path}: leaf {key_path} is {entry['dtype']}{entry['shape']} in the "
                f"checkpoint but {want_dtype.name}{list(want_shape)} in this run; the config "
                "changed a shape (see checkpoint.check_compatible)"
            )
        if is_key and entry["key_impl"] != str(jax.random.key_impl(leaf)):
            raise CheckpointError(
                f"{path}: leaf {key_path} holds {entry['key_impl']} keys, the run uses "
                f"{jax.random.key_impl(leaf)}"
            )
        raw = data[entry["offset"] : entry["offset"] + entry["nbytes"]]
        arr = np.array(raw).view(want_dtype).reshape(want_shape)  # a copy, off the mmap
        placement = _placement_of(leaf)
        value = jax.device_put(arr, placement)
        if is_key:
            value = jax.random.wrap_key_data(value, impl=entry["key_impl"])
            if placement is not None:
                value = jax.device_put(value, placement)
        out.append(value)
    state = jax.tree_util.tree_unflatten(treedef, out)
    info = {
        "env_steps": manifest["env_steps"],
        "chunk": manifest["chunk"],
        "extra": manifest.get("extra", {}),
        "config": read_config(path),
        "path": path,
    }
    return state, info


# ------------------------------------------------------------------------------ resume checks
def _shape_fields(cfg: RunConfig) -> list[str]:
    from jaxspreeze import algos

    fields = ["algo", "env", "num_envs", "num_seeds"]
    if cfg.algo != "ppo":
        fields.append("buffer_size")
    try:
        module = algos.get(cfg.algo)
        own = getattr(module, "SHAPE_FIELDS", ALGO_SHAPE_FIELDS.get(cfg.algo, ("hidden",)))
    except ValueError:
        own = ()
    fields += [f"{cfg.algo}.{name}" for name in own]
    return fields


def _get(cfg: RunConfig, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def check_compatible(
    saved_cfg: RunConfig,
    cfg: RunConfig,
    *,
    saved_split: bool | None = None,
    split: bool | None = None,
) -> None:
    """ConfigError naming every field whose change alters the run state's shapes.

    Shape fields: algo, env, num_envs, num_seeds, buffer_size (off-policy), the
    algorithm's network widths (``<algo>.hidden``) and whatever else its module lists
    in ``SHAPE_FIELDS``; and the placement when it switches between split and single
    for an off-policy algorithm (the split keeps an extra observation-only buffer).
    ``saved_split`` / ``split`` are the resolved placements, when known.
    """
    changed = []
    for name in _shape_fields(saved_cfg):
        old = _get(saved_cfg, name)
        try:
            new = _get(cfg, name)
        except AttributeError:
            new = None
        if old != new:
            changed.append((name, old, new))
    if saved_split is not None and split is not None and saved_split != split and cfg.algo != "ppo":
        where = lambda s: "split" if s else "single"
        changed.append(("placement", where(saved_split), where(split)))
    if changed:
        listing = ", ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changed)
        raise ConfigError(
            changed[0][0],
            f"cannot resume: these settings change the shapes of the saved state: {listing}; "
            "resume with the run's own values (its config.json) or start a new run",
        )


def config_changes(saved_cfg: RunConfig, cfg: RunConfig) -> dict[str, tuple[Any, Any]]:
    """Every field (dotted for algorithm fields) whose value differs: ``{name: (old, new)}``.

    Useful on resume to print what changed. Note that learning rates, gamma and tau are
    leaves of the saved state: a resumed run keeps the checkpoint's values.
    """
    from jaxspreeze import config as config_lib

    def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    old, new = flat(config_lib.to_dict(saved_cfg)), flat(config_lib.to_dict(cfg))
    return {
        k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
    }


def saved_split(path: str | Path) -> bool:
    """Whether the checkpoint at ``path`` was written by a split placement."""
    return any(e["path"].startswith(".obs_buffer") for e in read_manifest(path)["leaves"])


# ------------------------------------------------------------------------------ eval CLI
def evaluate_checkpoint(
    run_dir: str | Path, episodes: int | None = None, seed: int | None = None
) -> dict[str, Any]:
    """Restore the latest checkpoint of ``run_dir`` and evaluate its policy, per seed.

    Returns ``{"checkpoint", "env_steps", "episodes", "return_mean", "return_std",
    "length_mean"}`` (lists over seeds). Raises CheckpointError if there is none.
    """
    import jax

    from jaxspreeze import devices
    from jaxspreeze.envs import make_env
    from jaxspreeze.evaluate import make_evaluate
    from jaxspreeze.loop import Loop, TrainState

    run_dir = Path(run_dir)
    path = latest(run_dir)
    if path is None:
        raise CheckpointError(f"{run_dir} has no checkpoint (looked in {checkpoint_dir(run_dir)})")
    cfg = read_config(path)
    if cfg is None and (run_dir / "config.json").is_file():
        from jaxspreeze import config as config_lib

        cfg = config_lib.load(run_dir / "config.json")
    if cfg is None:
        raise CheckpointError(f"{path} has no config.json, and neither has {run_dir}")
    episodes = episodes or cfg.eval_episodes
    loop = Loop(cfg, devices.single())
    # only the agent is needed: a template without the (possibly huge) replay buffer
    agent = jax.jit(jax.vmap(loop.algo.init))(jax.random.split(jax.random.key(0), cfg.num_seeds))
    template = TrainState(*[None] * len(TrainState._fields))._replace(agent=agent)
    state, info = restore(path, template, partial=True)
    eval_env = make_env(cfg.env, episodes)
    evaluate = jax.jit(jax.vmap(make_evaluate(loop.algo.act, eval_env)))
    seed = cfg.seed + 10_000 if seed is None else seed
    keys = jax.random.split(jax.random.key(seed), cfg.num_seeds)
    result = jax.device_get(evaluate(state.agent.actor, keys))
    return {
        "checkpoint": str(path),
        "env_steps": info["env_steps"],
        "episodes": episodes,
        "return_mean": np.asarray(result.return_mean).tolist(),
        "return_std": np.asarray(result.return_std).tolist(),
        "length_mean": np.asarray(result.length_mean).tolist(),
    }


def main(argv: Sequence[str]) -> int:
    """``jaxspreeze eval RUN_DIR [--episodes N] [--seed S] [--json]``."""
    parser = argparse.ArgumentParser(
        prog="jaxspreeze eval",
        description="Evaluate the latest checkpoint of a run directory: one deterministic "
        "episode per env, N envs, every seed of the run.",
    )
    parser.add_argument("run_dir", help="a run directory (holds checkpoints/)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per seed")
    parser.add_argument("--seed", type=int, default=None, help="evaluation seed")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    if args.episodes is not None and args.episodes < 1:
        print("jaxspreeze: error: --episodes: must be >= 1", file=sys.stderr)
        return 2
    try:
        result = evaluate_checkpoint(args.run_dir, args.episodes, args.seed)
    except (CheckpointError, ConfigError) as e:
        print(f"jaxspreeze: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
        return 0
    means, stds = result["return_mean"], result["return_std"]
    print(f"checkpoint: {result['checkpoint']} ({result['env_steps']} env steps per seed)")
    for i, (m, s) in enumerate(zip(means, stds, strict=True)):
        print(f"  seed {i}: return {m:.2f} +- {s:.2f} over {result['episodes']} episodes")
    if len(means) > 1:
        print(f"  mean over seeds: {np.mean(means):.2f} (std {np.std(means):.2f})")
    return 0
