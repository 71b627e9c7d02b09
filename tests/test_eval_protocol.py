"""The evaluation protocol: fresh starts at every evaluation (the run's evaluation key folded
with the env step), a standard error over episodes; the best policy as part of the run's
state (restored on resume, never from a chunk that failed its finiteness check)."""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import (
    EvalResult,
    Snapshot,
    make_episodes,
    make_seed_evaluate,
    start_key,
    summarize,
)
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.core.errors import NonFiniteError
from jaxspreeze.envs import make_env
from jaxspreeze.run import records
from jaxspreeze.run.checkpoint_eval import evaluate_checkpoint
from jaxspreeze.run.evalwatch import BEST_DIR, JOURNAL, BestPolicies, EvalWatch, best_file
from jaxspreeze.run.guards import Tripwire
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.plan import plan

ENV = "gymnax/Pendulum-v1"


@pytest.fixture(scope="module")
def agent():
    """A SAC agent (untrained, 2 seeds) on Pendulum and its algorithm."""
    from jaxspreeze.setup.config import RunConfig

    cfg = RunConfig(algo="sac", env=ENV, num_seeds=2).replace(sac={"hidden": (16,)})
    planned = plan(cfg, on_devices=False)
    algo = planned.make_algorithm()
    actor = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(3), 2)).actor
    return algo, actor


def test_the_same_step_and_seed_draw_the_same_starts_and_other_steps_others(agent):
    algo, actor = agent
    env = make_env(ENV, 8)
    key = jax.random.key(10_000)
    starts = lambda steps: np.asarray(env.reset(jax.random.split(start_key(key, steps))[0])[0])
    np.testing.assert_array_equal(starts(1000), starts(1000))
    assert not np.allclose(starts(1000), starts(2000))
    evaluate = make_seed_evaluate(algo, env, jax.random.split(key, 2))
    at = lambda steps: np.asarray(evaluate(actor, steps).return_mean)
    np.testing.assert_array_equal(at(1000), at(1000))  # one checkpoint, one step: the same
    assert not np.allclose(at(1000), at(2000))  # the same actor at another step: new starts


def test_the_standard_error_is_numpys_over_the_episode_returns(agent):
    algo, actor = agent
    one = jax.tree.map(lambda x: x[0], actor)
    ret, length = jax.jit(make_episodes(algo, make_env(ENV, 32)))(one, jax.random.key(5))
    result = summarize(ret, length)
    ret = np.asarray(ret, np.float64)
    assert np.std(ret) > 0  # the starts differ, so the returns do
    want = np.std(ret, ddof=1) / np.sqrt(ret.size)
    np.testing.assert_allclose(float(result.return_se), want, rtol=1e-4)
    np.testing.assert_allclose(float(result.return_mean), ret.mean(), rtol=1e-5)
    # over seeds: the standard error of the mean of the seeds' means
    assert records.seeds_se([3.0, 4.0]) == pytest.approx(2.5)


def _result(*means):
    n = len(means)
    return EvalResult(np.array(means), np.ones(n), np.full(n, 200.0), np.full(n, 0.5))


def _bests(run_dir, slots=None):
    slots = slots or {None: range(1)}

    def write(path, actor, unit):
        save_policy(path.parent, actor, path.name)

    return BestPolicies(run_dir, slots, write)


def test_a_tripped_chunk_gives_no_best_and_no_stop(tmp_path):
    watch = EvalWatch(tmp_path, stop_at_return=-1e9, bests=_bests(tmp_path))
    watch.seen(Snapshot({"w": np.ones(2)}, 400, 3, False), _result(-10.0), tripped=True)
    assert watch.best is None and watch.reason is None
    assert not (tmp_path / best_file(None)).exists()
    wire = Tripwire()
    wire.check({"kind": "chunk", "chunk": 3, "critic_finite": False, "env_steps": 400})
    assert wire.tripped_by(3) and wire.tripped_by(4) and not wire.tripped_by(2)


def test_a_restore_keeps_the_bests_up_to_the_checkpoint(tmp_path):
    kept = tmp_path / "checkpoints" / "000000000250"  # the run's one checkpoint (a stand-in)
    kept.mkdir(parents=True)
    (kept / "manifest.json").write_text("{}")
    bests = _bests(tmp_path)
    for i, (steps, mean) in enumerate([(100, -300.0), (200, -100.0), (300, -50.0)]):
        actor = {"w": np.full(2, float(i))}
        bests.offer(Snapshot(actor, steps, i, False), actor, _result(mean), 8)
    assert bests.best[None].env_steps == 300
    # kept on disk: the current best's actor and the one a resume from 250 needs
    files = sorted(p.name for p in (tmp_path / BEST_DIR).glob("*.msgpack"))
    assert files == ["run-000000000200.msgpack", "run-000000000300.msgpack"]
    again = _bests(tmp_path)  # a new process resuming from a checkpoint at 250
    again.restore(250)
    best = again.best[None]
    assert (best.env_steps, best.eval_return, best.episodes) == (200, -100.0, 8)
    from flax import serialization

    kept = serialization.msgpack_restore((tmp_path / best_file(None)).read_bytes())
    assert np.all(kept["w"] == 1.0)  # the actor of the evaluation at 200, not at 300
    lines = (tmp_path / BEST_DIR / JOURNAL).read_text().splitlines()
    assert [json.loads(x)["env_steps"] for x in lines] == [100, 200]
    # a worse evaluation after the resume leaves it; a better one replaces it
    worse, better = {"w": np.full(2, 7.0)}, {"w": np.full(2, 8.0)}
    again.offer(Snapshot(worse, 300, 3, False), worse, _result(-150.0), 8)
    assert again.best[None].env_steps == 200
    again.offer(Snapshot(better, 400, 4, False), better, _result(-20.0), 8)
    assert again.best[None].env_steps == 400


def test_a_nan_stopped_run_keeps_no_best_from_the_bad_chunk(tiny_cfg, monkeypatch):
    """The 4th chunk's guard flags say non-finite (its state is fine): its evaluation, the
    run's first, must not become the best policy."""
    cfg = tiny_cfg.replace(total_steps=1_400, eval_every=1_000, run_name="nan-best")
    original = schedules.Fused.chunk
    calls = {"n": 0}

    def flagged_chunk(self, state):
        state, metrics = original(self, state)
        calls["n"] += 1
        if calls["n"] == 4:  # the chunk ending at env step 1000 (200 warm-up + 4 x 200)
            metrics = {**metrics, "critic_finite": jnp.zeros_like(metrics["critic_finite"])}
        return state, metrics

    monkeypatch.setattr(schedules.Fused, "chunk", flagged_chunk)
    with pytest.raises(NonFiniteError):
        train(cfg, quiet=True)
    run_dir = tmp_cfg_dir(cfg)
    time.sleep(2.0)  # (an evaluation still running would have written by now)
    assert not (run_dir / best_file(None)).exists()
    journal = run_dir / BEST_DIR / JOURNAL
    assert not journal.exists() or journal.read_text() == ""


def tmp_cfg_dir(cfg):
    from jaxspreeze.store import rundir

    return rundir.path_of(cfg)


def _unit_returns(run_dir, unit):
    """Every non-final evaluation's return of ``unit`` in metrics.jsonl, with its step."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") != "eval" or r.get("final"):
            continue
        value = r["eval_return"] if unit == "run" else r["eval_return_per_member"][int(unit)]
        out.append((value, r["env_steps"]))
    return out


def _stop_then_resume(run, resume, units, total):
    """A run stopped at a checkpoint (a target reached at its first evaluation: a clean
    stop as a signal's), then resumed: each unit's best is the best of every evaluation
    before and after the resume, its file the actor of that evaluation."""
    first = run()
    stopped_at = first.summary["env_steps"]
    assert first.summary["stopped"] is not None and stopped_at < total
    before = first.summary["best_eval"]
    files = {u: (first.run_dir / BEST_DIR / before[u]["file"]).read_bytes() for u in units}
    resumed = resume(first.run_dir, stopped_at)
    after = resumed.summary["best_eval"]
    kept = 0
    for u in units:
        seen = _unit_returns(resumed.run_dir, u)
        final = resumed.summary["final_eval_return" if u == "run" else "members"]
        final = final if u == "run" else final[int(u)]["final_return"]
        value, steps = max([*seen, (final, resumed.summary["env_steps"])], key=lambda x: x[0])
        assert after[u]["eval_return"] == pytest.approx(value, abs=1e-4)
        assert after[u]["env_steps"] == steps
        if steps <= stopped_at:  # the best from before the resume: value, step and file
            kept += 1
            assert after[u]["eval_return"] == before[u]["eval_return"]
            public = resumed.run_dir / after[u]["policy"]
            assert public.read_bytes() == files[u]
    return kept


def test_resume_restores_the_best_policy_of_a_run(tiny_cfg):
    cfg = tiny_cfg.replace(total_steps=8_200, eval_every=200, stop_at_return=-1e9)
    again = cfg.replace(stop_at_return=None)
    kept = _stop_then_resume(
        lambda: train(cfg, quiet=True),
        lambda d, at: train(again.replace(total_steps=at + 400), quiet=True, resume=d),
        ["run"],
        8_200,
    )
    # (these seeds: the evaluations after the resume are worse, so the kept best is the
    # one from before it; which evaluations run depends on the evaluator's timing, so
    # the restore itself is pinned by test_a_restore_keeps_the_bests_up_to_the_checkpoint)
    assert kept <= 1


@pytest.mark.slow
def test_resume_restores_each_sweep_members_best(tmp_path):
    from test_sweep import _cfg

    cfg = _cfg(tmp_path, "bests", total_steps=4_000, stop_at_return=-1e9)
    again = cfg.replace(stop_at_return=None)
    grid = {"actor_lr": [1e-3, 3e-3]}
    kept = _stop_then_resume(
        lambda: jaxspreeze.sweep(cfg, grid=grid, quiet=True),
        lambda d, at: jaxspreeze.sweep(
            again.replace(total_steps=at + 200), grid=grid, quiet=True, resume=d
        ),
        ["0", "1"],
        4_000,
    )
    assert kept >= 1


@pytest.mark.slow
def test_resume_restores_the_bests_of_pbt(tmp_path):
    from test_pbt import GRID
    from test_pbt import _cfg as pbt_cfg

    cfg = pbt_cfg(tmp_path, "pbt-bests", eval_every=200, stop_at_return=-1e9)
    again = cfg.replace(stop_at_return=None)
    _stop_then_resume(
        lambda: jaxspreeze.sweep(cfg, grid=GRID, quiet=True),
        lambda d, at: jaxspreeze.sweep(again, grid=GRID, quiet=True, resume=d),
        ["0", "1", "2", "3"],
        2_000,
    )


def test_a_run_reports_its_protocol_and_eval_reproduces_its_final_evaluation(tiny_cfg):
    result = train(tiny_cfg.replace(eval_episodes=4), quiet=True)
    s = result.summary
    assert s["eval_protocol"]["episodes"] == 4 and s["eval_protocol"]["starts"] == "fresh"
    assert s["final_eval_return_se"] is not None and s["best_eval"]["run"]["episodes"] == 4
    evals = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if r["kind"] == "eval"]
    assert all(r["eval_episodes"] == 4 and r["eval_starts"] == "fresh" for r in evals)
    same = evaluate_checkpoint(result.run_dir)  # the run's seed and step: its own starts
    assert same["return_mean"] == s["final_eval_return_per_seed"]
    assert same["mean_return_se"] == pytest.approx(s["final_eval_return_se"], rel=1e-6)
    other = evaluate_checkpoint(result.run_dir, seed=7)  # another seed: other starts
    assert other["return_mean"] != same["return_mean"] and other["eval_seed"] == 7


def test_the_default_episodes_follow_the_envs_step_cost():
    """eval_episodes unset: 128 on a device env, 16 on a host env, and 16 on a brax or
    Playground env on a CPU (a physics step there costs about 8x as long for 128 envs),
    128 of them on an accelerator; what a user sets is kept."""
    from jaxspreeze.setup.config import RunConfig, default_eval_episodes, resolve

    for env, cpu, gpu in (
        ("gymnax/Pendulum-v1", 128, 128),
        ("gymnax/Breakout-MinAtar", 128, 128),
        ("brax/pusher", 16, 128),
        ("playground/CheetahRun", 16, 128),
        ("gymnasium/Pendulum-v1", 16, 16),
        ("user/MyEnv", 16, 16),
    ):
        assert (default_eval_episodes(env, "cpu"), default_eval_episodes(env, "gpu")) == (cpu, gpu)
    if jax.default_backend() != "cpu":
        pytest.skip("resolve's backend here is not a CPU")
    assert resolve(RunConfig(algo="ppo", env="brax/reacher")).eval_episodes == 16
    assert resolve(RunConfig(algo="ppo", env="brax/reacher", eval_episodes=64)).eval_episodes == 64
    assert resolve(RunConfig()).eval_episodes == 128  # the default job: gymnax Pendulum
