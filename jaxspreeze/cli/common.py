"""What every command shares: one-line errors and exit codes.

Bad input exits :data:`BAD_INPUT` (2) with one line naming the flag (or the file) and how
to fix it; a fault (training diverged, the disk is full, an unexpected error) exits
:data:`FAULT` (1) with one line; neither prints a traceback unless asked for with
``--debug`` or ``JAXSPREEZE_DEBUG=1``. A file-system error names the path and the fix:
a path the user chose that cannot be used (permission, read-only, not a directory, no
such file) is bad input; a full disk or an I/O error is a fault. (Parsing, with tyro, is
:mod:`.args`: kept apart so that ``jaxspreeze --help`` does not import tyro.)
"""

from __future__ import annotations

import errno
import sys

from jaxspreeze.core.errors import ConfigError

BAD_INPUT = 2
FAULT = 1

# errno -> (what happened, how to fix it, exit code)
OS_ERRORS: dict[int, tuple[str, str, int]] = {
    errno.ENOSPC: ("no space left on the device", "free space or choose another --logdir", FAULT),
    errno.EDQUOT: ("disk quota exceeded", "free space or choose another --logdir", FAULT),
    errno.EIO: ("input/output error", "check the disk, or choose another --logdir", FAULT),
    errno.EROFS: ("read-only file system", "choose a writable --logdir", BAD_INPUT),
    errno.EACCES: (
        "permission denied",
        "choose a path you may write (e.g. --logdir) or fix its permissions",
        BAD_INPUT,
    ),
    errno.EPERM: (
        "operation not permitted",
        "choose a path you may write (e.g. --logdir) or fix its permissions",
        BAD_INPUT,
    ),
    errno.ENOTDIR: ("a part of the path is not a directory", "choose another path", BAD_INPUT),
    errno.EISDIR: ("is a directory, a file was expected", "give a file", BAD_INPUT),
    errno.ENOENT: ("no such file or directory", "check the path", BAD_INPUT),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter path", BAD_INPUT),
}


def fail(message: str, code: int = BAD_INPUT) -> int:
    """Print one error line to stderr and return the exit code."""
    print(f"jaxspreeze: error: {message}", file=sys.stderr)
    return code


def flag(field_name: str) -> str:
    """The CLI flag of a config field: ``sac.actor_lr`` -> ``--sac.actor-lr``."""
    return "--" + field_name.replace("_", "-")


def at_least_one(**options: int | None) -> int | None:
    """Report the first option set below 1 (``--name: must be >= 1``): its exit code, or None."""
    for name, value in options.items():
        if value is not None and value < 1:
            return fail(f"{flag(name)}: must be >= 1")
    return None


def config_error(e: ConfigError) -> int:
    """Report a ConfigError as ``--field: how to fix it`` and return the bad-input code."""
    return fail(f"{flag(e.field)}: {str(e).split(': ', 1)[1]}")


def os_error(e: OSError) -> int:
    """Report a file-system error as ``PATH: what happened; how to fix it``."""
    what, fix, code = OS_ERRORS.get(
        e.errno or -1, (e.strerror or str(e), "check the path and try again", FAULT)
    )
    paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
    where = " -> ".join(paths) if paths else "a file of the run"
    return fail(f"{where}: {what}; {fix}", code)


def member_slots(run_dir: str, member: int) -> range:
    """The slots of a population's ``member`` in the run at ``run_dir`` (its config.json);
    ValueError for a member the run does not have."""
    from pathlib import Path

    from jaxspreeze.setup import config

    cfg = config.load(Path(run_dir) / "config.json")
    if not 0 <= member < cfg.members:
        raise ValueError(f"--member {member} out of range: the run has {cfg.members} member(s)")
    return range(member * cfg.num_seeds, (member + 1) * cfg.num_seeds)


def member_slot(run_dir: str, member: int | None, seed_index: int) -> int:
    """The slot of ``member``'s seed ``seed_index``; without a member, ``seed_index`` itself,
    or in a population's run the best member's (``summary.json``'s ``best_member``)."""
    if member is None:
        from pathlib import Path

        from jaxspreeze.agent import policy
        from jaxspreeze.setup import config

        path = Path(run_dir)
        if not path.is_dir() and path.name != policy.POLICY_FILE:
            return seed_index  # a standalone policy file (policy-<m>.msgpack): its own seeds
        run = path if path.is_dir() else path.parent
        try:
            cfg = config.load(run / "config.json")
        except (OSError, ValueError):
            return seed_index
        return policy.best_slot(run, cfg) + seed_index
    return member_slots(run_dir, member)[0] + seed_index
