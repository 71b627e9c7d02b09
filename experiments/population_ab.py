"""A/B: one `jaxspreeze sweep` of a 2x2 lr grid vs the 4 matching `jaxspreeze train` runs,
interleaved rounds, comparing each side's training time (summary.json train_s) and the
processes' CPU time (getrusage of the children).

    PYTHONPATH=. JAX_PLATFORMS=cpu python experiments/population_ab.py OUT [--steps 4000] [--rounds 2]
        [--grid4]

``--grid4``: the 4 x 4 grid of sweep_cpu.md (16 members); each round runs half the single
runs, then the sweep, then the other half, so that the two sides share the load.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

LRS = ("0.0003", "0.003")
LRS4 = ("0.0003", "0.001", "0.003", "0.01")


def run(argv: list[str], out: Path, name: str) -> dict:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jaxspreeze", *argv, "--run-name", name],
        check=True,
        capture_output=True,
    )
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads((out / name / "summary.json").read_text())
    return {
        "wall": time.perf_counter() - t0,
        "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
        "train_s": summary["train_s"],
        "compile_all_s": summary["compile_all_s"],
    }


def main(out: Path, steps: int, rounds: int, lrs: tuple[str, ...] = LRS) -> None:
    os.environ["JAXSPREEZE_PROGRAM_CACHE"] = "off"
    common = ["--total-steps", str(steps), "--sinks", "jsonl", "--logdir", str(out)]
    grid = ["--grid", f"sac.actor_lr={','.join(lrs)}", "--grid", f"sac.critic_lr={','.join(lrs)}"]
    pairs = list(itertools.product(lrs, lrs))
    half = len(pairs) // 2 if len(lrs) > 2 else 0
    rows = []
    for r in range(rounds):
        up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        single = lambda i, a, c: run(
            ["train", "--sac.actor-lr", a, "--sac.critic-lr", c, *common], out, f"single{r}_{i}"
        )
        singles = [single(i, a, c) for i, (a, c) in enumerate(pairs[:half])]
        sweep = run(["sweep", *grid, *common], out, f"sweep{r}")
        singles += [single(half + i, a, c) for i, (a, c) in enumerate(pairs[half:])]
        row = {
            "round": r,
            "uptime": up,
            "sweep": sweep,
            "singles_train_s": sum(s["train_s"] for s in singles),
            "singles_cpu": sum(s["cpu"] for s in singles),
            "singles": singles,
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "singles"}), flush=True)
    (out / "population_ab.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(
        Path(a[0]),
        int(a[a.index("--steps") + 1]) if "--steps" in a else 4000,
        int(a[a.index("--rounds") + 1]) if "--rounds" in a else 2,
        LRS4 if "--grid4" in a else LRS,
    )
