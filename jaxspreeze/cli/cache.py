"""``jaxspreeze cache [list|clear] [--dir DIR] [--max-size SIZE]``: the compile cache on disk.

Lists what the compile cache holds (JAX's compiled programs and jaxspreeze's kept
programs: size, last use, what each was compiled for), clears it, or evicts the least
recently used entries down to a size. Starts no JAX: it reads and removes files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from jaxspreeze.cli.args import parse
from jaxspreeze.cli.common import fail
from jaxspreeze.core import cachedir

DESCRIPTION = (
    "The compile cache (JAX's compiled programs and jaxspreeze's kept programs): list it, "
    "clear it, or evict the least recently used entries down to --max-size. Every run holds "
    f"it under ${cachedir.ENV_MAX_SIZE} (default {cachedir.human(cachedir.DEFAULT_MAX_SIZE)})."
)


@dataclass
class CacheArgs:
    """The options of ``jaxspreeze cache``."""

    action: Annotated[Literal["list", "clear"], tyro.conf.Positional] = "list"
    """list: each entry's kind, size, last use and what it was compiled for; clear: remove
    every entry."""
    dir: Annotated[str, tyro.conf.arg(metavar="DIR")] = ""
    """The cache directory ('' = the one training uses by default: $JAXSPREEZE_CACHE_DIR
    or ~/.cache/jaxspreeze/xla; a run's --compile-cache DIR otherwise)."""
    max_size: Annotated[str, tyro.conf.arg(metavar="SIZE")] = ""
    """Evict the least recently used entries until the cache holds at most SIZE (e.g. 2GB,
    500MB), then list."""


def _table(root: Path) -> list[str]:
    found = cachedir.entries(root, label_of=cachedir.label)
    total = sum(e.size for e in found)
    lines = [f"{root}: {len(found)} entries, {cachedir.human(total)}"]
    if found:
        lines.append(f"{'kind':8} {'size':>9} {'last use':>9}  compiled for")
    for e in reversed(found):  # most recently used first
        used = cachedir.age(e.used) + " ago"
        lines.append(f"{e.kind:8} {cachedir.human(e.size):>9} {used:>9}  {e.label}")
    return lines


def main(argv: Sequence[str]) -> int:
    """List, clear or cap the cache; prints what it did."""
    args = parse(CacheArgs, argv, "jaxspreeze cache", description=DESCRIPTION)
    root = cachedir.directory(args.dir) or cachedir.default_dir()
    limit = None
    if args.max_size:
        try:
            limit = cachedir.parse_size(args.max_size)
        except ValueError as e:
            return fail(f"--max-size: {e}")
    if root.exists() and not root.is_dir():
        return fail(f"--dir: {root} is not a directory")
    if args.action == "clear":
        freed = cachedir.clear(root) if root.is_dir() else 0
        print(f"{root}: cleared, {cachedir.human(freed)} freed")
        return 0
    if limit is not None and root.is_dir():
        removed = cachedir.evict(root, limit)
        freed = sum(e.size for e in removed)
        print(f"evicted {len(removed)} least recently used entries ({cachedir.human(freed)})")
    if not root.is_dir():
        print(f"{root}: no cache here yet")
        return 0
    print("\n".join(_table(root)))
    return 0
