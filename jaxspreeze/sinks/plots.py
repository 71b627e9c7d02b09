"""Picture sinks: the run's PNGs at the end (``plots``) and a live plot in a notebook."""

from __future__ import annotations

import io
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.core.cpus import spare_cpu
from jaxspreeze.core.types import Record
from jaxspreeze.sinks import figures as plots


class PlotsSink:
    """Keeps the records and writes the run's PNGs when the run ends (sink ``plots``).

    ``history``: the records of the sessions before this one (a resumed run's).
    """

    name = "plots"

    def __init__(self, run_dir: str | Path, history: Sequence[Record] = ()):
        self.run_dir = Path(run_dir)
        self.records: list[Record] = list(history)
        self._imported = not spare_cpu()  # (one CPU: imported at the end, when drawn)

    def write(self, record: Record) -> None:
        """Keep ``record`` for the end-of-run pictures. Where the process has a second
        CPU the first one also imports matplotlib (about 0.5-0.9 s), here on the sink's
        own thread while the run trains, rather than at the end, where the run's last
        seconds wait for the pictures. On one CPU the import would only take turns with
        training (a warm PQN Breakout-MinAtar run pinned to one core reached its
        threshold about 0.5 s later, and its evaluator fell behind and skipped an
        evaluation), so it waits for :meth:`close`."""
        self.records.append(record)
        if not self._imported:
            plots.prepare()
            self._imported = True

    def close(self) -> None:
        """Write ``learning_curve.png`` and ``throughput.png``."""
        if self.records:
            plots.write_run_plots(self.run_dir, self.records)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython already imported and running a kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class NotebookPlotSink:
    """A live learning-curve figure in a notebook cell, redrawn at most every ``every_s``.

    ``train(cfg, sinks=[NotebookPlotSink()])``. Outside a notebook it only keeps the
    records (``figure()`` draws them on demand).
    """

    name = "notebook-plot"

    def __init__(self, every_s: float = 2.0, throughput: bool = False, label: str = "run"):
        self.every_s = every_s
        self.throughput = throughput
        self.label = label
        self.records: list[Record] = []
        self._handle: Any = None
        self._last = -math.inf
        self.live = in_notebook()

    def figure(self):
        """The current figure (learning curves, or throughput when asked for)."""
        runs = {self.label: self.records}
        if self.throughput:
            return plots.throughput_figure(runs)
        return plots.learning_curve_figure(runs)

    def write(self, record: Record) -> None:
        """Keep ``record``; redraw if the last redraw is older than ``every_s``."""
        self.records.append(record)
        if self.live and time.monotonic() - self._last >= self.every_s:
            self._draw()

    def _draw(self) -> None:
        # IPython is there whenever `live` is: in_notebook() found it running a kernel
        from IPython.display import Image, display

        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=80)
        image = Image(data=buf.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)
        self._last = time.monotonic()

    def close(self) -> None:
        """Draw the final state."""
        if self.live and self.records:
            self._draw()
