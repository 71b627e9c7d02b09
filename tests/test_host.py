"""The host side: the evaluator thread, snapshots, and a training run with held and
failing host threads (training never waits on them and never traces the chunk again)."""

from __future__ import annotations

import collections
import json
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_sinks import read_csv, read_tensorboard

from jaxspreeze.agent import evaluate as evaluate_lib
from jaxspreeze.agent.evaluate import (
    EvalResult,
    Evaluator,
    make_seed_evaluate,
    snapshot_copy,
    start_key,
)
from jaxspreeze.agent.policy import load_policy
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.run import threads, trainer
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.sinks import metrics

TRACE = "/jax/core/compile/jaxpr_trace_duration"  # JAX's own event: a function traced


def tiny(tmp, **changes) -> RunConfig:
    """A SAC run on Pendulum small enough to compile and train in seconds."""
    base = RunConfig(
        total_steps=600,
        num_envs=4,
        grad_steps=2,
        batch_size=32,
        buffer_size=2_000,
        learning_starts=200,
        chunk_iterations=20,
        eval_episodes=2,
        logdir=str(tmp),
        run_name="host",
        sac=SACConfig(hidden=(32, 32)),
    )
    return base.replace(**changes)


# ---------------------------------------------------------------------------- units
def test_snapshot_is_a_copy_that_survives_donation():
    step = jax.jit(lambda t: jax.tree.map(lambda x: x + 1, t), donate_argnums=0)
    actor = {"w": jnp.arange(4.0), "b": jnp.ones(2)}
    on_device = snapshot_copy(actor, jax.devices()[0])
    local = snapshot_copy(actor)
    new = step(actor)  # donates `actor`'s buffers, as the next chunk does
    np.testing.assert_array_equal(new["w"], np.arange(4.0) + 1)
    for snap in (on_device, local):
        np.testing.assert_array_equal(snap["w"], np.arange(4.0))
        np.testing.assert_array_equal(snap["b"], np.ones(2))


def test_evaluator_latest_wins_counts_skips_and_survives_errors():
    started, gate, reports = threading.Event(), threading.Event(), []

    def evaluate(actor, env_steps):
        if not started.is_set():
            started.set()
            gate.wait(60)
            raise RuntimeError("nan policy")
        return EvalResult(actor["v"], jnp.zeros(()), jnp.ones(()))

    ev = Evaluator(evaluate, report=reports.append, skip=True)
    first = ev.submit({"v": jnp.float32(0)}, env_steps=0)
    assert started.wait(60)  # the thread holds snapshot 0 inside evaluate()
    later = [ev.submit({"v": jnp.float32(i)}, env_steps=i) for i in range(1, 5)]
    gate.set()
    snap, result = later[-1].result(60)
    ev.close()
    assert snap.env_steps == 4 and float(result.return_mean) == 4.0
    # the newest WAITING (2) waited: 3 and 4 ran, 1 and 2 were replaced
    assert [f.cancelled() for f in later] == [True, True, False, False]
    assert float(later[2].result(1)[1].return_mean) == 3.0
    assert isinstance(first.exception(), RuntimeError)
    assert ev.stats()["evaluations_done"] == 2
    assert ev.skipped == 2 and ev.failed == 1 and ev.submitted == 5
    assert len(reports) == 1 and "nan policy" in reports[0]


def test_evaluator_that_may_not_skip_makes_submit_wait_and_evaluates_every_snapshot():
    """One CPU's policy: a snapshot that finds every waiting place taken waits for one
    (training waits) instead of replacing the oldest."""
    started, gate = threading.Event(), threading.Event()

    def evaluate(actor, env_steps):
        started.set()
        assert gate.wait(60)
        return EvalResult(actor["v"], jnp.zeros(()), jnp.ones(()))

    ev = Evaluator(evaluate, skip=False)
    futures = [ev.submit({"v": jnp.float32(0)}, env_steps=0)]
    assert started.wait(60)  # the thread holds snapshot 0
    futures += [ev.submit({"v": jnp.float32(i)}, env_steps=i) for i in (1, 2)]  # two wait
    fourth = threading.Thread(
        target=lambda: futures.append(ev.submit({"v": jnp.float32(3)}, env_steps=3))
    )
    fourth.start()
    fourth.join(0.5)
    assert fourth.is_alive() and len(futures) == 3  # no place: the submit waits
    gate.set()
    fourth.join(60)
    ev.close()
    assert [float(f.result(60)[1].return_mean) for f in futures] == [0.0, 1.0, 2.0, 3.0]
    assert ev.skipped == 0 and ev.done == 4 and ev.submitted == 4


def test_evaluator_skips_only_where_the_process_has_a_spare_cpu(monkeypatch):
    evaluate = lambda actor, env_steps: EvalResult(jnp.zeros(()), jnp.zeros(()), jnp.ones(()))
    for cpus, skips in ((1, False), (2, True)):
        monkeypatch.setattr("os.sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        ev = Evaluator(evaluate)
        ev.close()
        assert ev._skip is skips


def test_evaluator_return_equals_a_direct_call_of_evaluate(tmp_path):
    from jaxspreeze.agent.evaluate import make_evaluate
    from jaxspreeze.envs import make_env

    cfg = tiny(tmp_path, num_seeds=2)
    algo = RunPlan.saved(cfg).make_algorithm()
    # one jitted init (one compile), not each initializer's op-by-op compile
    actor = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(1), 2)).actor
    env = make_env(cfg.env, 3)
    keys = jax.random.split(jax.random.key(7), 2)
    direct = jax.jit(make_evaluate(algo, env))
    # the evaluation at 300 env steps: each seed's key folded with the step
    expected = [
        jax.device_get(direct(jax.tree.map(lambda x: x[i], actor), start_key(keys[i], 300)))
        for i in (0, 1)
    ]

    ev = Evaluator(make_seed_evaluate(algo, env, keys), device=jax.devices()[0])
    _, result = ev.submit(actor, env_steps=300).result(300)
    ev.close()
    for i in (0, 1):
        for got, want in zip(result, expected[i], strict=True):
            np.testing.assert_allclose(got[i], want, rtol=1e-5)


# ------------------------------------------------------------ a run with held threads
class Recorder:
    """Keeps records; releases the held evaluator once the last chunk's record arrives."""

    name = "recorder"

    def __init__(self, last_chunk: int, gate: threading.Event):
        self.last_chunk, self.gate = last_chunk, gate
        self.records: list[dict] = []
        self.chunks_before_release: list[int] = []

    def write(self, record):
        self.records.append(record)
        if record["kind"] == "chunk" and record["chunk"] == self.last_chunk:
            self.chunks_before_release = [r["chunk"] for r in self.records if r["kind"] == "chunk"]
            self.gate.set()

    def close(self):
        pass


class Boom:
    """A sink whose every write fails."""

    name = "boom"

    def write(self, record):
        raise RuntimeError("sink exploded")

    def close(self):
        pass


@pytest.fixture(scope="module")
def held_run(tmp_path_factory):
    """5 chunks with an evaluator that blocks (then raises) until the last chunk is done."""
    cfg = tiny(
        tmp_path_factory.mktemp("runs"),
        num_seeds=2,
        eval_every=80,  # a snapshot at every chunk boundary (80 env steps per chunk)
        sinks=("jsonl", "csv", "tensorboard", "plots"),
    )
    gate, held, reports = threading.Event(), {}, []
    traces: collections.Counter = collections.Counter()
    real = threads.make_seed_evaluate

    def held_eval_fn(act, env, keys):
        fn = real(act, env, keys)

        def evaluate(actor, env_steps):
            if "timed_out" not in held:  # the first evaluation waits for the last chunk
                held["timed_out"] = not gate.wait(300)
                raise RuntimeError("evaluator exploded")
            return fn(actor)

        return evaluate

    def listen(event: str, duration: float, **kwargs: object) -> None:
        if event == TRACE:
            traces[kwargs.get("fun_name")] += 1

    recorder = Recorder(last_chunk=4, gate=gate)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(threads, "make_seed_evaluate", held_eval_fn)
            # skipping is the point (training never waits for the held evaluator): as
            # where the process has a second CPU, whatever CPUs this test may run on
            mp.setattr(evaluate_lib, "spare_cpu", lambda: True)
            mp.setattr(metrics, "warn", reports.append)
            result = trainer.train(cfg, quiet=True, sinks=[recorder, Boom()])
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return result, recorder, held, reports, traces


def test_training_finishes_every_chunk_while_the_evaluator_is_held(held_run):
    result, recorder, held, _, _ = held_run
    assert result.summary["chunks"] == 5
    assert held == {"timed_out": False}  # released by the last chunk's record, not a timeout
    assert recorder.chunks_before_release == [0, 1, 2, 3, 4]
    s = result.summary
    # snapshots at chunks 0-3 and the final one: 0 was held (then failed), 1 was replaced
    # while it was held (2 and 3 waited: two wait); 2 either ran or was replaced by the
    # final one
    assert s["evaluations_failed"] == 1
    assert s["evaluations_skipped"] + s["evaluations_done"] == 4
    assert s["evaluations_skipped"] >= 1
    assert np.isfinite(s["final_eval_return"]) and len(s["final_eval_return_per_seed"]) == 2
    evals = [r for r in recorder.records if r["kind"] == "eval"]
    assert len(evals) == s["evaluations_done"]
    assert evals[-1]["final"] and evals[-1]["env_steps"] == 600
    assert evals[-1]["eval_return"] == pytest.approx(s["final_eval_return"])


def test_a_failing_sink_and_evaluator_are_reported_not_raised(held_run):
    result, recorder, _, reports, _ = held_run
    s = result.summary
    n_records = len(recorder.records)
    assert n_records == 5 + result.summary["evaluations_done"]  # chunks + evaluations
    assert s["sink_drops"] == {
        "jsonl": 0,
        "csv": 0,
        "tensorboard": 0,
        "plots": 0,
        "recorder": 0,
        "boom": n_records,
    }
    assert s["sink_errors"] == {"boom": "RuntimeError: sink exploded"}
    assert sum("'boom'" in r for r in reports) == 1
    assert sum("evaluator exploded" in r for r in reports) == 1
    saved = json.loads((result.run_dir / "summary.json").read_text())
    assert saved["sink_drops"]["boom"] == n_records
    for key in (
        "final_eval_return",
        "env_steps",
        "env_steps_total",
        "wall_s",
        "compile_s",
        "env_steps_per_s",
        "update_samples_per_s",
        "grad_steps_per_s",
        "replay_ratio",
        "policy_lag",
        "eval_wall_s",
    ):
        assert key in saved


def test_chunk_traces_once_with_sinks_and_evaluator_on(held_run):
    result, traces = held_run[0], held_run[4]
    assert traces["fused_chunk"] == 1  # the schedule's chunk program (single device)
    schedule = result.schedule
    hlo = jax.jit(schedule.fused_chunk).lower(schedule.init_abstract()).as_text().lower()
    assert "callback" not in hlo and "print" not in hlo


def test_env_steps_count_one_seed_and_the_total_counts_all(held_run):
    result, recorder, _, _, _ = held_run
    s = result.summary
    assert s["env_steps"] == 600 and s["env_steps_total"] == 2 * 600  # 2 seeds
    chunks = [r for r in recorder.records if r["kind"] == "chunk"]
    assert [r["env_steps"] for r in chunks] == [200 + 80 * (i + 1) for i in range(5)]


def test_jsonl_csv_and_tensorboard_agree_for_the_run(held_run):
    run_dir = held_run[0].run_dir
    jsonl = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = read_csv(run_dir / "metrics.csv")
    tb = read_tensorboard(run_dir / "tb")
    assert [r["env_steps"] for r in jsonl] == [int(r["env_steps"]) for r in rows]
    assert [r["kind"] for r in jsonl].count("chunk") == 5
    for rec, row in zip(jsonl, rows, strict=True):
        prefix = "eval" if rec["kind"] == "eval" else "train"
        for key in ("critic_loss", "env_steps_per_s", "eval_return", "wall_s"):
            if rec.get(key) is None:
                continue
            assert float(row[key]) == rec[key]
            assert tb[f"{prefix}/{key}"][rec["env_steps"]] == pytest.approx(rec[key], rel=1e-6)
        for i, v in enumerate(rec.get("critic_loss_per_seed", [])):
            assert float(row[f"critic_loss_seed{i}"]) == v
            assert tb[f"train/critic_loss/seed{i}"][rec["env_steps"]] == pytest.approx(v, rel=1e-6)


def test_run_dir_holds_pictures_and_the_final_policy(held_run):
    result = held_run[0]
    for name in ("learning_curve.png", "throughput.png"):
        data = (result.run_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    policy = load_policy(result.run_dir)
    assert policy.cfg.num_seeds == 2
    jax.tree.map(
        np.testing.assert_array_equal, policy.actor, jax.device_get(result.state.agent.actor)
    )
