"""TensorBoard event files under ``<run>/tb/`` (written by :mod:`.tfevents`)."""

from __future__ import annotations

from pathlib import Path

from jaxspreeze.core.types import Record
from jaxspreeze.sinks.base import scalars
from jaxspreeze.sinks.tfevents import EventFile


class TensorBoardSink:
    """TensorBoard event files under ``<run>/tb/`` (scalars; no TensorFlow or tensorboardX).

    Chunk values are logged as ``train/<name>``, eval values as ``eval/<name>``, per-seed
    values as ``<prefix>/<name>/seed<i>``, a population's per-member values as
    ``<prefix>/<name>/member<m>`` (``eval/eval_return/member3``: the mean over member 3's
    seeds, as the CSV's ``eval_return_member3``); the step is the record's ``env_steps``.
    ``purge_step`` (a resumed run: the checkpoint's step + 1) hides the events an earlier
    session wrote at or past it, so TensorBoard shows each step once.
    """

    name = "tensorboard"

    def __init__(self, run_dir: str | Path, purge_step: int | None = None):
        self.logdir = Path(run_dir) / "tb"
        self.purge_step = purge_step
        self._writer: EventFile | None = None

    def write(self, record: Record) -> None:
        """Add every finite scalar of ``record`` at step ``env_steps``."""
        if self._writer is None:
            self._writer = EventFile(self.logdir, purge_step=self.purge_step)
        prefix = "eval" if record.get("kind") == "eval" else "train"
        step = int(record["env_steps"])
        self._writer.add_scalars(step, ((f"{prefix}/{k}", v) for k, v in scalars(record)))

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()
