"""What every sink is: an object with ``name``, ``write(record)`` and ``close()``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

from jaxspreeze.types import Record


class Sink(Protocol):
    """Receives one record per chunk (and eval records); ``close`` flushes.

    A sink may set ``queue_size`` to change how many records wait for it (the metrics
    thread drops, and counts, what does not fit).
    """

    name: str

    def write(self, record: Record) -> None:
        """Consume one record."""

    def close(self) -> None:
        """Flush and release resources."""


def finite_number(v: Any) -> bool:
    """True for an int or float that is finite (bools count as numbers)."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def scalars(record: Record) -> Iterable[tuple[str, float]]:
    """The finite numeric values of a record, per-seed lists as ``<name>/seed<i>``."""
    for key, value in record.items():
        if key in ("kind", "env_steps", "chunk"):
            continue
        if isinstance(value, (list, tuple)):
            base = key.removesuffix("_per_seed")
            for i, v in enumerate(value):
                if finite_number(v):
                    yield f"{base}/seed{i}", float(v)
        elif finite_number(value):
            yield key, float(value)
