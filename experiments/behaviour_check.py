"""Record, then check, that fixed-seed runs of every algorithm give bitwise-equal results.

Run through the CLI (the stable interface) with every run-level size pinned, so a change
of defaults does not change the case. For each case it keeps a SHA-256 of every leaf of
the final checkpoint (parameters, optimiser states, buffer, env states, keys, counters),
of ``policy.msgpack``, and every number of ``metrics.jsonl`` and ``summary.json`` that
does not depend on the clock.

    python experiments/behaviour_check.py record experiments/results/behaviour_baseline.json
    python experiments/behaviour_check.py check  experiments/results/behaviour_baseline.json

``check`` exits 1 and names the first differing leaf or metric of each case that changed.
Summary fields renamed since the baseline are compared under their old name (``RENAMED``).
Hyperparameter leaves added to the state since the baseline (``members.ADDED_LEAVES``: a
config constant moved into a float32 scalar leaf) are left out of both fingerprints when
the baseline lacks them (the leaves it has, and the policy's other leaves, still compare
bitwise).
The split case runs in a child process with two fake CPU devices.

Fingerprints are bitwise, so they hold on one machine: XLA's CPU kernels differ between
processors (a baseline recorded elsewhere differs by float rounding from the first
update on). To check a change, record the baseline from the code before it on the same
machine (e.g. ``PYTHONPATH=<checkout of the old commit>``, run from outside the tree).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# run-level sizes pinned in every case (the defaults may move; these cases must not)
OFF_POLICY = [
    "--env", "gymnax/Pendulum-v1", "--total-steps", "1200", "--num-envs", "4",
    "--rollout-steps", "1", "--grad-steps", "2", "--batch-size", "64",
    "--buffer-size", "5000", "--learning-starts", "200", "--chunk-iterations", "25",
]  # fmt: skip
PPO = [
    "--num-envs", "8", "--rollout-steps", "16", "--batch-size", "32",
    "--buffer-size", "100000", "--learning-starts", "0", "--chunk-iterations", "4",
]  # fmt: skip
# what the baseline ran with when these were the defaults (evaluation only at the end, PPO's
# old lr and epochs): pinned so that the cases stay the same whatever the defaults become
COMMON = ["--eval-every", "0", "--eval-episodes", "16", "--sinks", "jsonl", "--seed", "0"]
# programs compiled for run speed, as every run was when the baseline was recorded (a
# short run's default since is --compile quick, whose floats differ in the last bits)
COMMON += ["--compile", "full"]
PPO += ["--ppo.lr", "3e-4", "--ppo.epochs", "4", "--ppo.no-anneal-lr"]

CASES: dict[str, list[str]] = {
    "sac": ["--algo", "sac", *OFF_POLICY, "--sac.hidden", "32", "32"],
    "td3": ["--algo", "td3", *OFF_POLICY, "--td3.hidden", "32", "32"],
    "ddpg": ["--algo", "ddpg", *OFF_POLICY, "--ddpg.hidden", "32", "32"],
    "sac_2seeds": ["--algo", "sac", *OFF_POLICY, "--sac.hidden", "32", "32", "--num-seeds", "2"],
    "ppo_cartpole": [
        "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--total-steps", "2048", *PPO,
        "--ppo.hidden", "32", "32",
    ],
    "ppo_pendulum": [
        "--algo", "ppo", "--env", "gymnax/Pendulum-v1", "--total-steps", "2048", *PPO,
        "--ppo.hidden", "32", "32", "--ppo.normalize-obs",
    ],
    "sac_split": ["--algo", "sac", *OFF_POLICY, "--sac.hidden", "32", "32", "--placement", "split"],
    "ppo_split": [
        "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--total-steps", "1024", *PPO,
        "--ppo.hidden", "32", "32", "--placement", "split",
    ],
}  # fmt: skip

# fields of a record or the summary that depend on the clock, the host or the path
# (and on what the program cache held: programs_loaded, programs_compiled, program_cache)
VOLATILE = ("wall", "_s", "per_s", "created", "hardware", "load", "checkpoint", "run_dir",
            "program")  # fmt: skip


def _stable(record: dict) -> dict:
    out = {}
    for k, v in record.items():
        if any(k.endswith(t) or k.startswith(t) for t in VOLATILE) or k in ("resumed_from",):
            continue
        if k in ("sink_drops", "sink_errors", "evaluations_skipped", "evaluations", "topology"):
            continue
        out[k] = v
    return out


def _added(path: str) -> bool:
    """Whether a leaf path ends in a hyperparameter leaf added since older baselines."""
    from jaxspreeze.algos.members import is_added

    return is_added(path)


def _policy_hash(file: Path) -> dict[str, str]:
    """SHA-256 of the policy file, and of it without the added leaves (as an older run
    wrote it)."""
    from flax import serialization

    def strip(tree):
        if not isinstance(tree, dict):
            return tree
        return {k: strip(v) for k, v in tree.items() if not _added(str(k))}

    raw = file.read_bytes()
    old = serialization.msgpack_serialize(strip(serialization.msgpack_restore(raw)), in_place=True)
    sha = lambda b: hashlib.sha256(b).hexdigest()[:16]
    return {"file": sha(raw), "without_added": sha(old)}


def _leaf_hashes(ckpt: Path) -> dict[str, str]:
    manifest = json.loads((ckpt / "manifest.json").read_text())
    data = (ckpt / "arrays.bin").read_bytes()
    hashes = {}
    for e in manifest["leaves"]:
        raw = data[e["offset"] : e["offset"] + e["nbytes"]]
        hashes[e["path"]] = hashlib.sha256(raw).hexdigest()[:16]
    return hashes


def run_case(name: str, args: list[str], logdir: Path) -> dict:
    """Train one case through the CLI and return its fingerprint."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if "split" in name:
        env["JAX_NUM_CPU_DEVICES"] = "2"
    args = [*args, *COMMON]
    cmd = [sys.executable, "-m", "jaxspreeze", "train", *args, "--logdir", str(logdir),
           "--run-name", name]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    run = logdir / name
    ckpts = sorted(p for p in (run / "checkpoints").iterdir() if not p.name.startswith("."))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    return {
        "command": "jaxspreeze train " + " ".join(args),
        "checkpoint": ckpts[-1].name,
        "leaves": _leaf_hashes(ckpts[-1]),
        "policy": _policy_hash(run / "policy.msgpack"),
        "metrics": [_stable(r) for r in records],
        "summary": _stable(summary),
    }


# summary fields renamed since the baseline: new name -> the baseline's name for the same value
RENAMED = {"env_steps_total": "env_steps"}  # env_steps is now per seed, like the records


def _renamed(summary: dict) -> dict:
    if not any(new in summary for new in RENAMED):
        return summary
    out = {k: v for k, v in summary.items() if k not in RENAMED.values()}
    for new, old in RENAMED.items():
        if new in out:
            out[old] = out.pop(new)
    return out


def _added_bytes_only(a: dict, b: dict) -> bool:
    """Whether the memory estimates differ only by the added leaves' float32 scalars, per
    slot and side (everything else equal)."""
    old, new = (x["summary"].get("memory_estimate_bytes") for x in (a, b))
    if not isinstance(old, dict) or not isinstance(new, dict):
        return False
    added = [k for k in b["leaves"] if k not in a["leaves"] and _added(k)]
    sides = ("actor", "critic")
    per_slot = {side: 4 * sum(k.startswith(f".agent.{side}.") for k in added) for side in sides}
    step = sum(per_slot.values())
    if not step:
        return False
    slots = (new.get("total", 0) - old.get("total", 0)) // step
    want = {**old, "total": old.get("total", 0) + slots * step}
    for side, n in per_slot.items():
        want[f"{side}_params"] = old.get(f"{side}_params", 0) + slots * n
    return slots > 0 and want == new


def _diff(a: dict, b: dict) -> list[str]:
    a, b = {**a, "summary": _renamed(a["summary"])}, {**b, "summary": _renamed(b["summary"])}
    out = []
    if a["checkpoint"] != b["checkpoint"]:
        out.append(f"final checkpoint {a['checkpoint']} != {b['checkpoint']}")
    for k in sorted(set(a["leaves"]) | set(b["leaves"])):
        if k not in a["leaves"] and _added(k):
            continue  # a leaf added since the baseline (its value: the config's constant)
        if a["leaves"].get(k) != b["leaves"].get(k):
            out.append(f"leaf {k}: {a['leaves'].get(k)} != {b['leaves'].get(k)}")
    want, got = a["policy"], b["policy"]
    if isinstance(want, str):  # a baseline from before the policy's two hashes
        want = {"file": want, "without_added": want} if want != got["file"] else got
    # a baseline without the added leaves: compare the policies without them
    key = "without_added" if want["file"] == want["without_added"] else "file"
    if want[key] != got[key]:
        out.append("policy.msgpack differs")
    if len(a["metrics"]) != len(b["metrics"]):
        out.append(f"{len(a['metrics'])} metric records != {len(b['metrics'])}")
    for i, (ra, rb) in enumerate(zip(a["metrics"], b["metrics"], strict=False)):
        for k in sorted(set(ra) | set(rb)):
            if ra.get(k) != rb.get(k):
                out.append(f"metrics[{i}].{k}: {ra.get(k)!r} != {rb.get(k)!r}")
    for k in sorted(set(a["summary"]) | set(b["summary"])):
        if k == "memory_estimate_bytes" and _added_bytes_only(a, b):
            continue
        if a["summary"].get(k) != b["summary"].get(k):
            out.append(f"summary.{k}: {a['summary'].get(k)!r} != {b['summary'].get(k)!r}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("record", "check"):
        print(__doc__)
        return 2
    mode, path = argv[0], Path(argv[1])
    only = argv[2:] or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        got = {}
        for name in only:
            got[name] = run_case(name, CASES[name], Path(tmp))
            print(f"{name}: {len(got[name]['leaves'])} leaves, {len(got[name]['metrics'])} records")
    if mode == "record":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True))
        print(f"recorded {len(got)} cases in {path}")
        return 0
    want = json.loads(path.read_text())
    failed = 0
    for name in only:
        diffs = _diff(want[name], got[name])
        if diffs:
            failed += 1
            print(f"{name}: DIFFERS ({len(diffs)} differences)")
            for d in diffs[:8]:
                print(f"  {d}")
        else:
            print(f"{name}: bitwise equal ({len(got[name]['leaves'])} leaves, metrics, summary)")
    print(f"{len(only) - failed} of {len(only)} cases bitwise equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
