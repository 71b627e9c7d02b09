"""``jaxspreeze score``'s runs: every side of every row, each seed, cold then warm cache,
each in its own process, interleaved so that the sides share the machine's load.

The order: for each seed, every row in turn, and on a row the cold runs of every side,
then their warm runs (``jaxspreeze cold, brax cold, jaxspreeze warm, brax warm``, then the
next row; every row's seed 0 before any seed 1), so rows share the load as sides do. A
peer runs once per kind of settings asked for (``--peer-settings both``: its own, then
matched to the preset, each its own column); jaxspreeze's side runs its preset once. A cold
run gets a fresh compile-cache directory; the warm run of the same side, settings and seed
runs again on it. Each run is ``python -m jaxspreeze.score.child`` started with the
``time.time()`` of its start, so its wall counts the interpreter, imports and compilation.
This process imports no JAX. After every run ``score.json`` and ``score.md`` are written
again (the table so far), and the row's plot, ``<row>.png``.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jaxspreeze.score import rows as score_rows
from jaxspreeze.score import settings as score_settings
from jaxspreeze.score import sides as score_sides
from jaxspreeze.score.tasks import ScoreTask

Record = dict[str, Any]
VERSIONS = (
    "jaxspreeze",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "gymnax",
    "brax",
    "playground",
    "gymnasium",
    "rejax",
    "sbx-rl",
    "stable-baselines3",
    "torch",
)


def versions() -> dict[str, str]:
    """The installed versions of jaxspreeze, JAX and the peers (read without importing)."""
    out = {}
    for d in VERSIONS:
        try:
            out[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def plan_sides(
    tasks: Sequence[ScoreTask], wanted: Sequence[str] | None
) -> tuple[dict[str, list[str]], list[Record]]:
    """Per row, the sides that run it (of ``wanted``, default every side), and the skipped
    ones: a side that runs the row but is not installed (``why`` says how to install it).
    A side that has no trainer for the row is neither (it is not a side of that row)."""
    table = score_sides.sides()
    unknown = [s for s in wanted or () if s not in table]
    if unknown:
        raise ValueError(f"unknown side(s) {', '.join(unknown)}; choose from {', '.join(table)}")
    names = list(wanted) if wanted else list(table)
    active: dict[str, list[str]] = {}
    skipped: list[Record] = []
    for task in tasks:
        active[task.name] = []
        for name in names:
            side = table[name]
            if not side.runs(task.family, task.algo):
                continue
            if missing := side.missing():
                why = f"not installed ({', '.join(missing)} missing): {side.install}"
                skipped.append({"task": task.name, "side": name, "why": why})
            else:
                active[task.name].append(name)
    return active, skipped


PEER_SETTINGS = {"own": ("own",), "matched": ("matched",), "both": ("own", "matched")}
SIDE = "jaxspreeze"


def side_settings(side: str, peer_settings: Sequence[str]) -> tuple[str, ...]:
    """The kinds of settings ``side`` runs: its preset (jaxspreeze), else ``peer_settings``."""
    return (score_settings.PRESET,) if side == SIDE else tuple(peer_settings)


def order(
    tasks: Sequence[ScoreTask],
    active: dict[str, list[str]],
    seeds: int,
    caches: Sequence[str],
    peer_settings: Sequence[str] = ("own",),
) -> list[tuple[ScoreTask, int, str, str, str]]:
    """The runs in the order they run: (row, seed, cache, side, settings), seed by seed
    over every row, so that the rows (a fast recipe's and SAC's on one env) share the
    machine's load as the sides of one row do; a peer once per kind of ``peer_settings``."""
    return [
        (task, seed, cache, side, kind)
        for seed in range(seeds)
        for task in tasks
        for cache in caches
        for side in active[task.name]
        for kind in side_settings(side, peer_settings)
    ]


def run_one(
    task: ScoreTask,
    side: str,
    seed: int,
    cache_dir: Path,
    scale: str,
    total_steps: int | None,
    timeout_s: float | None,
    peer_settings: str = "own",
) -> Record:
    """One side's process on one row; its entry (``row`` or ``error``, and its times)."""
    with tempfile.TemporaryDirectory(prefix="jaxspreeze-score-") as tmp:
        out = Path(tmp) / "row.json"
        started = time.time()
        cmd = [
            sys.executable,
            "-m",
            "jaxspreeze.score.child",
            "--side",
            side,
            "--task",
            task.name,
            "--seed",
            str(seed),
            "--scale",
            scale,
            "--compile-cache",
            str(cache_dir),
            "--started",
            repr(started),
            "--out",
            str(out),
        ]
        if peer_settings in score_settings.KINDS:  # (jaxspreeze's side: its preset)
            cmd += ["--peer-settings", peer_settings]
        if total_steps is not None:
            cmd += ["--total-steps", str(total_steps)]
        load = os.getloadavg()[0]
        entry: Record = {"load_start": load}
        try:
            rc = subprocess.run(cmd, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc, entry["error"] = None, f"timed out after {timeout_s:g}s"
        entry.update(rc=rc, process_s=time.time() - started, load_end=os.getloadavg()[0])
        if out.exists():
            result = json.loads(out.read_text())
            if result.get("error"):
                entry["error"] = result["error"]
            else:
                entry["row"] = result
        elif "error" not in entry:
            entry["error"] = f"the side's process exited with {rc} and wrote no row"
    return entry


def check_options(
    out: Path | None, timeout_s: float | None, peer_settings: str = "own"
) -> tuple[str, str] | None:
    """(the flag, why) for an option of a score run that cannot work, checked before any
    side runs (a report that cannot be written would be found only after the first run):
    ``--peer-settings`` one of :data:`PEER_SETTINGS`, ``--run-timeout-s`` > 0, ``--out``
    a folder that can be made and written (None: no report)."""
    if peer_settings not in PEER_SETTINGS:
        return "--peer-settings", f"choose from {', '.join(PEER_SETTINGS)}, got {peer_settings!r}"
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        return "--run-timeout-s", f"must be a number of seconds > 0, got {timeout_s:g}"
    if out is None:  # nothing is written (--list)
        return None
    out = Path(out).absolute()
    for part in out.parts:
        if len(part.encode()) > 255:
            return "--out", f"{part[:40]}... is longer than a file name may be (255 bytes)"
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe == out and not out.is_dir():
        return "--out", f"{out} is a file; give a folder for the report"
    if not probe.is_dir():
        return "--out", f"{probe} is a file, so {out} cannot be made; give another folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return "--out", f"{probe} is not writable; give a folder you may write"
    return None


def make_out(out: Path) -> tuple[str, str] | None:
    """Make the report's folder and write a probe file in it, before any side runs:
    (``--out``, why) when it cannot be (a path the checks above let through, e.g. under
    ``/proc``, or a folder root may not write), else None."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".jaxspreeze-probe-"):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        return "--out", f"{out} cannot be made or written ({why}); give another folder"
    return None


def run(
    tasks: Sequence[ScoreTask],
    *,
    sides: Sequence[str] | None,
    seeds: int,
    caches: Sequence[str],
    scale: str,
    out: Path,
    command: str,
    total_steps: int | None = None,
    note: str = "",
    timeout_s: float | None = None,
    peer_settings: str = "own",
    say: Callable[[str], None] = print,
) -> Record:
    """Run every (row, seed, cache, side, settings) in :func:`order`; write the report;
    its doc. ``peer_settings``: ``own``, ``matched`` or ``both`` (:data:`PEER_SETTINGS`)."""
    kinds = PEER_SETTINGS[peer_settings]
    active, skipped = plan_sides(tasks, sides)
    for k in skipped:
        say(f"score: skipped {k['side']} on {k['task']}: {k['why']}")
    runs_planned = order(tasks, active, seeds, caches, kinds)
    for task in tasks:
        if not active[task.name]:
            say(f"score: no side of {', '.join(sides or ['any'])} runs {task.name} here")
    out.mkdir(parents=True, exist_ok=True)
    doc: Record = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "note": note,
        "hardware": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", ""),
        },
        "versions": versions(),
        "scale": scale,
        "seeds": seeds,
        "caches": list(caches),
        "total_steps": total_steps,
        "peer_settings": list(kinds),
        "rows": [t.name for t in tasks],
        "sides": {t.name: active[t.name] for t in tasks},
        "skipped": skipped,
        "runs": [],
        "summary": [],
        "plots": [],
    }
    root = Path(tempfile.mkdtemp(prefix="jaxspreeze-score-caches-"))
    # SIGTERM (e.g. `timeout`): stop here, and subprocess.run kills the side's process
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main else None
    try:
        for i, (task, seed, cache, side, kind) in enumerate(runs_planned):
            label = score_rows.label(side, kind)
            say(f"score [{i + 1}/{len(runs_planned)}] {task.name} {label} seed {seed} {cache}")
            cache_dir = root / f"{task.name}-{side}-{kind}-{seed}"
            if cache == "cold" and cache_dir.exists():
                shutil.rmtree(cache_dir)
            entry = {
                "order": i,
                "task": task.name,
                "side": side,
                "settings": kind,
                "seed": seed,
                "cache": cache,
            }
            entry |= run_one(task, side, seed, cache_dir, scale, total_steps, timeout_s, kind)
            doc["runs"].append(entry)
            say(_line(entry))
            png = score_rows.plot(task.name, doc["runs"], out / f"{task.name}.png")
            if png is not None and str(png) not in doc["plots"]:
                doc["plots"].append(str(png))
            write(doc, out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if on_main:
            signal.signal(signal.SIGTERM, previous)
    write(doc, out)
    return doc


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def write(doc: Record, out: Path) -> None:
    """``score.json`` (every run with its curve, and the medians) and ``score.md``."""
    doc["summary"] = score_rows.summarise(doc["runs"])
    (out / "score.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / "score.md").write_text(score_rows.markdown(doc))


def _line(entry: Record) -> str:
    side = score_rows.label(entry["side"], entry.get("settings"))
    head = f"  {side} {entry['task']} seed {entry['seed']} {entry['cache']}:"
    if entry.get("error"):
        return f"{head} FAILED {entry['error']}"
    r = entry["row"]
    to = (
        f"threshold at {r['env_steps_to_threshold']:,} steps, "
        f"{score_rows._fmt(r.get('command_to_threshold_s'), '.1f')}s from the command"
        if r["reached"]
        else "threshold not reached"
    )
    return f"{head} {to}; final {r['final_return']:.1f} ({entry['process_s']:.0f}s in all)"
