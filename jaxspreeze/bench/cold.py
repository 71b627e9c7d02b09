"""The cold-start group: where a first run's seconds go, each row a fresh process.

A cold row runs a command in a new Python process and times it whole (wall, and the CPU
seconds of the child: on a shared machine the steadier figure):

- ``imports``: ``python -c "import jaxspreeze.run.trainer"`` (what ``jaxspreeze train``
  imports before its first program); ``help``: ``python -m jaxspreeze train --help``;
- a job (``sac-pendulum``: the README's default job, ``ppo-cartpole``), ``cold``: its
  ``--compile-cache`` a new empty folder (every program traced, lowered and compiled),
  ``warm``: the same folder again (JAX's cache and the kept programs). Its
  ``summary.json`` adds each program's XLA compile seconds (``compile_programs_s``), every
  trace, lowering and compile (``compile_all_s``) and the command to the first chunk.

``jaxspreeze bench --cold`` runs this group; :func:`measure` runs one case.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

Record = dict[str, Any]

# the jobs' flags (their algorithm's defaults otherwise: sizes, budget)
JOBS: dict[str, tuple[str, ...]] = {
    "sac-pendulum": ("--algo", "sac", "--env", "gymnax/Pendulum-v1"),
    "ppo-cartpole": ("--algo", "ppo", "--env", "gymnax/CartPole-v1"),
}
IMPORTS = "import jaxspreeze.run.trainer"
SUMMARY_FIELDS = (
    "compile_all_s",
    "compile_s",
    "command_to_first_chunk_s",
    "first_chunk_dispatched_s",
    "train_s",
    "eval_wall_s",
    "compile_programs_s",
    "programs_loaded",
    "programs_compiled",
)


def cases(total_steps: int | None = None) -> list[dict[str, Any]]:
    """The group's cases: imports, help, then each job cold and warm (``total_steps``:
    the jobs' budget, default their algorithm's)."""
    out: list[dict[str, Any]] = [{"what": "imports"}, {"what": "help"}]
    for job in JOBS:
        for cache in ("cold", "warm"):
            out.append({"what": job, "cache": cache, "total_steps": total_steps})
    return out


def case_id(args: dict[str, Any]) -> str:
    """``cold-imports``, ``cold-sac-pendulum-warm``."""
    return "-".join(["cold", args["what"], *([args["cache"]] if "cache" in args else [])])


def timed(
    command: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, str]:
    """Run ``command`` in a new process (``env``: its environment, default this one's):
    (wall s, its CPU s: user + system of it and its children, its output). Raises
    RuntimeError (with its output's tail) if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(command[:4])}... exited {done.returncode}: {tail}")
    return wall, cpu, done.stdout + done.stderr


def job_command(
    job: str,
    cache_dir: Path,
    logdir: Path,
    total_steps: int | None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``python -m jaxspreeze train`` for ``job`` with its caches in ``cache_dir`` (``extra``:
    more flags, after the job's)."""
    steps = ("--total-steps", str(total_steps)) if total_steps else ()
    return [
        sys.executable, "-m", "jaxspreeze", "train", *JOBS[job], *steps, *extra,
        "--compile-cache", str(cache_dir), "--logdir", str(logdir),
    ]  # fmt: skip


def once(args: dict[str, Any], work: Path) -> Record:
    """One measurement of the case ``args`` in the folder ``work`` (a warm job reuses
    the cache its cold run left there)."""
    what = args["what"]
    if what == "imports":
        wall, cpu, _ = timed([sys.executable, "-c", IMPORTS])
        return {"wall_s": wall, "cpu_s": cpu}
    if what == "help":
        wall, cpu, _ = timed([sys.executable, "-m", "jaxspreeze", "train", "--help"])
        return {"wall_s": wall, "cpu_s": cpu}
    cache, logdir = work / "cache", work / "runs"
    if args["cache"] == "warm" and not cache.exists():  # fill it first, untimed
        timed(job_command(what, cache, logdir, args.get("total_steps")), cwd=work)
    wall, cpu, _ = timed(job_command(what, cache, logdir, args.get("total_steps")), cwd=work)
    newest = max(logdir.iterdir(), key=lambda p: p.stat().st_mtime)
    summary = json.loads((newest / "summary.json").read_text())
    return {"wall_s": wall, "cpu_s": cpu, **{k: summary.get(k) for k in SUMMARY_FIELDS}}


def measure(args: dict[str, Any], rounds: int = 3) -> Record:
    """The case ``args`` measured ``rounds`` times (each a fresh process; a cold job a new
    empty cache each time, a warm one the cache of a cold run): medians, and every run."""
    runs = []
    load = os.getloadavg()[0]
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="jaxspreeze-cold-") as tmp:
            runs.append(once(args, Path(tmp)))
    rec: Record = {"id": case_id(args), "kind": "cold", **args, "load_1min": load}
    for key in ("wall_s", "cpu_s", "compile_all_s", "command_to_first_chunk_s"):
        values = [r[key] for r in runs if r.get(key) is not None]
        rec[key] = statistics.median(values) if values else None
    rec["runs"] = runs
    return rec
