"""What reaches the terminal: one writer for every console line, and the third-party
warnings that would repeat, shown once.

:func:`line` writes a whole line (text and newline in one write, flushed) under one lock:
the progress lines, the run's own lines and the warnings of every thread never interleave.
:func:`status` keeps one live line at the bottom of a terminal (a progress bar, a
"compiling ... 12s" line): :func:`line` clears it, writes its line and draws it again
below. It is drawn only on a terminal (:func:`is_terminal`); a log file, a pipe or a
notebook never sees a control character.

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
import math
import os
import shutil
import sys
import threading
import time
import warnings
from typing import IO

from jaxspreeze.core import envids

_LOCK = threading.RLock()
BRAX_MAINTENANCE = r"Brax System, piplines and environments are not actively being maintained"
_mujoco_seen: dict[str, int] = {}  # each MuJoCo warning: how many times it came


_CLEAR = "\r\x1b[K"  # back to the line's start, erase it
_status: list = [None, None]  # the live line shown (text, stream), or None


def line(text: str, *, err: bool = False, file: IO[str] | None = None) -> None:
    """Write ``text`` and a newline to ``file`` (stdout, or stderr with ``err``) in one
    write, flushed, under the console's lock (above the live :func:`status` line)."""
    stream = file if file is not None else (sys.stderr if err else sys.stdout)
    with _LOCK:
        shown, where = _status
        if shown is not None:
            _write(where, _CLEAR)
        stream.write(f"{text}\n")
        stream.flush()
        if shown is not None:
            _write(where, shown)


def is_terminal(file: IO[str] | None = None) -> bool:
    """Whether ``file`` (stdout) is an interactive terminal, where a live line may be drawn
    (not a file, a pipe, a notebook, or ``TERM=dumb``)."""
    stream = file if file is not None else sys.stdout
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or odd stream
        return False
    return tty and os.environ.get("TERM", "") != "dumb"


def status(text: str | None, *, file: IO[str] | None = None, keep: bool = False) -> None:
    """Draw ``text`` as the live line at the bottom of the terminal ``file`` (stdout),
    replacing the one drawn before; None erases it, or with ``keep`` leaves it on screen as
    an ordinary line. Cut to the terminal's width (a wrapped line could not be redrawn).
    Only for a terminal: callers check :func:`is_terminal`."""
    stream = file if file is not None else sys.stdout
    with _LOCK:
        shown, where = _status
        if text is None:
            if shown is not None:
                _write(where, "\n" if keep else _CLEAR)
            _status[:] = [None, None]
            return
        columns = width(stream) - 1
        text = text if len(text) <= columns else text[: max(columns - 1, 0)] + "…"
        if shown is not None and where is not stream:
            _write(where, _CLEAR)
        _status[:] = [text, stream]
        _write(stream, _CLEAR + text)


def width(file: IO[str] | None = None) -> int:
    """The columns of the terminal ``file`` (stdout) shows in (100 when not known)."""
    stream = file if file is not None else sys.stdout
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns or shutil.get_terminal_size((100, 24)).columns


def _write(stream: IO[str], text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # a closed terminal: the live line is only decoration
        pass


def elapsed(seconds: float) -> str:
    """``0:07``, ``12:34`` or ``1:02:03``: a duration as a clock shows it."""
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Working:
    """While a long step runs (``with Working("compiling"):``), say that it is going on:
    on a terminal a live line with the time so far, redrawn every second; elsewhere (a
    log, a pipe, a notebook) a plain line every ``every_s`` seconds. :meth:`set` names
    the next step. ``enabled=False``: silent (a quiet run)."""

    def __init__(self, what: str, *, enabled: bool = True, file: IO[str] | None = None,
                 every_s: float = 30.0):  # fmt: skip
        self.what, self.enabled, self.file, self.every_s = what, enabled, file, every_s
        self.live = enabled and is_terminal(file)
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._next = every_s  # the seconds at which the next plain line is due

    def set(self, what: str, *, lines: bool = True) -> None:
        """Name what is going on now; ``lines=False``: no more plain lines (the step
        prints its own)."""
        self.what = what
        if not lines:
            self._next = math.inf
        if self.live:
            self._draw()

    def _draw(self) -> None:
        status(f"  {self.what} {elapsed(time.monotonic() - self._t0)}", file=self.file)

    def _run(self) -> None:
        while not self._done.wait(1.0 if self.live else min(self.every_s, 1.0)):
            seconds = time.monotonic() - self._t0
            if self.live:
                self._draw()
            elif seconds >= self._next:
                line(f"  {self.what}: still working ({elapsed(seconds)} so far)", file=self.file)
                self._next += self.every_s

    def __enter__(self) -> Working:
        if self.enabled:
            self._t0 = time.monotonic()
            if self.live:
                self._draw()
            self._thread = threading.Thread(target=self._run, name="jaxspreeze-working",
                                            daemon=True)  # fmt: skip
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self.live:
            status(None)


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
