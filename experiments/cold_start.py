"""Whole-process cold and warm starts, interleaved: code before/after, and rejax's SAC.

    python experiments/cold_start.py --before /tmp/before --rounds 3 \
        --out experiments/results/cold_start_cpu.json

Each run is a fresh process, timed whole (wall, and its CPU seconds: user + system of it
and its children, the steadier figure on a shared machine). Variants: ``before`` (the
package at ``--before``, put first on ``PYTHONPATH``), ``after`` (this checkout),
``quick`` (the same with ``JAXSPREEZE_QUICK_COMPILE=on``; ``--after``: a frozen copy of
the package instead of this checkout, whose kept programs' key holds jaxspreeze's own
sources, so that a warm run finds what the cold one kept while others edit the tree) and, for the SAC job,
``rejax`` (experiments/rejax_sac_pendulum.py: rejax's SAC with its own settings). A cold
run gets a new empty ``--compile-cache``; the warm run after it reuses that cache. Each
round runs every variant once (the order rotates by round); the 1-minute load average is
noted per run. Writes the JSON (every run) as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jaxspreeze.bench.cold import JOBS, SUMMARY_FIELDS, job_command, timed

HERE = Path(__file__).resolve().parent
REJAX = HERE / "rejax_sac_pendulum.py"


def run(variant: str, job: str, before: str, work: Path, cache: str, after: str = "") -> dict:
    env = dict(os.environ)
    if variant == "before":
        env["PYTHONPATH"] = before
    elif after and variant != "rejax":  # a frozen copy: a tree others edit keeps no programs
        env["PYTHONPATH"] = after
    if variant == "quick":
        env["JAXSPREEZE_QUICK_COMPILE"] = "on"
    load = os.getloadavg()[0]
    if variant == "rejax":
        command = [sys.executable, str(REJAX)]
    else:
        command = job_command(job, work / "cache", work / "runs", None)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="a folder holding the old jaxspreeze package")
    p.add_argument(
        "--after", default="", help="a folder holding the new package (default: this checkout)"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", nargs="+", default=list(JOBS))
    p.add_argument("--variants", nargs="+", default=["before", "after", "quick", "rejax"])
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rows: list[dict] = []
    for job in a.jobs:
        variants = [v for v in a.variants if v != "rejax" or job == "sac-pendulum"]
        for r in range(a.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for variant in order:
                with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
                    work = Path(tmp)
                    caches = ["cold"] if variant in ("quick", "rejax") else ["cold", "warm"]
                    for cache in caches:
                        row = {"round": r, **run(variant, job, a.before, work, cache, a.after)}
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
