"""Live progress on the terminal: a rich progress bar, or plain lines when not a TTY."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from jaxspreeze.core import terminal
from jaxspreeze.core.types import Record
from jaxspreeze.sinks.base import finite_number


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


class ConsoleSink:
    """Live progress on the terminal: a rich progress bar, plain lines when not a TTY.

    The bar shows env steps, env steps/s, update samples/s (``upd/s``), the latest
    training and eval return, elapsed time and ETA; eval results are also printed as
    lines above it.

    Every evaluation gets its line (its result, or that it was skipped or failed, and
    why) in step order with the progress lines: the trainer's notes (:meth:`note`) say
    when a snapshot is queued, and the lines after it wait until its line is known.
    """

    name = "console"

    def __init__(self, total_steps: int, *, live: bool | None = None, file: Any = None):
        self.total_steps = total_steps
        self._file = file
        self._live = sys.stdout.isatty() if live is None else live
        self._progress: Any = None
        self._task: Any = None
        self._eval_shown = math.nan  # the return of the latest eval line printed
        self._ret = math.nan  # the latest chunk in which episodes finished
        # lines waiting for an evaluation queued before them: [env_steps, line or None]
        # (None: that evaluation's line is not known yet)
        self._held: list[list[Any]] = []

    def _start(self) -> None:
        console = Console(file=self._file)
        self._progress = Progress(
            BarColumn(bar_width=12),
            TextColumn("{task.fields[steps]} {task.fields[sps]} steps/s {task.fields[ups]} upd/s"),
            TextColumn("ret {task.fields[ret]} eval {task.fields[ev]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(compact=True),
            console=console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            "train", total=self.total_steps, steps="", sps="", ups="", ret="n/a", ev="n/a"
        )

    def note(self, note: Any) -> None:
        """An evaluation queued (its line holds the lines after it), skipped or failed
        (:class:`jaxspreeze.sinks.metrics.Note`)."""
        if note.kind == "queued":
            self._held.append([note.env_steps, None])
            return
        line = f"  eval @ {note.env_steps:>9,} steps: {note.kind} ({note.why})"
        self._eval_done(note.env_steps, line)

    def write(self, record: Record) -> None:
        """Advance the bar (or print a line) for a chunk or eval record."""
        if record.get("kind") == "eval":
            value = record.get("eval_return", math.nan)
            self._eval_done(record.get("env_steps"), self._eval_line(record), value)
            return
        if finite_number(record.get("episode_return")):
            self._ret = record["episode_return"]
        if not self._live:  # (its eval column: the latest eval line printed before it)
            self._say(functools.partial(self._progress_line, record, self._ret))
            return
        if self._progress is None:
            self._start()
        steps = record.get("env_steps", 0)
        self._progress.update(
            self._task,
            completed=min(steps, self.total_steps),
            steps=f"{_si(steps)}/{_si(self.total_steps)}",
            sps=_si(record.get("env_steps_per_s")),
            ups=_si(record.get("update_samples_per_s")),
        )
        self._progress.update(self._task, ret=_fmt(self._ret, ".0f"))

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
        return (
            f"  {record['env_steps']:>9,}/{self.total_steps:,} steps | return "
            f"{_fmt(ret, '8.1f'):>8} | "
            f"{_fmt(record.get('env_steps_per_s')):>9} steps/s | "
            f"{_fmt(record.get('update_samples_per_s')):>10} samples/s | "
            f"eval {_fmt(self._eval_shown, '.1f')}"
        )

    def _say(self, text: str | Callable[[], str], steps: Any = None) -> None:
        """Print ``text`` (or what it makes when printed) now, or after the evaluations
        queued before it."""
        if self._held:
            self._held.append([steps, text])
        else:
            self._print(text)

    def _eval_done(self, steps: Any, text: str, value: Any = math.nan) -> None:
        """The line of the evaluation at ``steps`` (its return ``value``, if it has one):
        in its place, then what it held."""
        line = functools.partial(self._eval_shows, text, value)
        for entry in self._held:
            if entry[1] is None and entry[0] == steps:
                entry[1] = line
                break
        else:  # no note said it was queued (a sink fed by hand): its place is now
            self._say(line, steps)
        while self._held and self._held[0][1] is not None:
            self._print(self._held.pop(0)[1])

    def _eval_shows(self, text: str, value: Any) -> str:
        """An evaluation's line, as it is printed (the progress lines after it show it)."""
        if finite_number(value):
            self._eval_shown = value
        return text

    def _print(self, text: str | Callable[[], str]) -> None:
        text = text if isinstance(text, str) else text()
        if not self._live:
            terminal.line(text, file=self._file)
            return
        if self._progress is None:
            self._start()
        self._progress.console.print(text)
        self._progress.update(self._task, ev=_fmt(self._eval_shown, ".0f"))

    def close(self) -> None:
        """Print what is held (an evaluation with no line gets one), stop the live bar
        (it stays on screen)."""
        for steps, text in self._held:
            self._print(text or f"  eval @ {steps:>9,} steps: no result (the run ended first)")
        self._held.clear()
        if self._progress is not None:
            self._progress.stop()
