"""A default decided on every task of a family: candidates side by side, 3 seeds, interleaved.

    python experiments/family_defaults.py --algo sac --family gymnax \
        --envs Pendulum-v1 MountainCarContinuous-v0 PointRobot-misc Reacher-misc Swimmer-misc \
        --variant w128="--sac.hidden 128 128" --variant w64="--sac.hidden 64 64" \
        --total-steps 10000 --seeds 0 1 2 --out experiments/results/sac_gymnax_width_cpu.json

Each run is ``jaxspreeze train --algo ALGO --env FAMILY/ENV --seed S --total-steps N
[variant flags]`` in its own process (one compile cache per variant, so the later runs of
a variant skip the compile); the runs go seed by seed, every env and variant within a seed
(so the variants share the machine's load alike). The final evaluation (the run's
protocol: fresh starts, its episode count) and the wall are read from ``summary.json``.
Writes the JSON (every run) as it goes and prints a Markdown table: per env and variant,
the mean final return over the seeds, each seed's, and the median wall.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_one(algo: str, env: str, seed: int, steps: int, flags: str, work: Path, cache: Path):
    logdir = work / "logs"
    cmd = [
        sys.executable,
        "-m",
        "jaxspreeze",
        "train",
        "--algo",
        algo,
        "--env",
        env,
        "--seed",
        str(seed),
        "--total-steps",
        str(steps),
        "--logdir",
        str(logdir),
        "--compile-cache",
        str(cache),
        "--sinks",
        "jsonl",
        *shlex.split(flags),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0], "wall_s": wall}
    newest = max(logdir.glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    summary = json.loads(newest.read_text())
    return {
        "final_return": summary["final_eval_return"],
        "final_se": summary.get("final_eval_return_se"),
        "best_eval": summary.get("best_eval"),
        "env_steps": summary["env_steps"],
        "wall_s": wall,
        "protocol": summary.get("eval_protocol"),
    }


def table(rows: list[dict], variants: list[str]) -> str:
    envs = list(dict.fromkeys(r["env"] for r in rows))
    lines = [
        "| env | "
        + " | ".join(f"{v}: mean final (seeds)" for v in variants)
        + " | "
        + " | ".join(f"{v}: wall s" for v in variants)
        + " |",
        "|---|" + "---|" * (2 * len(variants)),
    ]
    for env in envs:
        cells, walls = [], []
        for v in variants:
            got = [r for r in rows if r["env"] == env and r["variant"] == v]
            ok = [r["final_return"] for r in got if "final_return" in r]
            seeds = ", ".join(f"{x:.1f}" for x in ok) + (" (failed)" if len(ok) < len(got) else "")
            cells.append(f"{statistics.fmean(ok):.1f} ({seeds})" if ok else "failed")
            walls.append(f"{statistics.median(r['wall_s'] for r in got):.1f}" if got else "-")
        lines.append(f"| {env} | " + " | ".join(cells) + " | " + " | ".join(walls) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", required=True)
    parser.add_argument("--family", required=True)
    parser.add_argument("--envs", nargs="+", required=True)
    parser.add_argument("--variant", action="append", required=True, help='NAME="flags"')
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in args.seeds:
            for env in args.envs:
                for name, flags in variants.items():
                    env_id = f"{args.family}/{env}"
                    got = run_one(
                        args.algo,
                        env_id,
                        seed,
                        args.total_steps,
                        flags,
                        work,
                        work / f"cache-{name}",
                    )
                    row = {
                        "env": env,
                        "variant": name,
                        "flags": flags,
                        "seed": seed,
                        "total_steps": args.total_steps,
                        **got,
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(table(rows, list(variants)))


if __name__ == "__main__":
    main()
