"""The run directory: where one run's files live, ``<logdir>/<run_name>/``, and who owns it.

It holds ``config.json`` (the resolved :class:`~jaxspreeze.setup.config.RunConfig` in effect),
``metrics.jsonl`` / ``metrics.csv`` / ``tb/`` (the sinks), ``checkpoints/``,
``policy.msgpack``, ``summary.json``, the PNGs, ``resumes.jsonl`` (one line per resume:
where it continued from and what changed), ``NOT_STARTED`` (a new run that has written
no checkpoint yet) and ``.lock`` (the process training in it).

The rules:

- **One owner.** A process training in a run directory holds an exclusive lock on its
  ``.lock`` file (``flock``; the file names the holder: pid, host, start) until it ends.
  A second process is refused with a message naming the holder. The OS drops the lock of
  a process that dies (``kill -9`` included), so a lock file left behind is taken over.
- **No run is replaced by accident.** A new run may use a directory that does not exist,
  holds none of a run's files (e.g. only ``autotune.json``), or holds a run that never
  started (``NOT_STARTED`` and no checkpoint: it is replaced). A directory that holds a
  run (a checkpoint, or ``config.json`` without ``NOT_STARTED``) is refused unless the
  run is resumed or ``overwrite`` is given (its files are then removed first).
- **A resume rewrites nothing before it has succeeded**: :meth:`RunDir.commit_resume` runs
  once the checkpoint has been restored.

:func:`claim` makes and locks the directory of a run; everything else reads or writes one
named file of it. Writes of ``config.json`` and ``summary.json`` are atomic.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import Record
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.sinks import files as sink_files
from jaxspreeze.store import checkpoint

CONFIG = "config.json"
SUMMARY = "summary.json"
LOCK = ".lock"
NOT_STARTED = "NOT_STARTED"
RESUMES = "resumes.jsonl"
# a run's own files: what --overwrite removes (autotune's files, written into the run
# directory before the run starts, and anything else stay)
RUN_FILES = (
    CONFIG,
    SUMMARY,
    NOT_STARTED,
    RESUMES,
    "metrics.jsonl",
    "metrics.csv",
    "pbt.jsonl",
    "tb",
    "wandb",
    checkpoint.CHECKPOINTS,
    "policy.msgpack",
    "best",  # the best evaluation's snapshots and journal (run.evalwatch.BEST_DIR)
    "learning_curve.png",
    "throughput.png",
    "render.gif",
    "render.html",
)
# ... and the policy files named per member or best (policy-best.msgpack, policy-<m>.msgpack,
# policy-<m>-best.msgpack): a run with fewer members must not leave a previous run's behind
RUN_FILE_PATTERNS = ("policy-*.msgpack",)
NOT_STARTED_TEXT = (
    "This run has written no checkpoint yet (it was stopped or failed before its first one):\n"
    "it cannot be resumed. Starting a run with the same name replaces it.\n"
)


def default_run_name(cfg: RunConfig) -> str:
    """``<algo>-<env>-<YYYYmmdd-HHMMSS>``."""
    env = cfg.env.replace("/", "-")
    return f"{cfg.algo}-{env}-{time.strftime('%Y%m%d-%H%M%S')}"


def path_of(cfg: RunConfig) -> Path:
    """Where ``cfg``'s run directory is: ``<logdir>/<run_name or the default name>``."""
    return Path(cfg.logdir) / (cfg.run_name or default_run_name(cfg))


def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one rename (a reader sees the old or the new file)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class RunDir:
    """One run directory, its named files and (once :meth:`lock` succeeded) its lock."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.created = False  # made by claim() for a new run
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ---------------------------------------------------------------- files
    @property
    def config_file(self) -> Path:
        """``config.json``: the run's resolved config."""
        return self.path / CONFIG

    @property
    def summary_file(self) -> Path:
        """``summary.json``: the run's summary, written at the end."""
        return self.path / SUMMARY

    def write_config(self, cfg: RunConfig) -> Path:
        """Write ``cfg`` as ``config.json`` (atomically)."""
        _write_atomic(self.config_file, json.dumps(config_lib.to_dict(cfg), indent=2))
        return self.config_file

    def read_config(self) -> RunConfig:
        """The config in ``config.json``."""
        return config_lib.load(self.config_file)

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Write ``summary`` (JSON-ready) as ``summary.json`` (atomically)."""
        _write_atomic(self.summary_file, json.dumps(summary, indent=2))
        return self.summary_file

    # ---------------------------------------------------------------- state
    @property
    def not_started(self) -> bool:
        """True while a new run has written no checkpoint (the ``NOT_STARTED`` marker)."""
        return (self.path / NOT_STARTED).exists()

    def holds_run(self) -> bool:
        """True when the directory holds a run that a new one must not replace silently."""
        if checkpoint.list_checkpoints(self.path):
            return True
        return self.config_file.exists() and not self.not_started

    def describe(self) -> str:
        """What the directory holds, in words (for messages)."""
        newest = checkpoint.latest(self.path)
        if newest is not None:
            return f"a run with a checkpoint at {int(newest.name):,} env steps"
        return "a run (its config.json)"

    def mark_started(self) -> None:
        """Remove the ``NOT_STARTED`` marker (the run has a checkpoint now)."""
        with contextlib.suppress(FileNotFoundError):
            (self.path / NOT_STARTED).unlink()

    def start_new(self, cfg: RunConfig) -> None:
        """Prepare the directory for a new run: remove a previous run's files, mark the run
        ``NOT_STARTED`` and write ``config.json``."""
        self.clear()
        _write_atomic(self.path / NOT_STARTED, NOT_STARTED_TEXT)
        self.write_config(cfg)

    def clear(self) -> None:
        """Remove a run's files (:data:`RUN_FILES`, :data:`RUN_FILE_PATTERNS`); other files
        stay."""
        named = [self.path / name for name in RUN_FILES]
        matched = [p for pattern in RUN_FILE_PATTERNS for p in sorted(self.path.glob(pattern))]
        for target in named + matched:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()

    def commit_resume(
        self, cfg: RunConfig, env_steps: int, entry: dict[str, Any], damaged: list[Path]
    ) -> list[Record]:
        """After a successful restore at ``env_steps``: set the ``damaged`` checkpoints aside,
        drop the metrics records past ``env_steps``, write ``config.json`` and append
        ``entry`` to ``resumes.jsonl``. Returns the records kept (``metrics.jsonl``)."""
        for path in damaged:
            if path.exists():
                checkpoint.set_aside(path)
        kept = sink_files.keep_until(self.path, env_steps)
        self.write_config(cfg)
        with open(self.path / RESUMES, "a") as f:
            f.write(json.dumps(entry) + "\n")
        return kept

    # ---------------------------------------------------------------- the lock
    @property
    def locked(self) -> bool:
        """True while this object holds the directory's lock."""
        return self._lock_fd is not None

    def lock(self, field_name: str) -> None:
        """Take the directory's lock; ConfigError(``field_name``) naming the holder if busy."""
        path = self.path / LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise ConfigError(
                    field_name,
                    f"{self.path} is in use by another run ({holder}); wait for it to end "
                    "or choose another --run-name",
                ) from None
            except OSError as e:  # no flock here (some network file systems): pid check
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    os.close(fd)
                    raise
                self._check_holder_alive(fd, field_name)
            # the holder may have released (and unlinked) the file between open and flock
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        os.write(fd, json.dumps(holder).encode())
        self._lock_fd = fd

    def _check_holder_alive(self, fd: int, field_name: str) -> None:
        """Without flock: refuse when the lock file names a live process on this host."""
        try:
            holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            return
        pid, host = holder.get("pid"), holder.get("host")
        if not pid or pid == os.getpid():
            return
        if host == socket.gethostname():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return  # a stale lock: its process is gone
            except PermissionError:
                pass
        os.close(fd)
        raise ConfigError(
            field_name,
            f"{self.path} is in use by another run ({_describe_holder(holder)}); wait for it "
            f"to end or choose another --run-name (if that process is gone, delete {LOCK})",
        )

    def release(self) -> None:
        """Release the lock (and remove the lock file); a no-op when not held."""
        if self._lock_fd is None:
            return
        with contextlib.suppress(OSError):
            (self.path / LOCK).unlink()
        os.close(self._lock_fd)
        self._lock_fd = None


def _describe_holder(holder: dict[str, Any]) -> str:
    since = holder.get("since")
    when = (
        time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since))
        if isinstance(since, (int, float))
        else ""
    )
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}{when}"


def _holder(fd: int) -> str:
    """Who holds the lock, from the lock file (best effort)."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        holder = {}
    return _describe_holder(holder if isinstance(holder, dict) else {})


def _os_error(e: OSError, field_name: str, what: str, fix: str) -> ConfigError:
    """A ConfigError for a file-system error on the run directory, in one line."""
    reason = (e.strerror or type(e).__name__).lower()
    if e.errno == errno.ENOTDIR:
        reason += " (a part of the path is a file)"
    elif e.errno == errno.EROFS:
        fix = "choose a --logdir on a writable file system"
    return ConfigError(field_name, f"cannot {what} {e.filename or ''}: {reason}; {fix}")


def claim(cfg: RunConfig, *, resume: str | Path | None = None) -> RunDir:
    """Make (if new) and lock the run directory of ``cfg`` (or of ``resume``).

    A default run name (``cfg.run_name`` empty) that is taken gets a suffix (``-2``, ...).
    ConfigError naming ``logdir`` when the directory cannot be made or written, and
    ``run_name`` (``resume``) when another process holds it.
    """
    if resume is not None:
        run = RunDir(resume)
        if not run.path.is_dir():
            raise ConfigError("resume", f"{run.path} is not a run directory")
        field_name = "resume"
    else:
        field_name = "run_name"
        _check_name(cfg)
        try:
            run = _make_new(cfg)
        except OSError as e:
            raise _os_error(
                e, "logdir", "create", "choose a --logdir where you may create directories"
            ) from None
    try:
        run.lock(field_name)
    except OSError as e:
        raise _os_error(
            e, "logdir" if resume is None else "resume", "write in", "choose a writable --logdir"
        ) from None
    return run


def _check_name(cfg: RunConfig) -> None:
    """ConfigError naming ``run_name`` for a name the file system cannot hold (longer than
    its longest file name: 255 bytes on most; a default name made from a long env id
    too), before the directory is made; a part of ``--logdir`` too long names ``logdir``."""
    name = cfg.run_name or default_run_name(cfg)
    try:
        longest = os.pathconf(_existing(Path(cfg.logdir)), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        longest = 255
    if len(name.encode()) > longest:
        raise ConfigError(
            "run_name",
            f"{len(name.encode())} bytes is longer than a file name may be here ({longest}); "
            "choose a shorter --run-name",
        )
    for part in Path(cfg.logdir).parts:
        if len(part.encode()) > longest:
            raise ConfigError(
                "logdir", f"{part[:40]}... is longer than a file name may be here ({longest})"
            )


def _existing(path: Path) -> Path:
    """``path``, or the nearest of its parents that exists."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _make_new(cfg: RunConfig) -> RunDir:
    """Make ``cfg``'s run directory; a default name that is taken gets a free suffix."""
    path = path_of(cfg)
    if cfg.run_name:
        run = RunDir(path)
        run.created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        return run
    base, n = path, 1
    while True:
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")
            continue
        run = RunDir(path)
        run.created = True
        return run


def check_new(run: RunDir, overwrite: bool) -> None:
    """ConfigError("run_name") when ``run`` holds a run and ``overwrite`` is not given."""
    if overwrite or not run.path.exists() or not run.holds_run():
        return
    raise ConfigError(
        "run_name",
        f"{run.path} already holds {run.describe()}; continue it with --resume {run.path}, "
        "replace it with --overwrite, or choose another --run-name",
    )


def release_new(run: RunDir) -> None:
    """Release a directory claimed for a new run that did not start (removed if this run
    made it and nothing was written into it)."""
    run.release()
    if run.created:
        with contextlib.suppress(OSError):
            run.path.rmdir()  # only when empty


def create(cfg: RunConfig) -> RunDir:
    """Make ``cfg``'s run directory and write ``config.json`` into it (no lock, no checks:
    for tools and tests that lay out a run directory by hand; training uses :func:`claim`)."""
    run = RunDir(path_of(cfg))
    run.path.mkdir(parents=True, exist_ok=True)
    run.write_config(cfg)
    return run
