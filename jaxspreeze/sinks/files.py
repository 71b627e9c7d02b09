"""File sinks: ``metrics.jsonl`` (one JSON object per record) and ``metrics.csv``.

Both append: a resumed run continues the files of the run it resumes, after
:func:`keep_until` has dropped the records past the checkpoint it resumes from (so a
record is never there twice). Both are ``durable``: the trainer waits for them to hold a
chunk's record before it writes the checkpoint that includes that chunk.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.core.types import EVAL_FIELDS, Record, clean
from jaxspreeze.sinks.figures import line_record

# columns that eval records add; declared up front so the CSV header rarely changes
EVAL_COLUMNS = (*EVAL_FIELDS, "eval_episodes", "eval_starts", "eval_s", "final")
JSONL = "metrics.jsonl"
CSV = "metrics.csv"


def _replace(path: Path, write: Any) -> None:
    """Rewrite ``path`` atomically: ``write(f)`` fills a temp file that then replaces it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", newline="") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _steps(value: Any) -> float:
    """A record's ``env_steps`` as a number (NaN when missing or unreadable)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def keep_until(run_dir: str | Path, env_steps: int) -> list[Record]:
    """Drop the records past ``env_steps`` from ``metrics.jsonl`` and ``metrics.csv``.

    What a resume from a checkpoint at ``env_steps`` does first: the records of the chunks
    it runs again go, and so do lines cut short by a crash, and the final evaluation's
    record (taken after the last checkpoint, it is taken again when the resumed run ends).
    Each file is rewritten atomically, only when something goes. Returns the records
    ``metrics.jsonl`` keeps.
    """
    run_dir = Path(run_dir)
    kept: list[Record] = []
    jsonl = run_dir / JSONL
    if jsonl.exists():
        lines = jsonl.read_text().splitlines()
        keep = []
        for line in lines:
            record = line_record(line)
            if (
                record is not None
                and _steps(record.get("env_steps")) <= env_steps
                and record.get("final") is not True
            ):
                kept.append(record)
                keep.append(line)
        if len(keep) != len(lines):
            _replace(jsonl, lambda f: f.writelines(line + "\n" for line in keep))
    table = run_dir / CSV
    if table.exists():
        with table.open(newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            rows = list(reader)
        good = [
            row
            for row in rows
            if None not in row
            and None not in row.values()
            and _steps(row.get("env_steps")) <= env_steps
            and row.get("final") not in ("True", "true", "1")
        ]
        if len(good) != len(rows):

            def write(f: Any) -> None:
                writer = csv.DictWriter(f, fieldnames=columns, restval="")
                writer.writeheader()
                writer.writerows(good)

            _replace(table, write)
    return kept


class JsonlSink:
    """Appends one JSON object per record to ``metrics.jsonl``."""

    name = "jsonl"
    durable = True

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / JSONL
        self._f = self.path.open("a")

    def write(self, record: Record) -> None:
        """Append ``record`` as one line."""
        self._f.write(json.dumps(clean(record)) + "\n")
        self._f.flush()

    def close(self) -> None:
        """Close the file."""
        self._f.close()


def csv_row(record: Record) -> dict[str, Any]:
    """A record as CSV cells: per-seed lists become ``<name>_seed<i>`` columns (a
    population's per-member ones ``<name>_member<i>``), NaN empty."""
    row: dict[str, Any] = {}
    for key, value in clean(record).items():
        if isinstance(value, list):  # a population's members: <name>_member<i>
            per = "member" if key.endswith("_per_member") else "seed"
            base = key.removesuffix("_per_seed").removesuffix("_per_member")
            for i, v in enumerate(value):
                row[f"{base}_{per}{i}"] = v
        else:
            row[key] = value
    return {k: ("" if v is None else v) for k, v in row.items()}


def eval_columns(num_seeds: int) -> list[str]:
    """The eval columns of a run with ``num_seeds`` seeds (per-seed ones when > 1)."""
    columns = list(EVAL_COLUMNS)
    if num_seeds > 1:
        columns += [f"{c}_seed{i}" for c in EVAL_FIELDS for i in range(num_seeds)]
    return columns


class CsvSink:
    """``metrics.csv``: one row per record (chunk and eval rows share one header).

    The header is the first record's columns plus the eval columns (or, when the file
    exists, e.g. for a resumed run, its header); a column that first appears later
    rewrites the file once, atomically, with the wider header.
    """

    name = "csv"
    durable = True

    def __init__(self, run_dir: str | Path, extra_columns: Sequence[str] = EVAL_COLUMNS):
        self.path = Path(run_dir) / CSV
        self._extra = list(extra_columns)
        self._columns: list[str] = []
        self._f: Any = None

    def write(self, record: Record) -> None:
        """Append ``record`` as one row."""
        row = csv_row(record)
        if self._f is None:
            rows = self._read()
            if rows is None:  # a new file
                columns = list(row) + [c for c in self._extra if c not in row]
                self._open(columns, rows=[])
            else:
                self._open(self._columns, rows=None)
        if any(k not in self._columns for k in row):
            self._widen([k for k in row if k not in self._columns])
        self._writer.writerow(row)
        self._f.flush()

    def _read(self) -> list[dict[str, Any]] | None:
        """The rows of the existing file (its header into ``_columns``); None if none."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        with self.path.open(newline="") as f:
            reader = csv.DictReader(f)
            self._columns = list(reader.fieldnames or [])
            rows = list(reader)
        return rows if self._columns else None

    def _open(self, columns: list[str], rows: list[dict[str, Any]] | None) -> None:
        """Open for appending; with ``rows``, first rewrite the file as header + rows."""
        self._columns = columns
        if rows is not None:

            def write(f: Any) -> None:
                writer = csv.DictWriter(f, fieldnames=columns, restval="")
                writer.writeheader()
                writer.writerows(rows)

            _replace(self.path, write)
        self._f = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._f, fieldnames=columns, restval="")

    def _widen(self, new: list[str]) -> None:
        self._f.close()
        rows = self._read() or []
        self._open(self._columns + new, rows)

    def close(self) -> None:
        """Close the file."""
        if self._f is not None:
            self._f.close()
