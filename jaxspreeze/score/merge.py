"""One time-to-score report from several ``jaxspreeze score`` runs (``--merge DIR ...``).

A table of every row takes hours on a small machine, so it is often made a few rows at a
time; merging their ``score.json`` files gives the one table, its goal section and a plot
per row, each run keeping the run it came from (``source``: its index in ``sources``,
which hold each run's directory, date, command, note, machine and versions). A (row,
side, settings) comes from one run only: its seeds and caches were interleaved with the other
sides of that run, and mixing two runs' seeds would hide which load they shared. Where
several runs hold it, the last one given is taken whole (a rerun, e.g. beside a peer,
replaces the earlier measure) and the report names what each replaced (``replaced``).
Imports no JAX.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.score import rows as score_rows
from jaxspreeze.score import runs as score_run

Record = dict[str, Any]
KEPT = ("date", "command", "note", "hardware", "versions", "scale", "seeds", "caches")


def read(folder: Path) -> Record:
    """``folder/score.json`` (ValueError naming the path when it is missing or not one)."""
    path = folder / "score.json" if folder.is_dir() else folder
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (give a folder `jaxspreeze score` wrote)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a score.json ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise ValueError(f"{path}: not a score.json (no runs)")
    return doc


def merge(folders: Sequence[Path], command: str, note: str = "") -> Record:
    """The merged report's doc (ValueError: mixed scales, a folder given twice)."""
    if len({Path(f).resolve() for f in folders}) < len(folders):
        raise ValueError("a folder is given twice: give each run once")
    docs = [read(Path(f)) for f in folders]
    scales = {d.get("scale") for d in docs}
    if len(scales) > 1:
        raise ValueError(f"the runs' scales differ ({', '.join(map(str, sorted(scales)))})")
    holders: dict[tuple[str, str, Any], list[int]] = {}
    for i, doc in enumerate(docs):
        for key in dict.fromkeys(_key(r) for r in doc["runs"]):
            holders.setdefault(key, []).append(i)
    runs = [
        {**r, "source": i}
        for i, doc in enumerate(docs)
        for r in doc["runs"]
        if holders[_key(r)][-1] == i
    ]
    replaced = [
        {"task": task, "side": side, "settings": kind, "source": i, "by": held[-1]}
        for (task, side, kind), held in holders.items()
        for i in held[:-1]
    ]
    rows = list(dict.fromkeys(t for d in docs for t in d.get("rows", [])))
    sides: dict[str, list[str]] = {}
    for d in docs:
        for task, names in d.get("sides", {}).items():
            sides.setdefault(task, [])
            sides[task] += [n for n in names if n not in sides[task]]
    hardware = [d.get("hardware") for d in docs]
    return {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "note": note,
        "sources": [
            {"dir": str(f), **{k: d.get(k) for k in KEPT}}
            for f, d in zip(folders, docs, strict=True)
        ],
        "hardware": hardware[0] if all(h == hardware[0] for h in hardware) else "per source",
        "versions": docs[0].get("versions", {}),
        "scale": scales.pop(),
        "seeds": max((d.get("seeds") or 0) for d in docs),
        "caches": list(dict.fromkeys(c for d in docs for c in d.get("caches", []))),
        "total_steps": None,
        "peer_settings": list(dict.fromkeys(k for d in docs for k in d.get("peer_settings", []))),
        "rows": rows,
        "sides": sides,
        "skipped": [k for d in docs for k in d.get("skipped", [])],
        "runs": runs,
        "replaced": sorted(replaced, key=lambda r: (r["source"], r["task"], r["side"])),
        "summary": [],
        "plots": [],
    }


def _key(run: Record) -> tuple[str, str, Any]:
    """A run's (row, side, settings): the unit one run is taken whole for."""
    return run["task"], run["side"], run.get("settings")


def write(doc: Record, out: Path) -> Record:
    """Write the merged ``score.json``, ``score.md`` and a plot per row into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for task in doc["rows"]:
        png = score_rows.plot(task, doc["runs"], out / f"{task}.png")
        if png is not None:
            doc["plots"].append(str(png))
    score_run.write(doc, out)
    return doc
