"""What an evaluation does beyond its record: the best policy kept, a stop at a target
return (``--stop-at-return``) or by the ``on_eval`` callback, with a resumable checkpoint."""

from __future__ import annotations

import numpy as np
from flax import serialization

from jaxspreeze import cli
from jaxspreeze.agent.evaluate import EvalResult, Snapshot
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.run.evalwatch import BEST_POLICY_FILE, REACHED, BestPolicies, EvalWatch
from jaxspreeze.run.trainer import train
from jaxspreeze.store import checkpoint


def _leaves(tree):
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    return [tree]


def _result(mean):
    return EvalResult(np.array([mean]), np.array([1.0]), np.array([200.0]))


def test_the_best_evaluation_is_kept_and_a_target_asks_to_stop(tmp_path):
    bests = BestPolicies(
        tmp_path, {None: range(1)}, lambda p, a, u: save_policy(p.parent, a, p.name)
    )
    watch = EvalWatch(tmp_path, stop_at_return=-50.0, bests=bests)
    for i, mean in enumerate([-300.0, -120.0, -200.0]):
        watch.seen(Snapshot({"w": np.full(2, float(i))}, 100 * (i + 1), i, False), _result(mean))
    best = serialization.msgpack_restore((tmp_path / BEST_POLICY_FILE).read_bytes())
    assert watch.best == -120.0 and np.all(best["w"] == 1.0)  # the second, not the last
    assert watch.reason is None
    watch.seen(Snapshot({"w": np.zeros(2)}, 400, 3, False), _result(-40.0))
    assert watch.reason.startswith(REACHED) and "-40.0" in watch.reason and "400" in watch.reason


def test_stop_at_return_stops_early_with_a_resumable_checkpoint(tiny_cfg, capsys):
    cfg = tiny_cfg.replace(total_steps=8200, eval_every=200, stop_at_return=-1e9)
    result = train(cfg)
    out = capsys.readouterr().out
    steps = result.summary["env_steps"]
    assert result.summary["stopped"].startswith(REACHED) and steps < 8200
    assert f"stopped: {REACHED} --stop-at-return" in out
    assert checkpoint.read_manifest(checkpoint.latest(result.run_dir))["env_steps"] == steps
    assert (result.run_dir / "policy.msgpack").exists()
    best = serialization.msgpack_restore((result.run_dir / BEST_POLICY_FILE).read_bytes())
    assert best and all(np.all(np.isfinite(x)) for x in _leaves(best))  # a real actor
    resumed = train(
        cfg.replace(stop_at_return=None, total_steps=steps + 400), resume=result.run_dir
    )
    assert resumed.summary["env_steps"] >= steps + 400 and resumed.summary["stopped"] is None


def test_on_eval_sees_every_evaluation_and_can_stop_the_run(tiny_cfg):
    seen = []

    def on_eval(record):
        seen.append(record)
        return len(seen) == 2  # stop at the second evaluation

    result = train(tiny_cfg.replace(total_steps=8200, eval_every=200), quiet=True, on_eval=on_eval)
    assert "on_eval" in result.summary["stopped"] and result.summary["env_steps"] < 8200
    assert [r["env_steps"] for r in seen[:2]] == sorted(r["env_steps"] for r in seen[:2])
    assert all(np.isfinite(r["eval_return"]) for r in seen)


def test_the_flag_is_on_the_command_line(tmp_path):
    from jaxspreeze.cli.train import parse_train_args

    assert parse_train_args(["--stop-at-return", "-200"]).stop_at_return == -200.0
    assert cli.main(["train", "--stop-at-return", "lots", "--logdir", str(tmp_path)]) == 2


def test_a_stopping_run_skips_no_evaluation_and_stops_where_it_did_before(tiny_cfg):
    """With a target (here on_eval, slow on purpose: 0.4 s an evaluation against a few ms
    a chunk), every evaluation runs and the run stops at the evaluation point after the one
    that asked: the same env step on every run of the seed, whatever the evaluator's pace."""
    import time

    def run(name):
        seen = []

        def on_eval(record):
            time.sleep(0.4)
            seen.append(record["env_steps"])
            return len(seen) == 2  # stop at the second evaluation

        cfg = tiny_cfg.replace(total_steps=8200, eval_every=200, run_name=name)
        result = train(cfg, quiet=True, on_eval=on_eval)
        return result.summary, seen

    (a, seen_a), (b, seen_b) = run("a"), run("b")
    assert a["evaluations_skipped"] == 0 and b["evaluations_skipped"] == 0
    assert seen_a[:2] == seen_b[:2] and a["env_steps"] == b["env_steps"] < 8200
    period = seen_a[1] - seen_a[0]
    assert a["env_steps"] == seen_a[1] + period  # the evaluation point after the second
