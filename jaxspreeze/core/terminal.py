"""What reaches the terminal: one writer for every console line, and the third-party
warnings that would repeat, shown once.

:func:`line` writes a whole line (text and newline in one write, flushed) under one lock:
the progress lines, the run's own lines and the warnings of every thread never interleave.

:func:`quiet_third_party` (called by :func:`jaxspreeze.train`) keeps the notices that other
libraries print each time an env is built from burying the run's output:

- MuJoCo's warnings (C code writing to stderr, e.g. ``compiler attribute 'settotalmass'
  is deprecated``, printed each time a gymnasium MuJoCo env is built, i.e. for every
  evaluation of a host env): each distinct message is shown once, as one line through
  :func:`line`; the repeats are counted (:func:`repeats`). Installed only when no one set
  MuJoCo's warning handler before.
- brax's notice that it is not actively maintained (a Python ``UserWarning``, the same for
  every brax run): hidden.

Nothing else is touched. ``--debug``, ``JAXSPREEZE_DEBUG=1`` or any Python warning option
(``PYTHONWARNINGS=...``, ``python -W ...``) turn all of this off: every warning as its
library prints it (docs/environments.md).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import warnings
from typing import IO

from jaxspreeze.core import envids

_LOCK = threading.RLock()
BRAX_MAINTENANCE = r"Brax System, piplines and environments are not actively being maintained"
_mujoco_seen: dict[str, int] = {}  # each MuJoCo warning: how many times it came


def line(text: str, *, err: bool = False, file: IO[str] | None = None) -> None:
    """Write ``text`` and a newline to ``file`` (stdout, or stderr with ``err``) in one
    write, flushed, under the console's lock."""
    stream = file if file is not None else (sys.stderr if err else sys.stdout)
    with _LOCK:
        stream.write(f"{text}\n")
        stream.flush()


def show_all() -> bool:
    """True when the user asked for every warning as printed (``--debug``,
    ``JAXSPREEZE_DEBUG``, ``PYTHONWARNINGS`` or ``-W``)."""
    debug = os.environ.get("JAXSPREEZE_DEBUG", "") not in ("", "0")
    return debug or bool(sys.warnoptions) or "--debug" in sys.argv[1:]


def quiet_third_party(env: str = "") -> bool:
    """Show the repeating third-party warnings once (see the module's docstring); ``env``:
    the run's env id (whether it loads MuJoCo models). False when :func:`show_all`."""
    if show_all():
        return False
    warnings.filterwarnings("ignore", message=BRAX_MAINTENANCE, category=UserWarning)
    if _uses_mujoco(env):
        try:
            import mujoco

            if mujoco.get_mju_user_warning() is None:  # never replace someone else's handler
                mujoco.set_mju_user_warning(mujoco_warning)
        except Exception:  # a MuJoCo that does not load: the env's own error comes later
            pass
    return True


def mujoco_warning(message: str) -> None:
    """MuJoCo's warning handler: the first time a message comes, one line on stderr."""
    with _LOCK:
        seen = _mujoco_seen.get(message, 0)
        _mujoco_seen[message] = seen + 1
    if not seen:
        try:  # (called from MuJoCo's C code: never raise into it)
            line(f"MuJoCo warning (each shown once; --debug shows all): {message}", err=True)
        except Exception:
            pass


def repeats() -> dict[str, int]:
    """Each MuJoCo warning seen and how many times it came."""
    with _LOCK:
        return dict(_mujoco_seen)


def _uses_mujoco(env: str) -> bool:
    """Whether the run's envs may load MuJoCo models (importing MuJoCo costs a second)."""
    if "mujoco" in sys.modules:
        return True
    if importlib.util.find_spec("mujoco") is None:
        return False
    family, _, name = env.partition("/")
    entry = envids.family(family)
    if entry is not None and "mujoco" in entry.distributions:  # brax, Playground
        return True
    if family != "gymnasium":
        return False
    try:
        import gymnasium

        return "mujoco" in str(gymnasium.spec(name).entry_point)
    except Exception:  # not registered (yet): the env's own error comes later
        return False
