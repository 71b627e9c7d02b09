"""`jaxspreeze score`'s goal section and `--merge`: the verdict per row against the best
peer (0.7x) or, for the fast recipes, against SAC/TD3's rows (below 1x), the gap split
into compile, steps and rate; one report from several runs. No JAX, no processes."""

from __future__ import annotations

import json

import pytest

from jaxspreeze.cli import main
from jaxspreeze.score import goal as score_goal
from jaxspreeze.score import rows as score_rows
from jaxspreeze.score import runs as score_run
from jaxspreeze.score import tasks as score_tasks


def _run(task, side, seed, *, before, per_step, returns, cache="cold", every=1000):
    """One run whose evaluations come every ``every`` env steps, ``before`` seconds of
    start-up and compilation and ``per_step`` seconds per env step after it."""
    t = score_tasks.ROWS[task]
    curve = []
    for i, r in enumerate(returns):
        steps = every * (i + 1)
        wall = steps * per_step
        curve.append({"env_steps": steps, "return": r, "wall_s": wall, "command_s": before + wall})
    row = score_rows.row(side, t, curve, compile_s=before)
    return {"task": task, "side": side, "seed": seed, "cache": cache, "row": row}


def _seeds(task, side, **kw):
    return [_run(task, side, s, **kw) for s in range(3)]


def test_the_gap_is_split_into_compile_steps_and_rate_and_the_largest_is_why():
    task = "sac-Pendulum-v1"
    runs = _seeds(task, "jaxspreeze", before=30.0, per_step=0.002, returns=[-900, -500, -150])
    runs += _seeds(task, "rejax", before=10.0, per_step=0.004, returns=[-900, -150])
    runs += _seeds(task, "slowpeer", before=50.0, per_step=0.01, returns=[-150])
    summary = score_rows.summarise(runs)
    mine = summary[0]
    assert mine["cold_before_s"] == pytest.approx(30.0)
    assert mine["cold_s_per_step"] == pytest.approx(0.002)
    (v,) = score_goal.judge(summary)
    # jaxspreeze: 30 + 3000 * 0.002 = 36 s; the best peer (rejax): 10 + 2000 * 0.004 = 18 s
    assert v["reference"] == "rejax" and v["reference_s"] == pytest.approx(18.0)
    assert v["ratio"] == pytest.approx(2.0) and not v["met"] and v["goal"] == 0.7
    assert v["terms"] == pytest.approx({"compile": 20.0, "steps": 4.0, "rate": -6.0})
    assert v["why"] == "compile" and v["verdict"] == "not met: compile"
    # the terms add up to the gap
    assert sum(v["terms"].values()) == pytest.approx(v["wall_s"] - v["reference_s"])


def test_met_only_at_or_below_the_goal_and_unreached_sides():
    task = "ppo-CartPole-v1"
    fast = _seeds(task, "jaxspreeze", before=7.0, per_step=0.001, returns=[500])
    peer = _seeds(task, "rejax", before=10.0, per_step=0.001, returns=[500])
    (v,) = score_goal.judge(score_rows.summarise(fast + peer))
    assert v["ratio"] == pytest.approx(8 / 11) and not v["met"]  # 0.73x: above 0.7
    fast = _seeds(task, "jaxspreeze", before=6.0, per_step=0.001, returns=[500])
    (v,) = score_goal.judge(score_rows.summarise(fast + peer))
    assert v["met"] and v["verdict"] == "met"  # 7 / 11 = 0.64x
    never = _seeds(task, "jaxspreeze", before=6.0, per_step=0.001, returns=[100, 200])
    (v,) = score_goal.judge(score_rows.summarise(never + peer))
    assert not v["met"] and v["why"] == "steps" and v["wall_s"] is None
    (v,) = score_goal.judge(score_rows.summarise(fast + _seeds(task, "rejax", before=1.0,
                                                               per_step=0.001, returns=[9])))  # fmt: skip
    assert v["met"] and "the reference does not" in v["verdict"]


def test_fast_rows_are_judged_against_sac_and_td3_of_their_env_cold_and_warm_apart():
    assert score_tasks.ROWS["fasttd3-HalfCheetah-v5"].versus == (
        "sac-HalfCheetah-v5",
        "td3-HalfCheetah-v5",
    )
    assert score_tasks.ROWS["fastsac-reacher"].versus == ("sac-reacher",)
    assert all(v in score_tasks.ROWS for t in score_tasks.ROWS.values() for v in t.versus)
    env = "Pendulum-v1"
    runs = _seeds(f"sac-{env}", "jaxspreeze", before=20.0, per_step=0.004, returns=[-150])
    runs += _seeds(f"td3-{env}", "jaxspreeze", before=20.0, per_step=0.003, returns=[-150])
    runs += _seeds(f"td3-{env}", "jaxspreeze", before=3.0, per_step=0.003, returns=[-150],
                   cache="warm")  # fmt: skip
    runs += _seeds(f"fasttd3-{env}", "jaxspreeze", before=20.0, per_step=0.02, returns=[-150])
    runs += _seeds(f"fasttd3-{env}", "jaxspreeze", before=3.0, per_step=0.001, returns=[-150],
                   cache="warm")  # fmt: skip
    verdicts = {(v["task"], v["cache"]): v for v in score_goal.judge(score_rows.summarise(runs))}
    assert set(verdicts) == {(f"fasttd3-{env}", "cold"), (f"fasttd3-{env}", "warm")}
    cold, warm = verdicts[(f"fasttd3-{env}", "cold")], verdicts[(f"fasttd3-{env}", "warm")]
    assert cold["reference"] == f"jaxspreeze on td3-{env}" and cold["goal"] == 1.0
    assert not cold["met"] and cold["why"] == "rate"
    assert warm["met"] and warm["reference_s"] == pytest.approx(6.0)  # 4 s against 6 s


def _score_dir(tmp_path, name, runs, note=""):
    out = tmp_path / name
    out.mkdir()
    doc = {"command": f"jaxspreeze score {name}", "date": "2026-12-05 05:00 UTC", "note": note,
           "hardware": {"cpus": 2}, "versions": {}, "scale": "cpu", "seeds": 3,
           "caches": ["cold"], "rows": list(dict.fromkeys(r["task"] for r in runs)),
           "sides": {}, "skipped": [], "runs": runs, "summary": [], "plots": []}  # fmt: skip
    score_run.write(doc, out)
    return out


def test_merge_makes_one_report_from_several_runs(tmp_path, capsys):
    task = "sac-Pendulum-v1"
    a = _score_dir(tmp_path, "a", _seeds(task, "jaxspreeze", before=5.0, per_step=0.001,
                                         returns=[-150]), note="first")  # fmt: skip
    b = _score_dir(tmp_path, "b", _seeds(task, "rejax", before=10.0, per_step=0.001,
                                         returns=[-150]) + _seeds("ppo-CartPole-v1", "jaxspreeze",
                                         before=1.0, per_step=0.001, returns=[500]))  # fmt: skip
    out = tmp_path / "merged"
    assert main(["score", "--merge", str(a), str(b), "--out", str(out), "--note", "n"]) == 0
    doc = json.loads((out / "score.json").read_text())
    assert [s["dir"] for s in doc["sources"]] == [str(a), str(b)]
    assert doc["sources"][0]["note"] == "first" and doc["note"] == "n"
    assert {(r["task"], r["side"], r["source"]) for r in doc["runs"]} == {
        (task, "jaxspreeze", 0),
        (task, "rejax", 1),
        ("ppo-CartPole-v1", "jaxspreeze", 1),
    }
    assert doc["rows"] == [task, "ppo-CartPole-v1"]
    (v,) = score_goal.judge(doc["summary"])  # the row's sides met across the two runs
    assert v["ratio"] == pytest.approx(6 / 11) and v["met"]
    md = (out / "score.md").read_text()
    assert "1. 2026-12-05 05:00 UTC: `jaxspreeze score a` (first)" in md
    assert f"| {task} (gymnax/Pendulum-v1, thr. -200) | rejax (run 2) | 3/3 |" in md
    assert "## Against the goal" in md
    assert sorted(p.name for p in out.glob("*.png")) == ["ppo-CartPole-v1.png", f"{task}.png"]
    assert "wrote" in capsys.readouterr().out


def test_merge_takes_a_row_side_from_the_last_run_given(tmp_path):
    """A rerun of a row's side (e.g. beside its peer) replaces the earlier one whole, and
    the report says so; the earlier run's other rows stay."""
    task, other = "sac-Pendulum-v1", "td3-Pendulum-v1"
    a = _score_dir(tmp_path, "a", _seeds(task, "jaxspreeze", before=5.0, per_step=0.001,
                   returns=[-150]) + _seeds(other, "jaxspreeze", before=5.0, per_step=0.001,
                   returns=[-150]))  # fmt: skip
    b = _score_dir(tmp_path, "b", _seeds(task, "jaxspreeze", before=7.0, per_step=0.001,
                   returns=[-150]) + _seeds(task, "rejax", before=10.0, per_step=0.001,
                   returns=[-150]))  # fmt: skip
    out = tmp_path / "merged"
    assert main(["score", "--merge", str(a), str(b), "--out", str(out)]) == 0
    doc = json.loads((out / "score.json").read_text())
    held = {(r["task"], r["side"]): set() for r in doc["runs"]}
    for r in doc["runs"]:
        held[(r["task"], r["side"])].add(r["source"])
    assert held == {(task, "jaxspreeze"): {1}, (task, "rejax"): {1}, (other, "jaxspreeze"): {0}}
    assert doc["replaced"] == [
        {"task": task, "side": "jaxspreeze", "settings": None, "source": 0, "by": 1}
    ]
    (line,) = [s for s in doc["summary"] if s["task"] == task and s["side"] == "jaxspreeze"]
    assert line["cold_before_s"] == pytest.approx(7.0)
    md = (out / "score.md").read_text()
    assert f"- jaxspreeze on {task}: run 1's by run 2's" in md


def test_merge_refusals(tmp_path, capsys):
    task = "sac-Pendulum-v1"
    runs = _seeds(task, "jaxspreeze", before=5.0, per_step=0.001, returns=[-150])
    a = _score_dir(tmp_path, "a", runs)
    out = str(tmp_path / "out")
    assert main(["score", "--merge", str(a), str(a), "--out", out]) == 2
    err = capsys.readouterr().err
    assert "a folder is given twice" in err and "Traceback" not in err
    assert main(["score", "--merge", str(a), "--rows", task, "--out", out]) == 2
    assert "--merge runs nothing: leave out --rows" in capsys.readouterr().err
    assert main(["score", "--merge", str(a), "--list", "--out", out]) == 2
    assert "leave out --list" in capsys.readouterr().err
    assert main(["score", "--merge", str(a), str(tmp_path / "nope"), "--out", out]) == 2
    assert "nope: no such file" in capsys.readouterr().err
    assert main(["score", "--merge", str(a), "--out", str(a)]) == 2
    assert "--out" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_row_with_a_peer_and_a_row_to_beat_gets_both_verdicts():
    """PQN on a MinAtar game: against rejax (at most 0.7x) and against jaxspreeze's PPO on
    the same game (below 1x, no peers' settings)."""
    task = "pqn-Breakout-MinAtar"
    ppo = score_tasks.ROWS[task].versus[0]
    thr = score_tasks.ROWS[task].threshold
    runs = _seeds(task, "jaxspreeze", before=10.0, per_step=0.001, returns=[0, thr])
    runs += _seeds(task, "rejax", before=5.0, per_step=0.001, returns=[0, 0, 0])
    runs += _seeds(ppo, "jaxspreeze", before=10.0, per_step=0.002, returns=[0, 0, thr])
    peer, beside = score_goal.judge(score_rows.summarise(runs))
    assert (peer["reference"], peer["goal"], peer["met"]) == ("rejax", 0.7, True)
    assert peer["verdict"] == "met: jaxspreeze reaches it, the reference does not"
    assert beside["reference"] == f"jaxspreeze on {ppo}" and beside["goal"] == 1.0
    # 10 + 2000 * 0.001 = 12 s against 10 + 3000 * 0.002 = 16 s
    assert beside["ratio"] == pytest.approx(12 / 16) and beside["met"]
    assert beside["peer_settings"] is None
