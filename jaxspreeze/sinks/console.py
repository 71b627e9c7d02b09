"""Live progress on the terminal: a rich progress bar, or plain lines when not a TTY."""

from __future__ import annotations

import math
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from jaxspreeze.sinks.base import finite_number
from jaxspreeze.types import Record


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
    """

    name = "console"

    def __init__(self, total_steps: int, *, live: bool | None = None, file: Any = None):
        self.total_steps = total_steps
        self._file = file
        self._live = sys.stdout.isatty() if live is None else live
        self._progress: Any = None
        self._task: Any = None
        self._eval = math.nan
        self._ret = math.nan  # the latest chunk in which episodes finished

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

    def write(self, record: Record) -> None:
        """Advance the bar (or print a line) for a chunk or eval record."""
        if record.get("kind") == "eval":
            self._eval = record.get("eval_return", math.nan)
        elif finite_number(record.get("episode_return")):
            self._ret = record["episode_return"]
        if not self._live:
            self._write_line(record)
            return
        if self._progress is None:
            self._start()
        steps = record.get("env_steps", 0)
        if record.get("kind") == "eval":
            self._progress.console.print(self._eval_line(record))
            self._progress.update(self._task, ev=_fmt(self._eval, ".0f"))
            return
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
        std = record.get("eval_return_std")
        label = "final eval" if record.get("final") else "eval"
        return (
            f"  {label} @ {record['env_steps']:>9,} steps: return "
            f"{_fmt(record.get('eval_return'), '.1f')} ± {_fmt(std, '.1f')} "
            f"(length {_fmt(record.get('eval_length'), '.0f')})"
        )

    def _write_line(self, record: Record) -> None:
        out = self._file or sys.stdout
        if record.get("kind") == "eval":
            print(self._eval_line(record), file=out, flush=True)
            return
        print(
            f"  {record['env_steps']:>9,}/{self.total_steps:,} steps | return "
            f"{_fmt(self._ret, '8.1f'):>8} | "
            f"{_fmt(record.get('env_steps_per_s')):>9} steps/s | "
            f"{_fmt(record.get('update_samples_per_s')):>10} samples/s | "
            f"eval {_fmt(self._eval, '.1f')}",
            file=out,
            flush=True,
        )

    def close(self) -> None:
        """Stop the live bar (it stays on screen)."""
        if self._progress is not None:
            self._progress.stop()
