"""Time to score: env steps and wall time to a return threshold, jaxspreeze beside brax.

`jaxspreeze score` is the command that supersedes this script (every peer, 3 seeds
interleaved, each side in its own process so that imports and compilation count, cold
and warm caches, plots). This script keeps the earlier table: one seed, both sides in
this process, walls counted after compilation.

Runs the rows of :data:`jaxspreeze.score.runners.TASKS` (brax and Playground: a preset per env and algorithm,
a stated threshold) with jaxspreeze and with brax's own trainer, and writes OUT.json and
OUT.md (merged with what OUT.json already holds: rows are replaced by (side, task), so the
table can be filled one call at a time; saved after every row).

    JAX_PLATFORMS=cpu python experiments/time_to_score.py --out experiments/results/time_to_score_cpu
    python experiments/time_to_score.py --only sac-CartpoleBalance --sides jaxspreeze
    python experiments/time_to_score.py --list
    python experiments/time_to_score.py --scale gpu --out RESULTS/time_to_score  # GPU sizes

``--scale gpu`` multiplies num_envs (and PPO's minibatch, SAC's batch) and the env-step
budget of every preset (see :func:`jaxspreeze.score.runners.gpu_fields`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from jaxspreeze.bench.record import versions
from jaxspreeze.score import runners as score
from jaxspreeze.setup.devices import describe_hardware


def main(argv: list[str]) -> int:
    """Run the selected rows; returns the exit code (1 if a row failed)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="time_to_score", help="OUT.json and OUT.md")
    p.add_argument("--only", action="append", default=[], help="tasks whose name has this")
    p.add_argument("--sides", nargs="+", default=["jaxspreeze", "brax"])
    p.add_argument("--scale", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--note", default="")
    p.add_argument("--list", action="store_true", help="list the tasks and exit")
    p.add_argument(
        "--readme", action="store_true", help="print OUT.json's side-by-side table and exit"
    )
    args = p.parse_args(argv)
    tasks = [t for n, t in score.TASKS.items() if not args.only or any(s in n for s in args.only)]
    if args.list:
        for t in tasks:
            print(f"{t.name:26s} {t.preset:24s} threshold {t.threshold:g}")
        return 0
    out = Path(args.out)
    path = out.with_suffix(".json")
    if args.readme:
        print(score.side_by_side(json.loads(path.read_text())), end="")
        return 0
    doc = json.loads(path.read_text()) if path.exists() else {"rows": []}
    doc.update(
        hardware=describe_hardware(),
        versions=versions(),
        scale=args.scale,
        thresholds=score.THRESHOLDS,
    )
    command = {
        "command": shlex.join(["python", "experiments/time_to_score.py", *argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "note": args.note,
    }
    status = 0
    runners = {"jaxspreeze": score.run_jaxspreeze, "brax": score.run_brax}
    for task in tasks:
        for side in args.sides:
            fields = score.gpu_fields(task) if args.scale == "gpu" else {}
            load = os.getloadavg()
            print(f"{side} {task.name}: load {load[0]:.2f}", flush=True)
            t0 = time.perf_counter()
            try:
                row = runners[side](task, say=lambda s: print(s, flush=True), **fields)
            except Exception as e:  # a failed row is reported, the others still run
                traceback.print_exc()
                row = score.failed_row(side, task, f"{type(e).__name__}: {e}")
                status = 1
            row.update(
                command=command,
                load_start=load[0],
                load_end=os.getloadavg()[0],
                process_s=time.perf_counter() - t0,
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                scale=args.scale,
            )
            # read again: another call may have written rows meanwhile
            rows = json.loads(path.read_text())["rows"] if path.exists() else []
            doc["rows"] = [r for r in rows if (r["side"], r["task"]) != (side, task.name)] + [row]
            # the commands that made the rows kept (calls may run side by side)
            unique = {
                json.dumps(r["command"], sort_keys=True) for r in doc["rows"] if "command" in r
            }
            doc["commands"] = sorted(map(json.loads, unique), key=lambda c: c["date"])
            doc["rows"].sort(
                key=lambda r: (list(score.TASKS).index(r["task"]), r["side"] != "jaxspreeze")
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
            out.with_suffix(".md").write_text(score.markdown(doc))
            print(score.summary_line(row), flush=True)
    print(f"wrote {path} and {out.with_suffix('.md')}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
