"""Whole-process cold and warm starts, interleaved: packages and flags side by side, and rejax.

    python experiments/cold_start.py --before /tmp/before --rounds 3 \
        --out experiments/results/cold_start_cpu.json
    python experiments/cold_start.py --package head=/tmp/head --package level1=/tmp/level1 \
        --flags h64="--sac.hidden 64 64" --package h64=/tmp/head \
        --variants head level1 h64 rejax --jobs sac-pendulum --rounds 3 --out ...

Each run is a fresh process, timed whole (wall, and its CPU seconds: user + system of it
and its children, the steadier figure on a shared machine). Variants: ``before`` (the
package at ``--before``, put first on ``PYTHONPATH``), ``after`` (this checkout's package,
frozen: copied to a temporary folder when the script starts, or the folder ``--after``),
``full`` and ``quick`` (``after`` with ``--compile full`` / ``--compile quick``; ``after``
itself runs the default, ``--compile auto``), any name given a package
folder with ``--package NAME=DIR`` and/or more ``jaxspreeze train`` flags with ``--flags
NAME="..."`` (a name with flags only runs ``after``'s package), and ``rejax``: rejax with
its own shipped settings for the job (the SAC job: experiments/rejax_sac_pendulum.py; the
PPO job: experiments/rejax_own.py at the job's budget). A package is frozen because a kept
program's key holds jaxspreeze's own sources: in a tree others edit between a cold run and
its warm run, the warm run finds nothing. A cold run gets a new empty ``--compile-cache``;
the warm run after it reuses that cache (rejax compiles every run: cold only). Each round
runs every variant once (the order rotates by round); the 1-minute load average is noted
per run. Writes the JSON (every run) as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jaxspreeze.bench.cold import JOBS, SUMMARY_FIELDS, job_command, timed

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "jaxspreeze"
# rejax's side of each job, with its own shipped settings at the job's budget
REJAX = {
    "sac-pendulum": [str(HERE / "rejax_sac_pendulum.py")],
    "ppo-cartpole": [str(HERE / "rejax_own.py"), "ppo", "CartPole-v1", "--total-steps", "200000"],
}
COLD_ONLY = ("rejax",)  # rejax keeps nothing
MODES = {"full": ("--compile", "full"), "quick": ("--compile", "quick")}  # after's package


def freeze(into: Path) -> str:
    """A copy of this checkout's package under ``into`` (a folder for ``PYTHONPATH``)."""
    shutil.copytree(PACKAGE, into / "jaxspreeze", ignore=shutil.ignore_patterns("__pycache__"))
    return str(into)


def run(
    variant: str, job: str, work: Path, cache: str, packages: dict[str, str], flags: dict
) -> dict:
    """One whole-process run of ``variant`` on ``job`` in ``work`` (its caches there)."""
    env = dict(os.environ)
    if variant != "rejax":
        env["PYTHONPATH"] = packages.get(variant, packages["after"])
    load = os.getloadavg()[0]
    if variant == "rejax":
        command = [sys.executable, *REJAX[job]]
    else:
        command = job_command(job, work / "cache", work / "runs", None, flags.get(variant, ()))
    wall, cpu, out = timed(command, cwd=work, env=env)
    row = {"variant": variant, "job": job, "cache": cache, "wall_s": wall, "cpu_s": cpu}
    row["load_1min"] = load
    if variant != "rejax":
        runs = work / "runs"
        newest = max(runs.iterdir(), key=lambda p: p.stat().st_mtime)
        summary = json.loads((newest / "summary.json").read_text())
        row.update({k: summary.get(k) for k in SUMMARY_FIELDS})
        row["final_return"] = summary.get("final_eval_return")
    else:
        row["output"] = out.strip().splitlines()[-1]
    return row


def _named(pairs: list[str], what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"{what}: give NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="", help="a folder holding the old jaxspreeze package")
    p.add_argument(
        "--after", default="", help="a folder holding the new package (default: this checkout's)"
    )
    p.add_argument("--package", action="append", default=[], help="NAME=DIR: a variant's package")
    p.add_argument("--flags", action="append", default=[], help='NAME="...": its train flags')
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", nargs="+", default=list(JOBS))
    p.add_argument("--variants", nargs="+", default=["before", "after", "full", "rejax"])
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if "before" in a.variants and not a.before:
        raise SystemExit("--before: give the old package's folder, or leave 'before' out")
    frozen = tempfile.TemporaryDirectory(prefix="cold-start-after-")
    packages = {"before": a.before, "after": a.after or freeze(Path(frozen.name))}
    packages.update(_named(a.package, "--package"))
    flags = {**MODES, **{k: tuple(shlex.split(v)) for k, v in _named(a.flags, "--flags").items()}}
    rows: list[dict] = []
    for job in a.jobs:
        variants = list(a.variants)
        for r in range(a.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for variant in order:
                with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
                    work = Path(tmp)
                    for cache in ["cold"] if variant in COLD_ONLY else ["cold", "warm"]:
                        row = {"round": r, **run(variant, job, work, cache, packages, flags)}
                        rows.append(row)
                        print(json.dumps({k: v for k, v in row.items() if "programs" not in k}))
                        sys.stdout.flush()
                        Path(a.out).write_text(json.dumps(rows, indent=1))
    for job in a.jobs:
        for variant in a.variants:
            for cache in ("cold", "warm"):
                sel = [
                    x for x in rows if (x["job"], x["variant"], x["cache"]) == (job, variant, cache)
                ]
                if sel:
                    cpu = statistics.median(x["cpu_s"] for x in sel)
                    wall = statistics.median(x["wall_s"] for x in sel)
                    print(
                        f"{job} {variant} {cache}: cpu {cpu:.1f} s, wall {wall:.1f} s (n={len(sel)})"
                    )
    print(time.strftime("%Y-%m-%dT%H:%M:%S"))


if __name__ == "__main__":
    main()
