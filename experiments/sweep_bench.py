"""One ``jaxspreeze sweep`` process against N ``jaxspreeze train`` processes, one after another.

    PYTHONPATH=. JAX_PLATFORMS=cpu python experiments/sweep_bench.py OUT_DIR [--steps 10000]

The population is a 4 x 4 grid of SAC's actor_lr x critic_lr on gymnax/Pendulum-v1 (the
default sizes otherwise), one seed per member; the single runs train the same 16 value pairs
with the same seed. Each side starts from an empty compile cache of its own (the single
runs share theirs, as one user's runs would). Prints and writes OUT_DIR/sweep_cpu.json: the
wall seconds of each side (the processes' own walls, imports and compiles included), their
ratio, the load (``uptime``) before and after each side, and each member's final return
beside the matching single run's.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LRS = ("0.0003", "0.001", "0.003", "0.01")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _run(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jaxspreeze", *argv], check=True, capture_output=True)
    return time.perf_counter() - t0


def main(out: Path, steps: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    common = ["--total-steps", str(steps), "--sinks", "jsonl", "--logdir", str(out)]
    env = dict(os.environ, JAXSPREEZE_PROGRAM_CACHE="on")
    os.environ.update(env)
    result: dict = {"steps": steps, "members": len(LRS) ** 2, "argv_common": common}
    result["load_before_sweep"] = _uptime()
    grid = ["--grid", f"sac.actor_lr={','.join(LRS)}", "--grid", f"sac.critic_lr={','.join(LRS)}"]
    result["sweep_s"] = _run(
        ["sweep", *grid, *common, "--run-name", "sweep", "--compile-cache", str(out / "c-sweep")]
    )
    result["load_after_sweep"] = _uptime()
    singles = []
    for i, (a, c) in enumerate(itertools.product(LRS, LRS)):
        own = ["--run-name", f"single{i}", "--compile-cache", str(out / "c-train")]
        singles.append(_run(["train", "--sac.actor-lr", a, "--sac.critic-lr", c, *common, *own]))
    result["load_after_singles"] = _uptime()
    result["singles_s"] = singles
    result["singles_total_s"] = sum(singles)
    result["ratio"] = result["sweep_s"] / result["singles_total_s"]
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    result["returns"] = [
        {
            "values": m["values"],
            "member_final": m["final_return"],
            "single_final": json.loads((out / f"single{i}" / "summary.json").read_text())[
                "final_eval_return"
            ],
        }
        for i, m in enumerate(summary["members"])
    ]
    (out / "sweep_cpu.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    args = sys.argv[1:]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 10_000
    main(Path(args[0]), steps)
