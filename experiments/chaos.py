"""Faults at random: kill a training run with SIGKILL at random moments, resume it each
time, and compare where it ends with the same run left alone.

    python experiments/chaos.py --kills 10 --seed 0                   # device env, 1 process
    python experiments/chaos.py --kills 3 --seed 0 --processes 2      # data parallel, 2 processes
    python experiments/chaos.py --kills 3 --seed 0 --env gymnasium/Pendulum-v1  # host env
    python experiments/chaos.py --kills 10 --sweep sac.actor_lr=0.001,0.0003  # a sweep
    python experiments/chaos.py --kills 10 --sweep sac.actor_lr=0.001,0.0003 --pbt  # PBT
    python experiments/chaos.py --kills 10 --stop-at-return -400     # stopped at a return
    ... --out experiments/results/chaos_cpu.md                        # append the result

A kill lands at a random moment of an attempt: after 0-3 of its new metric rows (so during
start-up and compile, chunks, checkpoint saves and evaluations) plus a random 0-1.5 s. A
killed attempt is followed by ``jaxspreeze train --resume RUN`` (or the same command again
when the run had no checkpoint yet: a NOT_STARTED run is replaced). In a multi-process run
one process (chosen at random) is killed; the others must notice and stop, and the launcher's
lines are counted. After the last kill the run is resumed to its end.

Compared with the uninterrupted run (same command, one attempt): the final checkpoint's
every array (parameters, optimiser state, replay buffer, keys, counters) bitwise, by the
sha256 of ``arrays.bin``; every policy file bitwise (``policy.msgpack``, the best policy
``policy-best.msgpack`` and a population's ``policy-<member>-best.msgpack`` and member
files); the metric rows' learning fields (every field but clocks and rates), and those of
``pbt.jsonl`` (PBT's lineage) and of the best policy's journal (``best/*.jsonl``);
``summary.json``'s env steps and final evaluation; and the program cache the attempts
shared: the last attempt discarded none of its entries (a kill during a store leaves no
entry that a later run must throw away, or that kills it). Host-env
runs do not save the simulators' states (docs/environments.md), so for them the check is
that every kill is survived and the run ends at the same env step with as many rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

CLOCKS = ("_s", "sps", "per_s", "wall", "time", "seconds", "lag", "queue", "stall", "_ms")


def learning_fields(row: dict) -> dict:
    """A metric row without its clocks and rates (they differ between any two runs)."""
    return {k: v for k, v in row.items() if not any(c in k for c in CLOCKS) and k != "resumed_from"}


def rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def final_checkpoint(run: Path) -> Path | None:
    root = run / "checkpoints"  # jaxspreeze.store.checkpoint's layout: checkpoints/<env step>/
    found = [p for p in root.iterdir() if p.name.isdigit()] if root.is_dir() else []
    done = [p for p in found if (p / "manifest.json").is_file()]
    return max(done, key=lambda p: int(p.name)) if done else None


def jsonl(path: Path) -> list[dict]:
    """The learning fields of each line of a JSON-lines file ([] when there is none)."""
    if not path.is_file():
        return []
    return [learning_fields(json.loads(x)) for x in path.read_text().splitlines() if x.strip()]


def policy_digest(path: Path) -> str | None:
    """A policy file's digest, its arrays and config bitwise but for the run's own name
    (a member's file records the config, whose ``run_name`` is the reference's or the
    chaos run's)."""
    if not path.exists():
        return None
    from flax import serialization

    state = serialization.msgpack_restore(path.read_bytes())
    if isinstance(state, dict) and isinstance(state.get("config"), str):
        cfg = {k: v for k, v in json.loads(state["config"]).items() if k != "run_name"}
        state = {**state, "config": json.dumps(cfg, sort_keys=True)}
    return hashlib.sha256(serialization.msgpack_serialize(state)).hexdigest()


def policy_files(run: Path) -> list[str]:
    """The policy files a user reads (the final one, the best ones, the members'; not the
    best policy's snapshots under ``best/``, whose journal is compared instead)."""
    return sorted(p.name for p in run.glob("*.msgpack"))


def population_flags(args) -> list[str]:
    """What makes the run a sweep (``--sweep``: its grids) and PBT (``--pbt``)."""
    flags = [f for grid in args.sweep for f in ("--grid", grid)]
    if args.pbt:
        flags += ["--pbt", "--pbt-interval", str(args.pbt_interval)]
    if args.stop_at_return is not None:
        flags += ["--stop-at-return", str(args.stop_at_return)]
    return flags


def command(args, run_name: str, resume: Path | None) -> list[str]:
    train = ["sweep" if args.sweep and resume is None else "train"]
    if resume is not None:
        train += ["--resume", str(resume)]
    else:
        train += [
            "--env", args.env, "--algo", args.algo, "--seed", str(args.seed),
            "--total-steps", str(args.total_steps),
            "--checkpoint-every", str(args.checkpoint_every),
            "--eval-every", str(args.eval_every), "--eval-episodes", "4",
            "--sinks", "jsonl", "--logdir", str(args.logdir), "--run-name", run_name,
            "--compile-cache", str(args.logdir / "cache"), *population_flags(args), *args.extra,
        ]  # fmt: skip
    if args.processes > 1:
        return [sys.executable, "-m", "jaxspreeze", "launch", "--processes",
                str(args.processes), "--", *train]  # fmt: skip
    return [sys.executable, "-m", "jaxspreeze", *train]


def env_for(args) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    for name in ("JAXSPREEZE_COORDINATOR", "JAXSPREEZE_NUM_PROCESSES", "JAXSPREEZE_PROCESS_ID"):
        env.pop(name, None)
    return env


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(d.name))
    return found


def attempt(args, run: Path, rng: random.Random, kill: bool) -> dict:
    """One attempt (resume when the run has a checkpoint); killed at a random moment when
    ``kill``. Returns what happened."""
    resume = run if final_checkpoint(run) is not None else None
    cmd = command(args, run.name, resume)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env_for(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    before = len(rows(run))
    wait_rows, extra_s = rng.randint(0, 3), rng.uniform(0.0, 1.5)
    killed = None
    if kill:
        while proc.poll() is None and len(rows(run)) < before + wait_rows:
            if time.monotonic() - start > args.attempt_timeout_s:
                break
            time.sleep(0.05)
        time.sleep(extra_s)
        if proc.poll() is None:
            target = proc.pid
            if args.processes > 1:
                kids = children(proc.pid)
                target = rng.choice(kids) if kids else proc.pid
            os.kill(target, signal.SIGKILL)
            killed = {"rows_seen": len(rows(run)) - before, "after_s": time.monotonic() - start,
                      "target": "one of the processes" if target != proc.pid else "the run"}  # fmt: skip
    try:
        _, err = proc.communicate(timeout=args.attempt_timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return {"resumed": resume is not None, "killed": killed, "rc": "hung", "err": err[-500:]}
    lines = [line for line in err.splitlines() if line.strip()]
    return {
        "resumed": resume is not None,
        "killed": killed,
        "rc": proc.returncode,
        "stderr_lines": len(lines),
        "last_line": lines[-1] if lines else "",
        "wall_s": round(time.monotonic() - start, 1),
    }


def compare(ref: Path, run: Path, bitwise: bool) -> dict:
    a, b = final_checkpoint(ref), final_checkpoint(run)
    ra, rb = rows(ref), rows(run)
    sa = json.loads((ref / "summary.json").read_text())
    sb = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    same = {
        "final env steps": sa.get("env_steps") == sb.get("env_steps"),
        "metric rows (count, env steps)": [r.get("env_steps") for r in ra]
        == [r.get("env_steps") for r in rb],
    }
    if bitwise:
        same["checkpoint arrays (bitwise)"] = (
            a is not None and b is not None and digest(a / "arrays.bin") == digest(b / "arrays.bin")
        )
        names = policy_files(ref)
        same[f"policy files, {len(names)} (bitwise)"] = names == policy_files(run) and all(
            policy_digest(ref / n) == policy_digest(run / n) for n in names
        )
        same["metric rows (learning fields)"] = [learning_fields(r) for r in ra] == [
            learning_fields(r) for r in rb
        ]
        journals = sorted(p.name for p in (ref / "best").glob("*.jsonl"))
        same["best policy journal (learning fields)"] = all(
            jsonl(ref / "best" / n) == jsonl(run / "best" / n) for n in journals
        )
        if (ref / "pbt.jsonl").exists():
            same["pbt.jsonl (learning fields)"] = jsonl(ref / "pbt.jsonl") == jsonl(
                run / "pbt.jsonl"
            )
        same["final evaluation"] = sa.get("final_eval_return") == sb.get("final_eval_return")
        same["stopped"] = sa.get("stopped") == sb.get("stopped")
    same["program cache (nothing discarded)"] = not sb.get("programs_discarded")
    return same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="the kills' random moments (and the run)")
    p.add_argument("--env", default="gymnax/Pendulum-v1")
    p.add_argument("--algo", default="sac")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=6000)
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=1500)
    p.add_argument("--attempt-timeout-s", type=float, default=600)
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="FIELD=V1,V2",
        help="a sweep's grid (repeatable): the run is `jaxspreeze sweep --grid ...`",
    )
    p.add_argument("--pbt", action="store_true", help="population-based training of the sweep")
    p.add_argument("--pbt-interval", type=int, default=1000)
    p.add_argument("--stop-at-return", type=float, default=None)
    p.add_argument("--logdir", type=Path, default=Path("runs/chaos"))
    p.add_argument("--out", type=Path, default=None, help="append the result (markdown)")
    p.add_argument("--json", type=Path, default=None, help="write the result (JSON)")
    p.add_argument("extra", nargs="*", help="more train flags (after --)")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    kind = "pbt" if args.pbt else "sweep" if args.sweep else "run"
    kind += "-stop" if args.stop_at_return is not None else ""
    tag = f"{kind}-{args.algo}-{args.env.replace('/', '_')}-p{args.processes}-s{args.seed}"
    ref, run = args.logdir / f"{tag}-ref", args.logdir / f"{tag}-chaos"
    started = time.time()
    reference = attempt(args, ref, rng, kill=False)
    if reference["rc"] != 0:
        print(f"the uninterrupted run failed: {reference}", file=sys.stderr)
        return 1
    history = []
    landed = lambda: sum(h["killed"] is not None for h in history)
    while landed() < args.kills and not (run / "summary.json").exists():
        history.append(attempt(args, run, rng, kill=True))
        if history[-1]["rc"] not in (0, -9) and history[-1]["killed"] is None:
            break  # refused or failed without a kill: reported below
    finishes = 0
    while not (run / "summary.json").exists() and finishes < 3:
        history.append(attempt(args, run, rng, kill=False))
        finishes += 1
    host = args.env.startswith(("gymnasium/", "envpool/"))
    same = compare(ref, run, bitwise=not host)
    kills = [h for h in history if h["killed"] is not None]
    result = {
        "command": "python experiments/chaos.py " + " ".join(argv or sys.argv[1:]),
        "run": tag,
        "kills": len(kills),
        "attempts": history,
        "same": same,
        "all_same": all(same.values()),
        "wall_s": round(time.time() - started, 1),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.out:
        write_markdown(args.out, result)
    return 0 if result["all_same"] else 1


def write_markdown(out: Path, result: dict) -> None:
    lines = [
        f"## {result['run']}: {result['kills']} kills, "
        f"{'the same' if result['all_same'] else 'NOT the same'}",
        "",
        f"`{result['command']}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{result['wall_s']:.0f} s, load {os.getloadavg()[0]:.1f})",
        "",
        "| attempt | resumed | killed (rows seen, s, whom) | exit | stderr lines | last line |",
        "|---|---|---|---|---|---|",
    ]
    for i, h in enumerate(result["attempts"], 1):
        k = h["killed"]
        killed = f"{k['rows_seen']}, {k['after_s']:.1f} s, {k['target']}" if k else "-"
        last = h.get("last_line", h.get("err", ""))[:90].replace("|", "/")
        lines.append(
            f"| {i} | {h['resumed']} | {killed} | {h['rc']} | {h.get('stderr_lines', '-')} | "
            f"{last} |"
        )
    lines += ["", "| compared with the uninterrupted run | same |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["same"].items()]
    with open(out, "a") as f:
        f.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    sys.exit(main())
