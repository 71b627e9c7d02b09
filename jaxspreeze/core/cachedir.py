"""The compile cache's directory on disk: where it is, whether it may be trusted, what it
holds, and its size cap.

One directory holds two kinds of entries: JAX's persistent compilation cache (files
``<key>-cache``, with ``<key>-atime`` beside each when JAX keeps use times) and
jaxspreeze's kept programs (``programs/*.jaxexe``, :mod:`jaxspreeze.core.programs`). Both are
machine code that a later process loads, so a kept program is loaded only from a
directory the user owns and nobody else can write (:func:`distrust`), as ssh treats its
keys. The size cap evicts the least recently used entries of either kind
(:func:`evict`); ``jaxspreeze cache`` lists, clears and caps the directory.

Imports nothing heavy: the ``cache`` command answers without starting JAX.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_DIR = "JAXSPREEZE_CACHE_DIR"  # the default directory, when --compile-cache is ''
ENV_MAX_SIZE = "JAXSPREEZE_CACHE_MAX_SIZE"  # the size cap, e.g. "4GB"; "0" or "off": none
DEFAULT_MAX_SIZE = 4 * 2**30
PROGRAMS = "programs"  # the kept programs' sub-directory
PROGRAM_SUFFIX = ".jaxexe"
FORMAT = "jaxspreeze-programs-2"  # a kept program's header names it
_JAX_SUFFIX, _ATIME_SUFFIX = "-cache", "-atime"
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20,
          "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40,
          "tib": 2**40}  # fmt: skip


def default_dir() -> Path:
    """``$JAXSPREEZE_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxspreeze/xla`` (``~/.cache``)."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jaxspreeze" / "xla"


def directory(setting: str) -> Path | None:
    """The cache directory a ``--compile-cache`` setting names ('' the default, 'off' none)."""
    if setting == "off":
        return None
    return Path(setting) if setting else default_dir()


def parse_size(text: str) -> int:
    """``"4GB"`` -> bytes (units B, K/KB/KiB, M.., G.., T..; powers of 1024); ValueError
    naming the accepted form otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size: write e.g. 4GB, 500MB or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def max_size() -> int | None:
    """The size cap in bytes (``$JAXSPREEZE_CACHE_MAX_SIZE``, default 4 GiB); None: no cap."""
    text = os.environ.get(ENV_MAX_SIZE, "").strip()
    if text.lower() in ("0", "off", "none"):
        return None
    return parse_size(text) if text else DEFAULT_MAX_SIZE


def human(n: float) -> str:
    """Bytes as a short figure: ``"3.2 MB"``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def unwritable(path: Path) -> str | None:
    """Why ``path`` (a cache directory, existing or to be made) cannot be written, or None."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def distrust(path: Path) -> str | None:
    """Why machine code kept in ``path`` (a kept-programs directory) must not be loaded, or
    None when it may: it and the directory above it, where they exist, must be owned by
    this user and not writable by its group or others (else another user, e.g. through a
    shared ``/tmp`` folder, could plant a program that runs as the user who trains)."""
    if not hasattr(os, "getuid"):
        return None
    path = Path(path).absolute()
    for p in (path, path.parent):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if st.st_uid != os.getuid():
            return (
                f"{p} is owned by another user (uid {st.st_uid}): use a cache directory of your own"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{p} is writable by others: run `chmod go-w {p}` or use a directory of your own"
    return None


@dataclass(frozen=True)
class Entry:
    """One cache entry: ``kind`` is ``"program"`` (a kept program) or ``"xla"`` (JAX's)."""

    path: Path
    kind: str
    size: int
    used: float  # seconds since the epoch of its last use (JAX's atime, or the file's mtime)
    label: str  # what it was compiled for (programs: the run; JAX's entries: "-")

    def remove(self) -> None:
        """Delete the entry (and JAX's use-time file beside it)."""
        for p in (self.path, _atime_path(self.path)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass


def time_untimed(directory: Path) -> int:
    """Give every JAX entry in ``directory`` that lacks its use-time file one (its file's
    modification time); returns how many. JAX writes use times only while a size cap is
    set, and with the cap on it reads one for every entry before each write: an entry left
    by a run without the cap (or by an older jaxspreeze) would make every later write fail
    with a warning."""
    timed = 0
    for path in directory.glob(f"*{_JAX_SUFFIX}") if directory.is_dir() else []:
        atime = _atime_path(path)
        if atime.exists():
            continue
        try:
            atime.write_bytes(path.stat().st_mtime_ns.to_bytes(8, "little"))
            timed += 1
        except OSError:  # removed meanwhile, or not ours to write: JAX will say
            continue
    return timed


def _atime_path(path: Path) -> Path:
    return path.with_name(path.name[: -len(_JAX_SUFFIX)] + _ATIME_SUFFIX)


def _jax_used(path: Path, st: os.stat_result) -> float:
    try:
        ns = int.from_bytes(_atime_path(path).read_bytes()[:8], "little")
        return ns / 1e9
    except (OSError, ValueError):
        return st.st_mtime


def entries(root: Path, label_of=None) -> list[Entry]:
    """Every entry under ``root``, least recently used first. ``label_of(path)`` names a
    kept program's run (:func:`jaxspreeze.core.programs.label`); without it, "-"."""
    found: list[Entry] = []
    for path in sorted(root.glob(f"*{_JAX_SUFFIX}")) if root.is_dir() else []:
        st = path.stat()
        found.append(Entry(path, "xla", st.st_size, _jax_used(path, st), "-"))
    programs = root / PROGRAMS
    for path in sorted(programs.glob(f"*{PROGRAM_SUFFIX}")) if programs.is_dir() else []:
        st = path.stat()
        label = label_of(path) if label_of is not None else "-"
        found.append(Entry(path, "program", st.st_size, st.st_mtime, label))
    return sorted(found, key=lambda e: e.used)


def evict(root: Path, limit: int, keep: Path | None = None) -> list[Entry]:
    """Remove the least recently used entries until ``root`` holds at most ``limit`` bytes
    (``keep``: an entry never removed, e.g. the one just written); returns the removed."""
    found = entries(root)
    total = sum(e.size for e in found)
    removed = []
    for e in found:
        if total <= limit:
            break
        if keep is not None and e.path == keep:
            continue
        e.remove()
        total -= e.size
        removed.append(e)
    return removed


def clear(root: Path) -> int:
    """Remove every entry (both kinds, and stale temporary files); returns bytes freed."""
    freed = sum(e.size for e in entries(root))
    for e in entries(root):
        e.remove()
    programs = root / PROGRAMS
    if programs.is_dir():
        for p in programs.iterdir():  # crash marks, temporaries
            if p.is_file():
                p.unlink(missing_ok=True)
            elif p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
    return freed


def age(seconds_since_epoch: float) -> str:
    """``"3 h"``, ``"2 d"``: how long ago."""
    s = max(time.time() - seconds_since_epoch, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit}"
    return f"{s:.0f} s"


CPUINFO = "/proc/cpuinfo"
NVIDIA_DRIVER = "/proc/driver/nvidia/version"


def cpu_identity(cpuinfo: str = CPUINFO) -> str:
    """What machine code built here assumes of the CPU: its model and its features (Linux:
    the first processor's ``model name`` and ``flags`` in ``/proc/cpuinfo``; ARM: its
    ``CPU implementer``/``CPU part`` and ``Features``), with the architecture; elsewhere
    the architecture and ``platform.processor()``. A program kept on one CPU is not
    loaded on another: XLA builds for the features of the CPU it compiles on, and a
    program using one the CPU lacks dies at its first instruction (SIGILL)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block
                    continue
                key, colon, value = line.partition(":")
                if colon:
                    fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    features = fields.get("flags") or fields.get("features") or ""
    model = (
        fields.get("model name")
        or " ".join(
            fields.get(k, "") for k in ("cpu implementer", "cpu part", "cpu variant")
        ).strip()
    )
    if not model and not features:  # no /proc/cpuinfo: what the platform says
        model = platform.processor() or "-"
    return f"{platform.machine()} | {model} | {' '.join(sorted(features.split()))}"


def driver_version(path: str = NVIDIA_DRIVER) -> str:
    """The accelerator driver's version line where the system says it (NVIDIA on Linux),
    else "-": a program built for one driver's GPU code is not loaded under another."""
    try:
        with open(path, errors="replace") as f:
            return f.readline().strip() or "-"
    except OSError:
        return "-"


def header(payload: bytes, name: str, label: str) -> bytes:
    """A kept program's first line: its format, the SHA-256 and length of the payload after it,
    and what it is (the program's name, the run's label, when)."""
    head = {"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest(),
            "bytes": len(payload), "name": name, "label": label, "created": time.time()}  # fmt: skip
    return json.dumps(head, sort_keys=True).encode() + b"\n"


def read_header(data: bytes) -> dict[str, Any] | None:
    line, newline, _ = data[:4096].partition(b"\n")
    if not newline:
        return None
    try:
        head = json.loads(line)
    except ValueError:
        return None
    return head if isinstance(head, dict) and head.get("format") == FORMAT else None


def verified(data: bytes) -> tuple[bytes | None, str]:
    """The payload of an entry whose bytes match its header, or None and why not."""
    head = read_header(data)
    if head is None:
        return None, "it has no valid header (another format, or damaged)"
    payload = data[data.index(b"\n") + 1 :]
    if len(payload) != head.get("bytes"):
        return None, f"it is truncated ({len(payload):,} of {head.get('bytes'):,} bytes)"
    if hashlib.sha256(payload).hexdigest() != head.get("sha256"):
        return None, "its checksum does not match (damaged)"
    return payload, ""


def label(path: Path) -> str:
    """What the kept program at ``path`` was compiled for ("name: label"), from its header."""
    try:
        with open(path, "rb") as f:
            head = read_header(f.read(4096))
    except OSError:
        head = None
    if head is None:
        return "? (no valid header)"
    return f"{head.get('name', '?')}: {head.get('label') or '-'}"
