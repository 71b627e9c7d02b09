"""The benchmark's rows pinned: what the cases record, the tables and the brax arguments.

Timings vary from run to run; everything else a benchmark writes does not: the cases'
work counts and parameters (and the keys of their records, in order), the selection, the
matched brax configs, and the Markdown and text tables made from given records.
``tests/bench_golden.json`` holds them as the code gave them when this test was written;
a change that should not change the benchmark's output must leave them equal. (A
deliberate change rewrites the file: ``python tests/test_bench_golden.py --write``.)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jaxspreeze.bench import cases, references, report, suite
from jaxspreeze.bench.record import Workload, throughput_record, with_reference
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.score import runners as score
from jaxspreeze.setup.plan import plan

GOLDEN = Path(__file__).with_name("bench_golden.json")
HAVE_PLAYGROUND = importlib.util.find_spec("mujoco_playground") is not None
HARDWARE = {"backend": "cpu", "device_count": 1, "devices": ["cpu"], "cpu": "x86", "cpu_count": 2}


def _plain(x: Any) -> Any:
    """``x`` as JSON gives it back (NaN kept; tuples as lists)."""
    return json.loads(json.dumps(x, default=str))


def workload_fields(w: Workload) -> dict[str, Any]:
    """What a workload says about its work (not its timings)."""
    fields = dataclasses.asdict(w)
    fields.pop("run")
    fields["compiled"] = fields.pop("compile_s") > 0
    return fields


def _record(w: Workload, seconds: float, **extra: Any) -> dict[str, Any]:
    rec = throughput_record(w, seconds, extra.pop("peak", None), extra.pop("times", None))
    return {**rec, "hardware": HARDWARE, "versions": {"jax": "0"}, **extra}


def records() -> list[dict[str, Any]]:
    """Records of every kind, as ``suite.measure`` makes them, from made-up numbers."""
    grad = {"critic": 8, "actor": 8}
    sampling = Workload("s", lambda: None, env_steps=65_536, compile_s=0.7, params={"kind": "sampling", "env": "gymnax/Pendulum-v1", "num_envs": 1024})  # fmt: skip
    ref_s = Workload("r", lambda: None, env_steps=65_536, compile_s=0.5, params=sampling.params)
    update = Workload("u", lambda: None, update_samples=2048, grad_steps=grad, compile_s=2.5, flops=4.5e9, params={"kind": "update", "algo": "sac", "batch_size": 256, "flops_per_sample": 2.2e6})  # fmt: skip
    ref_u = Workload("ru", lambda: None, update_samples=2048, grad_steps=grad, flops=4.4e9, params={"kind": "update"})  # fmt: skip
    chunk = Workload("c", lambda: None, env_steps=512, update_samples=16_384, grad_steps={"critic": 64, "actor": 64}, compile_s=9.0, policy_lag=1.0, params={"kind": "chunk", "algo": "sac"})  # fmt: skip
    trainer = dataclasses.replace(chunk, params={"kind": "trainer", "algo": "ppo"})
    brax = {"name": "brax-ppo", "env_steps_per_s": 9000.0, "brax_epoch_compiled": [True, True, False, False, False], "hardware": HARDWARE}  # fmt: skip
    e2e = {**_record(chunk, 0.5), "kind": "end_to_end", "reached": True, "wall_to_threshold_s": 31.5, "env_steps_to_threshold": 12_000, "final_return": -150.25}  # fmt: skip
    e2e_not = {**e2e, "reached": False, "wall_to_threshold_s": None, "env_steps_to_threshold": None}
    side = lambda label, n, t, f: {"kind": "learning", "label": label, "num_envs": n, "batch_size": 256, "grad_steps": n, "chunk_iterations": 4, "grad_steps_per_env_step": 1.0, "wall_to_threshold_s": t[1], "wall_to_threshold_s_per_seed": t, "steady_to_threshold_s": t[0], "env_steps_to_threshold_per_seed": [4000, None, 6000], "final_return": sum(f) / 3, "final_return_std": 20.5, "final_return_per_seed": f, "reached": 2, "env_steps_per_s": 1234.5, "compile_s": 3.25}  # fmt: skip
    ours = side("autotuned", 32, [8.0, 9.0, None], [-170.0, -180.0, -200.0])
    default = side("default", 8, [10.0, 12.0, None], [-150.0, -190.0, -260.0])
    learning = with_reference(ours, default)
    learning.update(
        task="sac-Pendulum-v1",
        threshold=-200.0,
        verdict={
            "sooner": True,
            "speedup": 1.33,
            "steady_sooner": True,
            "steady_speedup": 1.25,
            "final_ok": True,
            "same_config": False,
        },
        autotune={"probe_s": 30.0},
    )
    same = {**learning, "task": "td3-Pendulum-v1", "verdict": {**learning["verdict"], "same_config": True}}  # fmt: skip
    stepping = lambda name, **p: Workload(name, lambda: None, env_steps=8192, compile_s=2.5, params={"kind": "suite", "num_envs": 64, "steps": 128, "env": "navix/Navix-Empty-8x8-v0", **p})  # fmt: skip
    side = lambda w, wall, cpu: {**_record(w, wall), "cpu_seconds_per_call": cpu, "env_steps_per_cpu_s": 8192 / cpu}  # fmt: skip
    own = side(stepping("own", variant="own", practice="Navix's step"), 0.2, 0.25)
    bound = side(stepping("bound", variant="bound", practice="no reset"), 0.1, 0.125)
    suite_row = side(stepping("suite"), 0.16, 0.2)
    suite_row.update(load_1min=[1.25, 1.5], references={"own": own, "bound": bound}, ratios={"own": {"wall": 1.25, "cpu": 1.25}, "bound": {"wall": 0.625, "cpu": 0.625}})  # fmt: skip
    broken = {**suite_row, "references": {"own": own, "bound": {"variant": "bound", "error": "TypeError: no"}}, "ratios": {"own": {"wall": 1.25, "cpu": 1.25}}}  # fmt: skip
    return _plain(
        [
            {"id": "sampling-a", **with_reference(_record(sampling, 0.1), _record(ref_s, 0.08))},
            {
                "id": "update-a",
                **with_reference(
                    _record(update, 0.2, peak=9e10, times=[0.2, 0.25, 0.21]), _record(ref_u, 0.1)
                ),
            },
            {"id": "update-b", **with_reference(_record(update, 0.2), {"error": "ValueError: no"})},
            {"id": "chunk-sac-cpu", **_record(chunk, 0.5)},
            {"id": "suite-navix/Navix-Empty-8x8-v0-64", **with_reference(suite_row, own)},
            {"id": "suite-navix/Navix-Empty-8x8-v0-256", **with_reference(broken, own)},
            {"id": "trainer-ppo", **with_reference(_record(trainer, 0.4), brax)},
            {"id": "end_to_end-sac", **e2e},
            {"id": "end_to_end-ppo", **e2e_not},
            {"id": "learning-sac", **learning},
            {"id": "learning-td3", **same},
            {"id": "update-ppo-256", "kind": "update", "algo": "ppo", "skipped": "no reference"},
            {"id": "chunk-ppo-cpu", "kind": "chunk", "error": "RuntimeError: " + "x" * 200},
        ]
    )


def tables() -> dict[str, Any]:
    """bench's console line, text table and bench.md of the records above."""
    recs = records()
    doc = {"command": "jaxspreeze bench --full", "selection": "full", "date": "2026-01-01 00:00 UTC", "hardware": {**HARDWARE, "devices": ["cpu", "cpu"]}, "versions": {"jax": "0", "flax": "1"}, "matmul_peak_flops_per_s": 1.8e11, "rounds": 5, "warmup": 1, "records": recs}  # fmt: skip
    return {
        "rows": [report.row(r) for r in recs],
        "table": report.table(recs),
        "markdown": report.markdown(doc),
        "markdown_note": report.markdown({**doc, "note": "CPU shared"}),
    }


def _curve(*returns: float) -> list[dict[str, Any]]:
    return [
        {"env_steps": 1000 * (i + 1), "return": r, "wall_s": 2.0 * (i + 1), "train_s": 1.5 * i}
        for i, r in enumerate(returns)
    ]


def score_tables() -> dict[str, Any]:
    """The time-to-score rows and tables from made-up curves, and the brax arguments."""
    t = score.TASKS
    rows = [
        score._row(
            "jaxspreeze",
            t["sac-inverted_pendulum"],
            _curve(10.0, 950.0, 400.0),
            compile_s=3.0,
            wall_s=9.5,
            load_start=1.25,
            load_end=2.0,
        ),
        score._row(
            "brax",
            t["sac-inverted_pendulum"],
            _curve(900.0, 990.0),
            compile_s=8.0,
            wall_s=4.0,
            notes="a; b",
        ),
        score._row("brax", t["sac-reacher"], _curve(-200.0, -120.0), compile_s=1.0, notes="c; a"),
        score.failed_row("jaxspreeze", t["ppo-reacher"], "boom " * 40),
        score._row("jaxspreeze", t["ppo-CheetahRun"], [], compile_s=2.0),
    ]
    doc = {"commands": [{"date": "2026-01-01", "command": "python x.py", "note": "n"}, {"date": "2026-01-02", "command": "y"}], "hardware": HARDWARE, "versions": {"jax": "0"}, "rows": rows}  # fmt: skip
    return _plain(
        {
            "rows": rows,
            "lines": [score.summary_line(r) for r in rows],
            "markdown": score.markdown(doc),
            "side_by_side": score.side_by_side(doc),
        }
    )


def brax_kwargs() -> dict[str, Any]:
    """brax's trainer arguments matched to each time-to-score preset (CPU and GPU sizes)."""
    kwargs: dict[str, Any] = {}
    for name, task in score.TASKS.items():
        try:
            planned = score.preset_config(task)
        except (ConfigError, ImportError, ValueError) as e:  # an env family not installed
            kwargs[name] = f"unavailable: {type(e).__name__}"
            continue
        kwargs[name] = [[k, v] for k, v in score.brax_kwargs(planned, task).items()]
        kwargs[name + " gpu"] = score.gpu_fields(task)
    return _plain(kwargs)


def selections() -> dict[str, Any]:
    """The cases of each selection, and the configs matched to brax's trainers."""
    out: dict[str, Any] = {}
    for full in (False, True):
        for scale in ("cpu", "gpu"):
            out[f"{full} {scale}"] = [c.id for c in suite.selection(full, scale)]
    for algo, env in suite.TRAINER_ROWS:
        if env.startswith("playground/") and not HAVE_PLAYGROUND:
            continue
        for scale in ("cpu", "gpu"):
            cfg, kw = suite.trainer_config(algo, env, scale, rounds=3)
            sizes = ("num_envs", "batch_size", "grad_steps", "rollout_steps", "chunk_iterations", "total_steps", "learning_starts")  # fmt: skip
            out[f"trainer {algo} {env} {scale}"] = [{k: getattr(cfg, k) for k in sizes}, kw]
    for algo in ("sac", "ppo"):
        for scale in ("cpu", "gpu"):
            cfg = suite._chunk_config(algo, scale)
            out[f"chunk {algo} {scale}"] = {k: getattr(cfg, k) for k in ("env", "num_envs", "batch_size", "grad_steps", "rollout_steps", "chunk_iterations", "total_steps")}  # fmt: skip
    return _plain(out)


def workloads() -> dict[str, Any]:
    """Small real workloads of each case and reference: their work and parameters."""
    tiny = (16,)
    chunk_cfg = cases.chunk_config("sac", "gymnax/Pendulum-v1", 4, 32, 3, grad_steps=2, hidden=tiny, buffer_size=1000, learning_starts=64)  # fmt: skip
    ppo_cfg = cases.chunk_config("ppo", "gymnax/CartPole-v1", 4, 32, 2, rollout_steps=16, hidden=tiny)  # fmt: skip
    out = {
        "sampling": workload_fields(cases.sampling("gymnax/Pendulum-v1", 2, steps=4, hidden=tiny)),
        "sampling_discrete": workload_fields(cases.sampling("gymnax/CartPole-v1", 3, hidden=tiny)),
        "update_sac": workload_fields(cases.update("sac", 32, hidden=tiny)),
        "update_td3": workload_fields(cases.update("td3", 32, grad_steps=4, hidden=tiny)),
        "update_ppo": workload_fields(
            cases.update("ppo", 32, env_name="gymnax/CartPole-v1", hidden=tiny)
        ),
        "update_fasttd3": workload_fields(cases.update("fasttd3", 32, grad_steps=2)),
        "chunk_sac": workload_fields(cases.chunk(chunk_cfg)),
        "chunk_ppo": workload_fields(cases.chunk(ppo_cfg)),
        "reference_sampling": workload_fields(
            references.sampling("gymnax/Pendulum-v1", 2, 4, hidden=tiny)
        ),
        "reference_sampling_discrete": workload_fields(
            references.sampling("gymnax/CartPole-v1", 2, 4, hidden=tiny)
        ),
        "reference_update": workload_fields(
            references.sac_update(32, 3, hidden=tiny, capacity=500)
        ),
    }
    for w in out.values():
        w["flops"] = w["flops"] is not None and w["flops"] > 0  # XLA's count: not pinned
        w["params"].pop("flops_per_sample", None)
    for threshold in (-1e9, 1e9):  # reached after the first chunk; never reached
        warmup = plan(chunk_cfg, on_devices=False).warmup_steps
        cfg = chunk_cfg.replace(total_steps=warmup + 2 * 3 * 4)
        rec = cases.end_to_end(cfg, threshold, eval_episodes=2)
        keys = list(rec)
        timed = ("seconds_per_call", "env_steps_per_s", "update_samples_per_s", "grad_steps_per_s", "compile_s", "wall_to_threshold_s", "wall_s", "train_s", "eval_s", "hardware", "versions")  # fmt: skip
        fixed = {k: v for k, v in rec.items() if k not in timed and k != "curve"}
        curve = [{k: p[k] for k in ("env_steps", "return")} for p in rec["curve"]]
        reached = rec["wall_to_threshold_s"] is not None
        out[f"end_to_end {threshold:g}"] = {"keys": keys, "fixed": fixed, "curve": curve, "reached_s": reached}  # fmt: skip
    return _plain(out)


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def same(got: Any, want: Any) -> bool:
    """Equal as JSON text: the same values, NaN included, with keys in the same order."""
    return json.dumps(got) == json.dumps(want)


def test_the_report_tables_are_pinned():
    got, want = _plain(tables()), _golden()["tables"]
    for key in want:
        assert same(got[key], want[key]), key


def test_the_time_to_score_tables_are_pinned():
    got, want = score_tables(), _golden()["score"]
    for key in want:
        assert same(got[key], want[key]), key


@pytest.mark.slow  # loads every preset's env (brax, Playground)
def test_the_brax_arguments_are_pinned():
    got, want = brax_kwargs(), _golden()["brax_kwargs"]
    for name, kw in want.items():
        mine = got.get(name)
        if not isinstance(kw, str) and not isinstance(mine, str):  # both installed
            assert same(mine, kw), name


def test_the_selections_are_pinned():
    got, want = selections(), _golden()["selections"]
    for key in got:
        assert same(got[key], want[key]), key


@pytest.mark.slow  # compiles a dozen small programs (about a minute on 2 idle cores)
def test_the_workloads_are_pinned():
    got, want = workloads(), _golden()["workloads"]
    for key in got:
        assert same(got[key], want[key]), key


def _write() -> None:
    """Record the golden file from the code as it is (a deliberate change only)."""
    out = {
        "tables": _plain(tables()),
        "score": score_tables(),
        "brax_kwargs": brax_kwargs(),
        "selections": selections(),
        "workloads": workloads(),
    }
    GOLDEN.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    _write()
