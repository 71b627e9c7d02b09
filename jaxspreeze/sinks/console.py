"""Live progress on the terminal: one live line in a terminal, plain lines elsewhere."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

from jaxspreeze.core import terminal
from jaxspreeze.core.types import Record
from jaxspreeze.sinks.base import finite_number

BAR = 12  # the live bar's width, in characters


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return format(value, spec) if finite_number(value) else "n/a"


def _si(value: Any) -> str:
    """Compact count: 950, 12.3k, 4.56M."""
    if not finite_number(value):
        return "n/a"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.0f}"


COLUMNS = (
    "  columns: env steps done/total (per seed) | time elapsed, ETA | env steps/s (all "
    "seeds) | train return: mean return of the training episodes that ended lately "
    "(exploring policy) | eval: the latest evaluation's mean return ± s.e. (deterministic "
    "policy, fresh starts)"
)


class ConsoleSink:
    """A run's progress for a person: a live line in a terminal, plain lines elsewhere.

    Each chunk shows, in labelled columns, the env steps done of the total (per seed),
    the time elapsed (``wall_s``, from the call of ``train``) and the ETA (from the rate
    since the first chunk), env steps/s (all seeds), the training return (the mean return
    of the training episodes that ended in the chunk, the latest where none did) and the
    latest evaluation (mean ± s.e.). In a terminal (``live``; default: stdout is one,
    :func:`jaxspreeze.core.terminal.is_terminal`) it is one live line at the bottom with a
    bar, redrawn (:func:`jaxspreeze.core.terminal.status`); in a log file, a pipe or a
    notebook one plain line per chunk, without a control character. Evaluations are
    lines of their own either way.

    Every evaluation gets its line (its result, or that it was skipped or failed, and
    why) in step order with the progress lines: the trainer's notes (:meth:`note`) say
    when a snapshot is queued, and the lines after it wait until its line is known. Not
    longer than ``hold_s`` seconds: a log must not fall silent behind an evaluation that
    takes minutes. Past that, the lines held are printed with one saying the evaluation
    still runs, and its own line comes when it ends (its step count says where it goes).
    """

    name = "console"
    HOLD_S = 20.0  # the longest a progress line waits for an evaluation queued before it

    def __init__(
        self,
        total_steps: int,
        *,
        live: bool | None = None,
        file: Any = None,
        slots: int = 1,
        hold_s: float | None = None,
    ):
        self.total_steps = total_steps
        self.slots = max(int(slots), 1)  # seeds (x members): env_steps_per_s sums them
        self._file = file
        self._live = terminal.is_terminal(file) if live is None else live
        self._status: str | None = None  # the live line drawn
        self._record: Record | None = None  # the chunk record it shows
        self._eval_shown: tuple[Any, Any] = (math.nan, None)  # the latest eval line printed
        self._ret = math.nan  # the latest chunk in which episodes finished
        self._first: tuple[float, float] | None = None  # (env steps, wall_s) of chunk one
        # lines waiting for an evaluation queued before them: [env_steps, line or None,
        # when it was queued] (None: that evaluation's line is not known yet)
        self._held: list[list[Any]] = []
        self._hold_s = self.HOLD_S if hold_s is None else hold_s
        self._let_go: set[Any] = set()  # evaluations held too long: their lines print on arrival

    def note(self, note: Any) -> None:
        """An evaluation queued (its line holds the lines after it), skipped or failed
        (:class:`jaxspreeze.sinks.metrics.Note`)."""
        if note.kind == "queued":
            self._held.append([note.env_steps, None, time.monotonic()])
            return
        line = f"  eval @ {note.env_steps:>9,} steps: {note.kind} ({note.why})"
        self._eval_done(note.env_steps, line)

    def write(self, record: Record) -> None:
        """Redraw the live line (or print a line) for a chunk record; an eval record's
        line in its place."""
        if record.get("kind") == "eval":
            value = record.get("eval_return", math.nan)
            shown = (value, record.get("eval_return_se"))
            self._eval_done(record.get("env_steps"), self._eval_line(record), shown)
            return
        if finite_number(record.get("episode_return")):
            self._ret = record["episode_return"]
        if not self._live:  # (its eval column: the latest eval line printed before it)
            self._say(functools.partial(self._progress_line, record, self._ret))
            return
        self._record = record
        self._status = self._live_line(record)
        terminal.status(self._status, file=self._file)

    def _timing(self, record: Record) -> tuple[str, str, Any]:
        """The elapsed time, the ETA (``n/a`` where not known yet) and the env steps/s (all
        seeds) of a chunk record: the rate since the first chunk (a chunk's own rate swings
        with when its record was built), the first chunk's own rate before that."""
        steps, wall = record.get("env_steps"), record.get("wall_s")
        if not (finite_number(steps) and finite_number(wall)):
            return "n/a", "n/a", record.get("env_steps_per_s")
        if self._first is None:
            self._first = (steps, wall)
        s0, w0 = self._first
        rate = (steps - s0) / (wall - w0) if steps > s0 and wall > w0 else math.nan
        if not finite_number(rate) or rate <= 0:  # the first chunk: its own rate, per seed
            rate = (record.get("env_steps_per_s") or math.nan) / self.slots
        left = max(self.total_steps - steps, 0)
        eta = left / rate if finite_number(rate) and rate > 0 else math.nan
        shown = terminal.elapsed(eta) if finite_number(eta) else "n/a"
        return terminal.elapsed(wall), shown, rate * self.slots

    def _eval_text(self) -> str:
        value, se = self._eval_shown
        text = _fmt(value, ".1f")
        return f"{text} ± {se:.1f}" if finite_number(value) and finite_number(se) else text

    def _live_line(self, record: Record) -> str:
        """The live line; on a narrow terminal the bar, the rate, then the labels' words
        are left out."""
        steps = record.get("env_steps", 0)
        done = min(max(steps / self.total_steps, 0.0), 1.0) if self.total_steps else 1.0
        filled = round(done * BAR)
        elapsed, eta, per_s = self._timing(record)
        bar = f"{'█' * filled}{'·' * (BAR - filled)} "
        head = (
            f"{done:4.0%} {_si(steps)}/{_si(self.total_steps)} steps | {elapsed} elapsed, ETA {eta}"
        )
        rate = f" | {_si(per_s)} env steps/s"
        tail = f" | train return {_fmt(self._ret, '.1f')} | eval {self._eval_text()}"
        short = (
            f"{done:4.0%} {_si(steps)}/{_si(self.total_steps)} steps | {elapsed}, ETA {eta} | "
            f"train {_fmt(self._ret, '.1f')} | eval {self._eval_text()}"
        )
        width = terminal.width(self._file)
        for text in (bar + head + rate + tail, head + rate + tail, head + tail, short):
            if len(text) + 3 <= width:  # (the status line keeps the last column free)
                break
        return f"  {text}"

    @staticmethod
    def _eval_line(record: Record) -> str:
        """``eval @ 1,000 steps: return -146.0 ± 3.1 s.e. (std 35.0, length 200; 128
        episodes, fresh starts)``: the standard error of the mean return, the std over
        episodes, the protocol (a record without them: the std alone)."""
        std, se = record.get("eval_return_std"), record.get("eval_return_se")
        label = "final eval" if record.get("final") else "eval"
        head = f"  {label} @ {record['env_steps']:>9,} steps: return "
        ret, length = _fmt(record.get("eval_return"), ".1f"), _fmt(record.get("eval_length"), ".0f")
        if "eval_return_se" not in record:
            return f"{head}{ret} ± {_fmt(std, '.1f')} (length {length})"
        episodes = record.get("eval_episodes")
        each = f"{episodes} episodes, " if episodes else ""
        return (
            f"{head}{ret} ± {_fmt(se, '.1f')} s.e. (std {_fmt(std, '.1f')}, length {length}; "
            f"{each}{record.get('eval_starts', 'fresh')} starts)"
        )

    def _progress_line(self, record: Record, ret: Any) -> str:
        elapsed, eta, per_s = self._timing(record)
        steps = record["env_steps"]
        done = f"{min(steps / self.total_steps, 1.0):4.0%}" if self.total_steps else ""
        return (
            f"  {steps:>9,}/{self.total_steps:,} steps {done} | {elapsed} elapsed, ETA {eta} | "
            f"{_fmt(per_s):>9} env steps/s | "
            f"train return {_fmt(ret, '.1f'):>7} | eval {self._eval_text()}"
        )

    def _say(self, text: str | Callable[[], str], steps: Any = None) -> None:
        """Print ``text`` (or what it makes when printed) now, or after the evaluations
        queued before it."""
        if self._held:
            self._held.append([steps, text, None])
            self._let_go_late()
        else:
            self._print(text)

    def _let_go_late(self) -> None:
        """Print what is held when the evaluation holding it has been pending longer than
        ``hold_s``: each pending one gets a line saying it still runs."""
        first = self._held[0]
        if first[1] is not None or time.monotonic() - first[2] <= self._hold_s:
            return
        for steps, text, _ in self._held:
            if text is None:
                self._let_go.add(steps)
                text = f"  eval @ {steps:>9,} steps: still running (its line follows when done)"
            self._print(text)
        self._held.clear()

    def _eval_done(self, steps: Any, text: str, shown: tuple[Any, Any] = (math.nan, None)) -> None:
        """The line of the evaluation at ``steps`` (its return and s.e. ``shown``, if it
        has them): in its place, then what it held."""
        line = functools.partial(self._eval_shows, text, shown)
        for entry in self._held:
            if entry[1] is None and entry[0] == steps:
                entry[1] = line
                break
        else:  # no note said it was queued (a sink fed by hand), or it was let go: now
            if steps in self._let_go:
                self._let_go.discard(steps)
                self._print(line)
            else:
                self._say(line, steps)
        while self._held and self._held[0][1] is not None:
            self._print(self._held.pop(0)[1])

    def _eval_shows(self, text: str, shown: tuple[Any, Any]) -> str:
        """An evaluation's line, as it is printed (the progress lines after it show it)."""
        if finite_number(shown[0]):
            self._eval_shown = shown
        return text

    def _print(self, text: str | Callable[[], str]) -> None:
        text = text if isinstance(text, str) else text()
        terminal.line(text, file=self._file)  # (above the live line, in a terminal)
        if self._live and self._record is not None:  # its eval column: the newest
            self._status = self._live_line(self._record)
            terminal.status(self._status, file=self._file)

    def close(self) -> None:
        """Print what is held (an evaluation with no line gets one); the live line stays
        on screen as an ordinary line."""
        for steps, text, _ in self._held:
            self._print(text or f"  eval @ {steps:>9,} steps: no result (the run ended first)")
        self._held.clear()
        if self._live and self._status is not None:
            terminal.status(self._status, file=self._file)
            terminal.status(None, keep=True)
            self._status = None
