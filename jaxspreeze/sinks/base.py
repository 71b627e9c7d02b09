"""What the sinks share: the number helpers they write records with.

The sink contract itself (:class:`~jaxspreeze.core.types.Sink`: ``name``, ``write(record)``,
``close()``) lives in :mod:`jaxspreeze.core.types`, where the metrics thread reads it too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from jaxspreeze.core.types import Record


def finite_number(v: Any) -> bool:
    """True for an int or float that is finite (bools count as numbers)."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def scalars(record: Record) -> Iterable[tuple[str, float]]:
    """The finite numeric values of a record, per-seed lists as ``<name>/seed<i>`` and a
    population's per-member lists (``<name>_per_member``) as ``<name>/member<i>``."""
    for key, value in record.items():
        if key in ("kind", "env_steps", "chunk"):
            continue
        if isinstance(value, (list, tuple)):
            per = "member" if key.endswith("_per_member") else "seed"
            base = key.removesuffix("_per_seed").removesuffix("_per_member")
            for i, v in enumerate(value):
                if finite_number(v):
                    yield f"{base}/{per}{i}", float(v)
        elif finite_number(value):
            yield key, float(value)
