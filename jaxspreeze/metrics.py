"""Metric sinks: where each chunk's record goes (console, JSONL, CSV, ...).

A record is a flat dict of JSON-ready values (numbers, strings, lists for per-seed
values). Sinks are plain objects with ``write(record)`` and ``close()``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

Record = dict[str, Any]


class Sink(Protocol):
    """Receives one record per chunk (and eval records); ``close`` flushes."""

    name: str

    def write(self, record: Record) -> None:
        """Consume one record."""

    def close(self) -> None:
        """Flush and release resources."""


def clean(value: Any) -> Any:
    """JSON-ready: NaN/inf become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist"):
        return clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlSink:
    """Appends one JSON object per record to ``metrics.jsonl``."""

    name = "jsonl"

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._f = self.path.open("a")

    def write(self, record: Record) -> None:
        """Append ``record`` as one line."""
        self._f.write(json.dumps(clean(record)) + "\n")
        self._f.flush()

    def close(self) -> None:
        """Close the file."""
        self._f.close()


class ConsoleSink:
    """A compact line per chunk on the terminal."""

    name = "console"

    def __init__(self, total_steps: int):
        self.total_steps = total_steps

    def write(self, record: Record) -> None:
        """Print one progress line for a chunk or eval record."""
        if record.get("kind") == "eval":
            print(f"  eval @ {record['env_steps']:>9,} steps: return {record['eval_return']:.1f}")
            return
        ret = record.get("episode_return")
        ret_s = (
            f"{ret:8.1f}" if isinstance(ret, (int, float)) and math.isfinite(ret) else "     n/a"
        )
        print(
            f"  {record['env_steps']:>9,}/{self.total_steps:,} steps | return {ret_s} | "
            f"{record.get('env_steps_per_s', 0):>9,.0f} steps/s | "
            f"{record.get('update_samples_per_s', 0):>10,.0f} samples/s",
            flush=True,
        )

    def close(self) -> None:
        """Nothing to flush."""
