"""Command to first training step: jaxspreeze's first chunk vs brax's own trainer, side by side.

    JAX_PLATFORMS=cpu python experiments/first_chunk.py
    JAX_PLATFORMS=cpu python experiments/first_chunk.py --rounds 1 --envs brax/inverted_pendulum

Every measurement is a fresh subprocess, timed from the process's own start (the
command: interpreter, imports, env construction, every trace and compile, the warm-up):

- jaxspreeze: ``python -m jaxspreeze train --algo A --env E --total-steps S ...``;
  ``command_to_first_chunk_s`` from its ``summary.json`` (process start to the first
  chunk dispatched, which follows the compile of every program: init, warm-up, chunk and
  the evaluation, compiled ahead).
- brax: ``brax.training.agents.sac|ppo.train(...)`` on ``brax.envs.get_environment(E)``
  with the same sizes as jaxspreeze's defaults (SAC: 8 envs, batch 256, 8 gradient steps
  per env step, 1,000 prefill steps, 2x256 MLPs; PPO: 16 envs x 64-step unrolls, 4
  minibatches of 256, 10 epochs, 2x64 MLPs; 16 eval envs) and ``num_evals=2``. Its first
  training step is dispatched when the first call of its pmapped ``training_epoch``
  returns (after its initial evaluation, env reset and prefill; the call compiles, then
  dispatches asynchronously); the child exits there. ``progress0_s`` is the time of its first
  ``progress_fn`` call (the step-0 evaluation).

TD3 and SAC are set against brax's SAC, PPO against brax's PPO. Each round runs, per env
and pair, jaxspreeze then brax *cold*, then both *warm*. Cold (``--cold empty``, the
default) starts from an empty persistent cache, new for the round, which that run fills
(jaxspreeze's ``--compile-cache DIR``; brax's ``jax_compilation_cache_dir`` with the
same thresholds): it compiles everything as ``--compile-cache off`` does, plus writing the
entries; ``--cold off`` runs cold with no cache at all (``--compile-cache off``) and fills
the warm caches with an unrecorded run first. Warm reuses the cache of the cold run just
before. The machine's load average is noted before each run: interleaving the tools in
rounds is what keeps a busy machine fair to both. Writes
``experiments/results/<out>.json`` and ``.md`` (medians over rounds) as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
BRAX_OF = {"td3": "sac", "sac": "sac", "ppo": "ppo"}
TOTAL_STEPS = {"td3": 2000, "sac": 2000, "ppo": 2048}
EVAL_ENVS = 16


def process_age() -> float:
    """Seconds since this process started (Linux /proc, 10 ms resolution)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------- the brax child
def brax_child(algo: str, env_name: str, cache: str) -> None:
    """Train with brax's own trainer; print one JSON line when its first training step is
    dispatched (the end of its training_epoch compile), then exit at once."""
    import threading

    import jax

    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    spans: list[tuple[str, str, float, float]] = []
    lock = threading.Lock()
    out: dict = {"progress0_s": None}

    def union(until: float) -> float:
        total, reach = 0.0, float("-inf")
        for s, e in sorted((s, min(e, until)) for _, _, s, e in spans):
            if e > reach:
                total, reach = total + e - max(s, reach), e
        return total

    def listen(event: str, duration: float, **kw: object) -> None:
        if not event.startswith("/jax/core/compile/"):
            return
        age = process_age()
        name = str(kw.get("fun_name", "?"))
        with lock:
            spans.append((event, name, age - duration, age))

    def first_step_dispatched() -> None:
        age = process_age()
        programs: dict[str, float] = {}
        for ev, n, s, e in spans:
            if ev.endswith("backend_compile_duration") and e - s > 0.05:
                programs[n] = round(programs.get(n, 0.0) + e - s, 2)
        out.update(first_train_step_s=age, compile_all_s=union(age), programs=programs)
        print("BRAX " + json.dumps(out), flush=True)
        os._exit(0)

    # brax pmaps its training_epoch inside train(): its first call returns once the step
    # is compiled and dispatched (asynchronously), which is the moment measured
    real_pmap = jax.pmap

    def pmap(fun, *args, **kwargs):
        mapped = real_pmap(fun, *args, **kwargs)
        if getattr(fun, "__name__", "") != "training_epoch":
            return mapped

        def first_call(*a, **k):
            mapped(*a, **k)
            first_step_dispatched()

        return first_call

    jax.pmap = pmap
    jax.monitoring.register_event_duration_secs_listener(listen)
    if not hasattr(jax, "device_put_replicated"):  # brax 0.14 on jax >= 0.10
        from jaxspreeze.bench.brax_compat import device_put_replicated

        jax.device_put_replicated = device_put_replicated
    from brax import envs

    env = envs.get_environment(env_name.removeprefix("brax/"))
    progress = lambda step, metrics: out.update(progress0_s=out["progress0_s"] or process_age())
    if algo == "sac":
        from brax.training.agents.sac import train as sac

        sac.train(
            environment=env,
            num_timesteps=2000,
            episode_length=1000,
            num_envs=8,
            num_eval_envs=EVAL_ENVS,
            batch_size=256,
            grad_updates_per_step=8,
            min_replay_size=1000,
            max_replay_size=100_000,
            num_evals=2,
            progress_fn=progress,
        )
    else:
        import functools

        from brax.training.agents.ppo import networks as ppo_networks
        from brax.training.agents.ppo import train as ppo

        ppo.train(
            environment=env,
            num_timesteps=2048,
            episode_length=1000,
            num_envs=16,
            num_eval_envs=EVAL_ENVS,
            unroll_length=64,
            batch_size=4,  # trajectories of 64 steps per minibatch: 256 transitions
            num_minibatches=4,
            num_updates_per_batch=10,
            num_evals=2,
            network_factory=functools.partial(
                ppo_networks.make_ppo_networks,
                policy_hidden_layer_sizes=(64, 64),
                value_hidden_layer_sizes=(64, 64),
            ),
            progress_fn=progress,
        )
    print("BRAX " + json.dumps(out | {"note": "no training_epoch compile seen"}), flush=True)


# ------------------------------------------------------------------------- the parent
def run_jaxspreeze(algo: str, env: str, cache: str, logdir: str) -> dict:
    cmd = [
        sys.executable, "-m", "jaxspreeze", "train", "--algo", algo, "--env", env,
        "--total-steps", str(TOTAL_STEPS[algo]), "--compile-cache", cache or "off",
        "--logdir", logdir, "--sinks", "jsonl",
    ]  # fmt: skip
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - t0
    if proc.returncode:
        return {"error": proc.stderr[-2000:], "wall_s": wall, "command": " ".join(cmd[1:])}
    run_dir = next(
        line.split(": ", 1)[1] for line in proc.stdout.splitlines() if "run directory:" in line
    )
    s = json.loads((Path(run_dir) / "summary.json").read_text())
    return {
        "first_step_s": s["command_to_first_chunk_s"],
        "command_to_train_s": s["command_to_train_s"],
        "compile_all_s": s["compile_all_s"],
        "compile_s": s["compile_s"],
        "programs": {k: round(v, 2) for k, v in s["compile_programs_s"].items() if v > 0.05},
        "wall_s": wall,
        "command": " ".join(cmd[1:]),
    }


def run_brax(algo: str, env: str, cache: str) -> dict:
    brax_algo = BRAX_OF[algo]
    cmd = [sys.executable, __file__, "--brax-child", brax_algo, env, cache]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - t0
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BRAX ")]
    if not lines:
        return {"error": proc.stderr[-2000:], "wall_s": wall}
    out = json.loads(lines[-1][5:])
    out["first_step_s"] = out.pop("first_train_step_s", None)
    return out | {"wall_s": wall, "brax_algo": brax_algo}


def measure(tool: str, algo: str, env: str, mode: str, cache: str, logdir: str) -> dict:
    load = os.getloadavg()
    res = (
        run_jaxspreeze(algo, env, cache, logdir)
        if tool == "jaxspreeze"
        else run_brax(algo, env, cache)
    )
    return {"tool": tool, "algo": algo, "env": env, "mode": mode, "load_before": load} | res


def kind(run: dict) -> str:
    """cold (an empty cache), cold-off (no cache) or warm."""
    return "cold-off" if run["mode"] == "cold" and run.get("cache", "off") == "off" else run["mode"]


def report(runs: list[dict], args: argparse.Namespace) -> str:
    def med(rows: list[dict], key: str) -> str:
        xs = [r[key] for r in rows if r.get(key) is not None]
        return f"{statistics.median(xs):.1f}" if xs else "n/a"

    lines = [
        "# Command to first training step: jaxspreeze vs brax's own trainer (CPU)",
        "",
        *(
            f"`JAX_PLATFORMS=cpu python experiments/first_chunk.py {' '.join(a)}`  "
            for a in args.commands
        ),
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        "shared with other jobs (load averages per run in the JSON). Seconds from the "
        "process's start to jaxspreeze's first chunk dispatched / brax's first training "
        "step dispatched (the return of its first training_epoch call); medians over rounds "
        "(n = runs). cold-off: no persistent cache (`--compile-cache off`); cold: an empty "
        "persistent cache, which the run fills; warm: the persistent compilation cache filled "
        "by the cold run of the same config. `compile` is every "
        "trace, lowering and compile up to then (wall seconds, overlaps counted once).",
        "",
        "| env | jaxspreeze | brax | cache | jaxspreeze first chunk s | brax first step s "
        "| jaxspreeze compile s | brax compile s | n | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env in args.envs:
        for algo in args.algos:
            for mode in ("cold-off", "cold", "warm"):
                ours = [
                    r for r in runs
                    if (r["tool"], r["algo"], r["env"], kind(r)) == ("jaxspreeze", algo, env, mode)
                ]  # fmt: skip
                theirs = [
                    r for r in runs
                    if r["tool"] == "brax" and BRAX_OF[r["algo"]] == BRAX_OF[algo]
                    and (r["env"], kind(r)) == (env, mode)
                ]  # fmt: skip
                if not ours and not theirs:
                    continue
                loads = [r["load_before"][0] for r in ours + theirs]
                load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""
                lines.append(
                    f"| {env} | {algo} | {BRAX_OF[algo]} | {mode} | {med(ours, 'first_step_s')} "
                    f"| {med(theirs, 'first_step_s')} | {med(ours, 'compile_all_s')} "
                    f"| {med(theirs, 'compile_all_s')} | {len(ours)}/{len(theirs)} | {load} |"
                )
    errors = [r for r in runs if "error" in r]
    if errors:
        lines += ["", f"{len(errors)} run(s) failed; their stderr is in the JSON."]
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--brax-child":
        brax_child(*sys.argv[2:5])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", nargs="+", default=["brax/inverted_pendulum", "brax/halfcheetah"])
    p.add_argument("--algos", nargs="+", default=["td3", "ppo"], choices=sorted(BRAX_OF))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    p.add_argument("--cold", default="empty", choices=["empty", "off"])
    p.add_argument("--tools", nargs="+", default=["jaxspreeze", "brax"])
    p.add_argument(
        "--merge", nargs="+", metavar="JSON", help="only write <out> from these results' runs"
    )
    p.add_argument("--out", default="first_chunk_cpu")
    args = p.parse_args()
    args.argv = sys.argv[1:]
    args.commands = [args.argv]
    RESULTS.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="first_chunk_"))
    logdir = str(tmp / "runs")
    runs: list[dict] = []

    if args.merge:  # runs of earlier invocations (failed runs dropped), one report
        metas = [json.loads(Path(f).read_text()) for f in args.merge]
        runs = [r for m in metas for r in m["runs"] if "error" not in r]
        args.commands = [m["meta"]["argv"] for m in metas] + [args.argv]

    def save() -> None:

        meta = {
            "argv": args.argv,
            "cpus": os.cpu_count(),
            "machine": platform.platform(),
            "env": {"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS")},
        }
        (RESULTS / f"{args.out}.json").write_text(
            json.dumps({"meta": meta, "runs": runs}, indent=1)
        )
        (RESULTS / f"{args.out}.md").write_text(report(runs, args))

    def cache_dir(tool: str, env: str, algo: str, r: int | str) -> str:
        algo = algo if tool == "jaxspreeze" else BRAX_OF[algo]
        return str(tmp / f"cache-{tool}-{algo}-{env.replace('/', '_')}-{r}")

    def served_before(algo: str) -> bool:  # one brax SAC serves TD3 and SAC
        return any(BRAX_OF[a] == BRAX_OF[algo] for a in args.algos[: args.algos.index(algo)])

    if (
        args.cold == "off" and "warm" in args.modes and not args.merge
    ):  # fill the warm caches (not recorded)
        for env in args.envs:
            for algo in args.algos:
                print(f"filling the caches: {algo} / brax {BRAX_OF[algo]} on {env}", flush=True)
                for tool in ("jaxspreeze", "brax"):
                    if tool == "jaxspreeze" or not served_before(algo):
                        measure(tool, algo, env, "warm", cache_dir(tool, env, algo, 0), logdir)
    for r in range(0 if args.merge else args.rounds):
        for env in args.envs:
            for algo in args.algos:
                for mode in args.modes:
                    for tool in args.tools:
                        if tool == "brax" and served_before(algo):
                            continue
                        if mode == "cold" and args.cold == "off":
                            cache = ""
                        else:  # cold: a new empty cache that this run fills; warm: reuse it
                            cache = cache_dir(tool, env, algo, 0 if args.cold == "off" else r)
                        row = measure(tool, algo, env, mode, cache, logdir)
                        row |= {"round": r, "cache": cache or "off"}
                        runs.append(row)
                        print(
                            f"round {r} {env} {tool} {algo} {mode}: first step "
                            f"{row.get('first_step_s')} s, compile {row.get('compile_all_s')} s, "
                            f"load {row['load_before'][0]:.1f}"
                            + (f" ERROR {row['error'][-300:]}" if "error" in row else ""),
                            flush=True,
                        )
                        save()
    save()
    print(report(runs, args))


if __name__ == "__main__":
    main()
