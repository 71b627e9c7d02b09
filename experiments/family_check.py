"""PPO's brax family default checked on every brax task: tanh against clipped, 3 seeds.

    python experiments/family_check.py --total-steps 50000 \
        --out experiments/results/ppo_brax_family_check_cpu

Issue 39: a default that differs per family is decided on every task of the family at a
short budget, 3 seeds. For every task and policy this runs, one training at a time,

    taskset -c 1 nice -n 5 jaxspreeze train --algo ppo --env brax/TASK --ppo.policy POLICY \
        --num-seeds 3 --seed 0 --total-steps N --logdir LOGDIR --run-name TASK-POLICY

(the defaults otherwise; the 3 seeds in one program), the policies' order alternating from
task to task. Each seed's final evaluation (the run's protocol, from ``summary.json``'s
``final_eval_return_per_seed``) and the command's wall are written to ``OUT.json`` after
every run; the table (Markdown) and the counts of winners are printed at the end. A run
already in the JSON is not run again (a failed one is), so an interrupted check goes on
where it stopped (``--table-only`` prints the table of the JSON alone).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import statistics
import subprocess
import time
from pathlib import Path

# The tasks with no earlier data first, then those of ppo_family_defaults_cpu.md.
TASKS = [
    "ant",
    "hopper",
    "walker2d",
    "humanoid",
    "inverted_double_pendulum",
    "pusher",
    "swimmer",
    "humanoidstandup",
    "halfcheetah",
    "inverted_pendulum",
    "reacher",
]
POLICIES = ["tanh", "clipped"]


def load1() -> float:
    return os.getloadavg()[0]


def command(task: str, policy: str, args: argparse.Namespace) -> list[str]:
    pin = ["taskset", "-c", args.core, "nice", "-n", "5"] if args.core else []
    return [
        *pin,
        "jaxspreeze",
        "train",
        "--algo",
        "ppo",
        "--env",
        f"brax/{task}",
        "--ppo.policy",
        policy,
        "--num-seeds",
        str(args.num_seeds),
        "--seed",
        str(args.seed),
        "--total-steps",
        str(args.total_steps),
        "--logdir",
        args.logdir,
        "--run-name",
        f"{task}-{policy}",
        *(["--eval-every", str(args.eval_every)] if args.eval_every is not None else []),
        *(["--eval-episodes", str(args.eval_episodes)] if args.eval_episodes else []),
    ]


def run_one(task: str, policy: str, args: argparse.Namespace) -> dict:
    cmd = command(task, policy, args)
    rundir = Path(args.logdir) / f"{task}-{policy}"
    row: dict = {"task": task, "policy": policy, "command": shlex.join(cmd)}
    row["load1_start"] = load1()
    row["started"] = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    row["wall_s"] = time.perf_counter() - t0
    row["load1_end"] = load1()
    summary_path = rundir / "summary.json"
    if proc.returncode != 0 or not summary_path.exists():
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["?"]
        row["error"] = f"exit {proc.returncode}: {tail[0]}"
        return row
    summary = json.loads(summary_path.read_text())
    config = json.loads((rundir / "config.json").read_text())
    row["finals"] = summary.get("final_eval_return_per_seed")
    row["env_steps"] = summary.get("env_steps")
    row["compile_s"] = summary.get("compile_s")
    row["train_s"] = summary.get("train_s")
    row["eval_wall_s"] = summary.get("eval_wall_s")
    row["stopped"] = summary.get("stopped")
    row["eval"] = {k: v for k, v in config.items() if k.startswith("eval")}
    row["eval_protocol"] = summary.get("eval_protocol")
    if row["finals"] is None or not all(math.isfinite(x) for x in row["finals"]):
        row["error"] = f"non-finite final evaluation: {row['finals']}"
    return row


def verdict(tanh: list[float], clipped: list[float]) -> str:
    """The higher median; level if each median lies inside the other side's seed range."""
    mt, mc = statistics.median(tanh), statistics.median(clipped)
    if min(clipped) <= mt <= max(clipped) and min(tanh) <= mc <= max(tanh):
        return "level"
    return "tanh" if mt > mc else "clipped"


def fmt(values: list[float]) -> str:
    return " / ".join(f"{x:.1f}" for x in values)


def table(rows: list[dict], tasks: list[str]) -> tuple[str, dict]:
    head = (
        "| task | tanh seeds 0/1/2 final | tanh median | clipped seeds 0/1/2 final "
        "| clipped median | winner | wall s per run (tanh, clipped) |\n"
        "|---|---|---|---|---|---|---|"
    )
    lines, counts = [head], {"tanh": [], "level": [], "clipped": [], "failed or not run": []}
    by = {(r["task"], r["policy"]): r for r in rows}
    for task in tasks:
        t, c = by.get((task, "tanh")), by.get((task, "clipped"))
        cells = []
        for r in (t, c):
            if r is None:
                cells += ["not run", "-"]
            elif "error" in r:
                cells += [f"failed: {r['error']}", "-"]
            else:
                cells += [fmt(r["finals"]), f"**{statistics.median(r['finals']):.1f}**"]
        ok = t and c and "error" not in t and "error" not in c
        win = verdict(t["finals"], c["finals"]) if ok else "-"
        counts[win if ok else "failed or not run"].append(task)
        walls = ", ".join(f"{r['wall_s']:.0f}" if r else "-" for r in (t, c))
        lines.append(f"| {task} | {' | '.join(cells)} | {win} | {walls} |")
    return "\n".join(lines), counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--total-steps", type=int, default=50_000)
    parser.add_argument("--num-seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default="/tmp/fam5/logs")
    parser.add_argument("--core", default="1", help="taskset's CPU list ('': no pinning)")
    parser.add_argument("--out", default="experiments/results/ppo_brax_family_check_cpu")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--eval-every", type=int, help="passed on (0: the final one only)")
    parser.add_argument("--eval-episodes", type=int, help="passed on (default: the run's)")
    args = parser.parse_args()
    out_json = Path(args.out + ".json")
    old = json.loads(out_json.read_text()) if out_json.exists() else {"runs": []}
    if old["runs"] and old["meta"]["total_steps"] != args.total_steps:
        raise SystemExit(f"--total-steps: {out_json} holds {old['meta']['total_steps']}")
    rows: list[dict] = old["runs"]
    done = {(r["task"], r["policy"]) for r in rows if "error" not in r}
    meta = {
        "total_steps": args.total_steps,
        "num_seeds": args.num_seeds,
        "seed": args.seed,
        "commit": subprocess.run(
            ["git", "log", "-1", "--format=%h"], capture_output=True, text=True
        ).stdout.strip(),
    }
    for i, task in enumerate([] if args.table_only else args.tasks):
        for policy in POLICIES if i % 2 == 0 else POLICIES[::-1]:
            if (task, policy) in done:
                continue
            # A failed run is tried again; the JSON keeps its latest try.
            rows = [r for r in rows if (r["task"], r["policy"]) != (task, policy)]
            row = run_one(task, policy, args)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "command"}), flush=True)
            out_json.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
    text, counts = table(rows, args.tasks)
    summary = "\n".join(f"- {k}: {len(v)} ({', '.join(v)})" for k, v in counts.items())
    print(text)
    print(summary)


if __name__ == "__main__":
    main()
