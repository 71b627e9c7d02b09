"""Checkpoints: the whole run state on disk, written atomically; finding the newest intact one.

A checkpoint is a directory ``<run_dir>/checkpoints/<env_steps, 12 digits>/`` holding

- ``arrays.bin``: the raw bytes of every leaf of the :class:`~jaxspreeze.schedules.iteration.TrainState`
  pytree (all parameters, optimiser states, targets, temperature, replay buffer contents
  with its index and size, env states, PRNG keys as their raw ``key_data``, counters,
  normaliser statistics), exactly as the device held them (bitwise, same dtype), one
  after the other at 64-byte aligned offsets;
- ``manifest.json``: the key path, dtype, shape, offset, PRNG implementation and CRC-32
  of each leaf, the host-side counters (``env_steps``, ``chunk``) and the caller's ``extra``;
- ``config.json``: the run's :class:`~jaxspreeze.setup.config.RunConfig`.

Writes are atomic: everything goes to a hidden ``.tmp-*`` directory next to the final one,
is fsynced, and is renamed into place in one ``rename(2)``; a crash at any point leaves the
previous checkpoints intact, and :func:`latest` never returns a half-written one; a save
that fails (e.g. the disk is full) removes its temp directory before it raises. Old
checkpoints are removed the same way (renamed away, then deleted).

Damage after the fact (a truncated ``arrays.bin``, flipped bytes, a malformed manifest) is
caught by the per-leaf checksums: :func:`verify` checks a whole checkpoint,
:func:`restore` every leaf it reads, and :func:`newest_intact` finds the newest
checkpoint that passes (what a resume and ``jaxspreeze eval`` use).

Why not orbax: this state has typed PRNG keys, bool and int leaves, and a split placement
whose halves must come back on their own devices; one raw file plus a JSON manifest gives
a bitwise round trip with full control of atomicity, one fsync per checkpoint, a memory-mapped restore of a large replay buffer, and the module
imports in milliseconds where orbax takes about 2.5 s. Host memory: :func:`save` copies one
leaf at a time to the host.

Whether a checkpoint may be resumed with a given config is :mod:`jaxspreeze.store.resume`'s
question; :func:`find` and :func:`saved_config` are what ``jaxspreeze eval`` reads
(:mod:`jaxspreeze.run.checkpoint_eval`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze.algos import members
from jaxspreeze.core.errors import CheckpointError, ConfigError, NonFiniteError
from jaxspreeze.core.types import clean
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup.config import RunConfig

FORMAT = 1
DIGITS = 12
CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
CONFIG = "config.json"


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
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_host(x: Any) -> tuple[np.ndarray, str | None]:
    """A host copy of one leaf and its PRNG implementation name (None for plain arrays)."""
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
    ``state`` to the next (donating) ``Schedule.chunk``. ``config`` defaults to the run's
    ``config.json``. An existing checkpoint at the same step is replaced. Only the newest
    ``keep`` checkpoints are kept. With ``require_finite`` (default) a NaN or inf in any
    floating leaf of ``state.agent`` (parameters, targets, optimiser states, temperature)
    raises :class:`~jaxspreeze.core.errors.NonFiniteError` and nothing is committed, so the
    last good checkpoint stays the latest. Any failure (an OSError such as a full disk,
    an exception while copying a leaf) removes the temp directory before it propagates.
    """
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
    try:
        _write(tmp, run_dir, state, env_steps, chunk, extra, config, require_finite)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.filename is None:  # a write() names no file: name the checkpoint
            raise OSError(e.errno, e.strerror, str(final)) from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    # commit: one rename makes the checkpoint visible, complete
    replaced = None
    if final.exists():  # same step saved before: move it aside, delete after the commit
        replaced = root / f".trash-{name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, replaced)
    try:
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if replaced is not None and not final.exists():
            os.rename(replaced, final)
        raise
    _fsync_dir(root)
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)

    for old in list_checkpoints(run_dir)[:-keep]:
        _remove(old)
    _fsync_dir(root)
    return final


def _write(
    tmp: Path,
    run_dir: Path,
    state: TrainState,
    env_steps: int,
    chunk: int,
    extra: dict[str, Any] | None,
    config: RunConfig | None,
    require_finite: bool,
) -> None:
    """Write ``arrays.bin``, ``config.json`` and (last) ``manifest.json`` into ``tmp``."""
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    entries = []
    nonfinite: list[str] = []
    with open(tmp / DATA, "wb") as f:
        for path, leaf in leaves_with_paths:
            arr, key_impl = _to_host(leaf)
            f.write(b"\0" * (-f.tell() % ALIGN))
            raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data
            entries.append(
                {
                    "path": jax.tree_util.keystr(path),
                    "offset": f.tell(),
                    "nbytes": int(arr.nbytes),
                    "dtype": arr.dtype.name,
                    "shape": list(arr.shape),
                    "key_impl": key_impl,
                    "crc32": zlib.crc32(raw),
                }
            )
            f.write(raw)
            key_str = entries[-1]["path"]
            if (
                require_finite
                and key_str.startswith(".agent")
                and np.issubdtype(arr.dtype, np.inexact)
                and not np.isfinite(arr).all()
            ):
                nonfinite.append(key_str)
            del arr, raw
        f.flush()
        os.fsync(f.fileno())
    if nonfinite:
        previous = latest(run_dir)
        kept = (
            f"the newest checkpoint, {previous}, stays the latest"
            if previous is not None
            else "no checkpoint was written before it"
        )
        raise NonFiniteError(
            f"not saving the state at env step {int(env_steps)}: non-finite values in "
            f"{len(nonfinite)} leaves, e.g. {nonfinite[0]}; {kept}"
        )

    if config is not None:
        cfg_data = config_lib.to_dict(config)
    elif (run_dir / CONFIG).is_file():
        cfg_data = json.loads((run_dir / CONFIG).read_text())
    else:
        cfg_data = None
    if cfg_data is not None:
        _write_json(tmp / CONFIG, cfg_data)
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


# ------------------------------------------------------------------------------ restore
def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the checkpoint at ``path`` (CheckpointError if incomplete or damaged)."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST})")
    try:
        manifest = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{file} is damaged (not valid JSON: {e})") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{file} is damaged (not a JSON object)")
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {manifest.get('format')!r}")
    try:
        int(manifest["env_steps"]), int(manifest["chunk"])
        for e in manifest["leaves"]:
            e["path"], int(e["offset"]), int(e["nbytes"]), np.dtype(e["dtype"]), list(e["shape"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{file} is damaged (a field is missing or malformed: {e})") from None
    return manifest


def read_config(path: str | Path) -> RunConfig | None:
    """The RunConfig stored with the checkpoint at ``path`` (None if it has none)."""
    file = Path(path) / CONFIG
    if not file.is_file():
        return None
    try:
        return config_lib.load(file)
    except ConfigError as e:
        raise CheckpointError(f"{file} is damaged ({e})") from None


def _data(path: Path, manifest: dict[str, Any]) -> np.ndarray:
    """``arrays.bin`` of a checkpoint, memory-mapped; CheckpointError if it is too short."""
    file = path / DATA
    if not file.is_file():
        raise CheckpointError(f"{file} is missing")
    size = file.stat().st_size
    need = max((int(e["offset"]) + int(e["nbytes"]) for e in manifest["leaves"]), default=0)
    if size < need:
        raise CheckpointError(
            f"{file} is damaged (truncated: {size:,} bytes, the manifest needs {need:,})"
        )
    return np.memmap(file, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)


def _check_leaf(file: Path, entry: dict[str, Any], raw: Any) -> None:
    """CheckpointError unless ``raw`` has the CRC-32 the manifest recorded (if it has one)."""
    want = entry.get("crc32")
    if want is not None and zlib.crc32(raw) != want:
        raise CheckpointError(
            f"{file} is damaged (leaf {entry['path']} does not match its checksum)"
        )


def verify(path: str | Path) -> dict[str, Any]:
    """Check a whole checkpoint (manifest, size, every leaf's checksum, config); its manifest.

    Raises :class:`~jaxspreeze.core.errors.CheckpointError` naming the damaged file.
    """
    path = Path(path)
    manifest = read_manifest(path)
    data = _data(path, manifest)
    for entry in manifest["leaves"]:
        start = int(entry["offset"])
        _check_leaf(path / DATA, entry, data[start : start + int(entry["nbytes"])])
    read_config(path)
    return manifest


def newest_intact(run_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint of ``run_dir`` that :func:`verify` passes, and the damaged
    newer ones with the reason for each (newest first)."""
    damaged: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(run_dir)):
        try:
            verify(path)
        except CheckpointError as e:
            damaged.append((path, str(e)))
            continue
        return path, damaged
    return None, damaged


def set_aside(path: str | Path) -> Path:
    """Rename a damaged checkpoint to ``damaged-<name>`` (no longer listed, never pruned)."""
    path = Path(path)
    target = path.with_name(f"damaged-{path.name}")
    if target.exists():
        target = path.with_name(f"damaged-{path.name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, target)
    return target


def _placement_of(leaf: Any) -> Any:
    """Where a template leaf lives: its sharding (arrays) or None (default device)."""
    return getattr(leaf, "sharding", None)


def _put(arr: np.ndarray, sharding: Any) -> jax.Array:
    """``arr`` on ``sharding``; one that spans other processes (a multi-process
    data-parallel run, each process restoring the same checkpoint) keeps this process's
    part of it."""
    if sharding is None or sharding.is_fully_addressable:
        return jax.device_put(arr, sharding)
    return jax.make_array_from_callback(arr.shape, sharding, lambda index: arr[index])


# env-state leaves added since checkpoints were first written (envs.base.ResetInner's
# ``ended`` and ``drawn``: a family with lean resets, Navix and Craftax, holds them): a
# checkpoint from before resumes with the fresh state's values (no episode pending a
# reset; the next step redraws one block's starts, from the reset distribution as ever)
ADDED_ENV_LEAVES = (".inner.ended", ".inner.drawn")


def _is_added(key_path: str) -> bool:
    """Whether a template leaf may be missing from a checkpoint written before it existed."""
    return members.is_added(key_path) or key_path.endswith(ADDED_ENV_LEAVES)


def _added_leaf(path: Path, key_path: str, leaf: Any) -> jax.Array:
    """The template's value of a hyperparameter leaf the checkpoint predates (a copy, on
    the template leaf's devices)."""
    if not isinstance(leaf, (jax.Array, np.ndarray)):
        raise CheckpointError(
            f"{path} predates the leaf {key_path} and the template holds no value for it"
        )
    if not getattr(leaf, "is_fully_addressable", True):
        return leaf  # it spans other processes: the template's own
    return _put(np.array(leaf), _placement_of(leaf))


# one-byte observation dtypes a run keeps since 0.3 (EnvSpec.obs_dtype); a checkpoint
# written before holds those observations as float32
_NARROW = ("bool", "uint8", "int8")


def _widened_obs(entry: dict[str, Any], want: np.dtype, shape: tuple[int, ...]) -> np.dtype | None:
    """float32 when the checkpoint holds as float32 a leaf this run keeps in a one-byte
    observation dtype (same shape): a run saved before observations kept their dtype."""
    if entry["dtype"] == "float32" and want.name in _NARROW and tuple(entry["shape"]) == shape:
        return np.dtype(np.float32)
    return None


def _narrowed(path: Path, key_path: str, arr: np.ndarray, want: np.dtype) -> np.ndarray:
    """``arr`` (float32) in the one-byte dtype ``want``, when every value is exact there."""
    out = arr.astype(want)
    if not np.array_equal(out.astype(np.float32), arr):
        raise CheckpointError(
            f"{path}: leaf {key_path} holds float32 values that are not {want.name}; the "
            "config changed the observations"
        )
    return out


def restore(
    path: str | Path, template: TrainState, *, partial: bool = False, check: bool = True
) -> tuple[TrainState, dict[str, Any]]:
    """Load the checkpoint at ``path`` into the structure of ``template``.

    Each leaf comes back bitwise, with the template leaf's dtype, on the template leaf's
    device(s) (so the split placement's actor and critic halves return to their own
    devices). ``template`` is typically a fresh ``Schedule.init()`` of the same config; its
    values are not read, but for a hyperparameter leaf added since the checkpoint was
    written (``algos.members.ADDED_LEAVES``: a run saved before it lacks it), which is
    taken from the template (a fresh state of the run's config holds the value the run
    trained with). With ``partial=True`` saved leaves that the template lacks are
    skipped (e.g. evaluating a split-placement run on one device). With ``check`` (the
    default) every leaf read is checked against its checksum (CheckpointError when it
    does not match; pass False when :func:`verify` has just checked the whole checkpoint).

    Returns ``(state, info)``; ``info`` has ``env_steps``, ``chunk``, ``extra``,
    ``config`` (a RunConfig or None) and ``path``.
    """
    path = Path(path)
    manifest = read_manifest(path)
    saved = {e["path"]: e for e in manifest["leaves"]}
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    wanted = [jax.tree_util.keystr(p) for p, _ in leaves_with_paths]

    missing = [p for p in wanted if p not in saved and not _is_added(p)]
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

    data = _data(path, manifest)
    out = []
    for key_path, leaf in zip(wanted, (leaf for _, leaf in leaves_with_paths), strict=True):
        if key_path not in saved:  # an added leaf: the fresh state's (the config's) value
            out.append(_added_leaf(path, key_path, leaf))
            continue
        entry = saved[key_path]
        is_key = _is_key(leaf)
        want_dtype = np.dtype(jax.random.key_data(leaf).dtype) if is_key else np.dtype(leaf.dtype)
        want_shape = tuple(np.shape(jax.random.key_data(leaf)) if is_key else np.shape(leaf))
        widened = _widened_obs(entry, want_dtype, want_shape)
        if widened is None and (
            entry["dtype"] != want_dtype.name or tuple(entry["shape"]) != want_shape
        ):
            raise CheckpointError(
                f"{path}: leaf {key_path} is {entry['dtype']}{entry['shape']} in the "
                f"checkpoint but {want_dtype.name}{list(want_shape)} in this run; the config "
                "changed a shape (see resume.check_compatible)"
            )
        if is_key and entry["key_impl"] != str(jax.random.key_impl(leaf)):
            raise CheckpointError(
                f"{path}: leaf {key_path} holds {entry['key_impl']} keys, the run uses "
                f"{jax.random.key_impl(leaf)}"
            )
        raw = data[entry["offset"] : entry["offset"] + entry["nbytes"]]
        if check:
            _check_leaf(path / DATA, entry, raw)
        if widened is not None:  # observations saved as float32 before they kept their dtype
            arr = _narrowed(
                path, key_path, np.array(raw).view(widened).reshape(want_shape), want_dtype
            )
        else:
            arr = np.array(raw).view(want_dtype).reshape(want_shape)  # a copy, off the mmap
        placement = _placement_of(leaf)
        value = _put(arr, placement)
        if is_key:
            value = jax.random.wrap_key_data(value, impl=entry["key_impl"])
            if placement is not None and not value.sharding.is_equivalent_to(placement, value.ndim):
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


def saved_split(path: str | Path) -> bool:
    """Whether the checkpoint at ``path`` was written by a split placement."""
    return any(e["path"].startswith(".obs_buffer") for e in read_manifest(path)["leaves"])


# ---------------------------------------------------------------- reading a saved run
def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is one checkpoint directory (``<run>/checkpoints/<digits>``)."""
    path = Path(path)
    return path.name.isdigit() and path.parent.name == CHECKPOINTS and (path / MANIFEST).is_file()


def find(run_dir: str | Path) -> tuple[Path, Path, list[tuple[Path, str]]]:
    """The checkpoint to read for ``run_dir``: ``(checkpoint, run directory, damaged)``.

    ``run_dir`` is a run directory (its newest intact checkpoint; ``damaged`` lists the
    newer ones skipped, with why) or one of its checkpoint directories
    (``RUN/checkpoints/000000021000``, verified whole). Raises CheckpointError if there is
    none.
    """
    given = Path(run_dir)
    if is_checkpoint(given):
        verify(given)
        return given, given.parent.parent, []
    path, damaged = newest_intact(given)
    if path is None:
        if damaged:
            raise CheckpointError(
                f"{given} has no intact checkpoint: {damaged[0][1]}"
                + (f" (and {len(damaged) - 1} more damaged)" if len(damaged) > 1 else "")
            )
        raise CheckpointError(f"{given} has no checkpoint (looked in {checkpoint_dir(given)})")
    return path, given, damaged


def saved_config(path: Path, run_dir: Path) -> RunConfig:
    """The config of the run that wrote the checkpoint at ``path`` (its own copy, else the
    run directory's ``config.json``); CheckpointError when neither can be read."""
    cfg = read_config(path)
    if cfg is None and (run_dir / CONFIG).is_file():
        try:
            cfg = config_lib.load(run_dir / CONFIG)
        except ConfigError as e:
            raise CheckpointError(f"{run_dir / CONFIG} is damaged ({e})") from None
    if cfg is None:
        raise CheckpointError(f"{path} has no {CONFIG}, and neither has {run_dir}")
    return cfg
