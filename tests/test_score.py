"""`jaxspreeze score`: the runs' order, the report's fields, skipped sides and the plot.

The default tests run the command with stand-in sides (tiny runners written here,
plugged in through JAXSPREEZE_SCORE_SIDES, the same table the real peers are in): no
peer is installed and no JAX is started in the sides' processes. The `slow` test runs
one real tiny row.
"""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from jaxspreeze.cli import main
from jaxspreeze.score import peers as score_peers
from jaxspreeze.score import rows as score_rows
from jaxspreeze.score import runs as score_run
from jaxspreeze.score import sides as score_sides
from jaxspreeze.score import tasks as score_tasks

ROW = "sac-Pendulum-v1"  # a gymnax row; the stand-ins run gymnax rows

FAKE = textwrap.dedent(
    '''
    """Stand-in sides for tests/test_score.py (no JAX)."""
    import os, time
    from pathlib import Path
    from jaxspreeze.score.rows import row
    from jaxspreeze.score.sides import Side

    def _run(name, returns, task, run):
        cache = Path(run.compile_cache)
        warm = (cache / "marker").exists()  # a cold run's cache is fresh; warm reuses it
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "marker").write_text(name)
        with open(os.environ["FAKE_SCORE_LOG"], "a") as f:
            f.write(f"{name} {run.seed} {'warm' if warm else 'cold'} {run.scale} "
                    f"{run.total_steps} {run.peer_settings}\\n")
        curve = []
        for i, r in enumerate(returns):
            now = time.time()
            curve.append({"env_steps": 1000 * (i + 1), "return": r + run.seed,
                          "wall_s": 0.1 * (i + 1), "command_s": now - run.started})
        settings = {"kind": run.peer_settings, "source": f"{name}'s {run.peer_settings} table",
                    "defaults": False, "note": "", "options": {"lr": 0.5}}
        evaluation = {"episodes": 7, "every": 1000, "starts": "fresh at every evaluation",
                      "deterministic": True, "by": f"{name}'s evaluator"}
        return row(name, task, curve, compile_s=0.5, notes=f"{name}: a stand-in",
                   settings=settings, evaluation=evaluation)

    def run_a(task, run):
        return _run("fake-a", [-900.0, -150.0, -120.0], task, run)

    def run_b(task, run):
        return _run("fake-b", [-1000.0, -800.0], task, run)

    SIDES = [
        Side("fake-a", "fakepeer:run_a", ("gymnax",), ("*",)),
        Side("fake-b", "fakepeer:run_b", ("gymnax",), ("sac",)),
        Side("fake-missing", "fakepeer:run_a", ("gymnax",), ("*",),
             requires=("no_such_module_xyz",), install="pip install no-such-peer"),
        Side("fake-brax-only", "fakepeer:run_a", ("brax",), ("*",)),
    ]
    '''
)


@pytest.fixture
def fake_sides(tmp_path, monkeypatch):
    """The stand-in sides plugged in for this process and the sides' processes."""
    (tmp_path / "fakepeer.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import os

    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep + path if path else ''}")
    monkeypatch.setenv(score_sides.PLUGIN_VAR, "fakepeer:SIDES")
    log = tmp_path / "runs.log"
    monkeypatch.setenv("FAKE_SCORE_LOG", str(log))
    return log


def test_score_interleaves_the_sides_and_writes_json_markdown_and_plot(
    fake_sides, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["score", "--rows", ROW, "--seeds", "2", "--out", str(out), "--total-steps", "3000"]
    argv += ["--sides", "fake-a", "fake-b", "fake-missing", "fake-brax-only"]
    assert main(argv) == 0
    printed = capsys.readouterr().out

    # the order: per seed, every side cold, then every side warm on the cold run's cache
    expected = [
        (side, seed, cache)
        for seed in (0, 1)
        for cache in ("cold", "warm")
        for side in ("fake-a", "fake-b")
    ]
    lines = [line.split() for line in fake_sides.read_text().splitlines()]
    assert [(s, int(seed), c) for s, seed, c, *_ in lines] == expected
    # peers run their own settings by default (--peer-settings own)
    assert {tuple(line[3:]) for line in lines} == {("cpu", "3000", "own")}

    doc = json.loads((out / "score.json").read_text())
    assert [(r["side"], r["seed"], r["cache"]) for r in doc["runs"]] == expected
    assert [r["order"] for r in doc["runs"]] == list(range(8))
    assert doc["seeds"] == 2 and doc["caches"] == ["cold", "warm"]
    assert doc["sides"] == {ROW: ["fake-a", "fake-b"]}  # fake-brax-only runs no gymnax row
    for r in doc["runs"]:
        assert r["rc"] == 0 and "error" not in r, r
        row = r["row"]
        assert row["task"] == ROW and row["threshold"] == -200.0
        assert row["command_to_threshold_s"] is None or row["command_to_threshold_s"] > 0
        assert all(p["command_s"] > 0 for p in row["curve"])

    # the skipped side: named, with why and how to install it, in the JSON, report, console
    (skipped,) = doc["skipped"]
    assert skipped["side"] == "fake-missing" and skipped["task"] == ROW
    assert "no_such_module_xyz" in skipped["why"] and "pip install no-such-peer" in skipped["why"]
    md = (out / "score.md").read_text()
    assert "Skipped sides:" in md and f"fake-missing on {ROW}: not installed" in md
    assert "skipped fake-missing" in printed

    # the medians per (row, side), cold and warm apart
    a, b = doc["summary"]
    assert (a["side"], b["side"]) == ("fake-a", "fake-b")
    assert (a["reached"], a["of"], a["cold_runs"], a["warm_runs"]) == (4, 4, 2, 2)
    assert a["env_steps_to_threshold"] == 2000  # seed 0: -150; seed 1: -149
    assert a["final_return"] == statistics_median([-120.0, -120.0, -119.0, -119.0])
    assert a["best_return"] == -119.5
    for key in ("cold_command_to_threshold_s", "warm_command_to_threshold_s"):
        assert a[key] > 0, key
    assert a["wall_to_threshold_s"] == pytest.approx(0.2)
    assert (b["reached"], b["of"]) == (0, 4)
    assert b["env_steps_to_threshold"] is None and b["cold_command_to_threshold_s"] is None
    assert f"| {ROW} (gymnax/Pendulum-v1, thr. -200) | fake-b (own) | 0/4 | - |" in md
    assert "| -799.5 | -799.5 | 2,000 | 0 / 0 |" in md  # fake-b: final, best, steps, compile
    assert "fake-a: a stand-in" in md

    # the plot: one PNG per row, return against wall from the command's start
    assert doc["plots"] == [str(out / f"{ROW}.png")]
    assert (out / f"{ROW}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def statistics_median(values):
    import statistics

    return statistics.median(values)


def test_no_warm_runs_cold_only_and_a_failed_side_is_reported(fake_sides, tmp_path, monkeypatch):
    broken = tmp_path / "fakepeer.py"
    broken.write_text(
        broken.read_text().replace(
            'return _run("fake-b"',
            'raise RuntimeError("stand-in failure")\n    return _run("fake-b"',
        )
    )
    out = tmp_path / "out"
    argv = ["score", "--rows", ROW, "--seeds", "1", "--no-warm", "--out", str(out)]
    assert main([*argv, "--sides", "fake-a", "fake-b"]) == 1
    doc = json.loads((out / "score.json").read_text())
    assert [(r["side"], r["cache"]) for r in doc["runs"]] == [
        ("fake-a", "cold"),
        ("fake-b", "cold"),
    ]
    assert doc["runs"][1]["error"] == "RuntimeError: stand-in failure"
    md = (out / "score.md").read_text()
    assert "Failed runs:" in md
    assert "fake-b (own) on sac-Pendulum-v1: seed 0 cold: RuntimeError" in md
    # the failed side's line still names the row's env and threshold
    assert f"| {ROW} (gymnax/Pendulum-v1, thr. -200) | fake-b (own) | 0/0 | - |" in md


def test_refusals_and_the_list(fake_sides, capsys):
    assert main(["score", "--rows", "no-such-row"]) == 2
    assert "no row matches" in capsys.readouterr().err
    assert main(["score", "--sides", "nope"]) == 2
    assert "unknown side(s) nope" in capsys.readouterr().err
    assert main(["score", "--seeds", "0"]) == 2
    assert main(["score", "--list", "--rows", ROW, "--sides", "fake-a", "fake-missing"]) == 0
    listed = capsys.readouterr().out
    assert "sides: fake-a, fake-missing (not installed)" in listed


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--run-timeout-s", "-1"], "--run-timeout-s: must be a number of seconds > 0, got -1"),
        (["--run-timeout-s", "0"], "--run-timeout-s: must be a number of seconds > 0, got 0"),
        (["--run-timeout-s", "nan"], "--run-timeout-s: must be a number of seconds > 0"),
        (["--out", "{file}/report"], "--out: {file} is a file, so {file}/report cannot be made"),
        (["--out", "{file}"], "--out: {file} is a file; give a folder for the report"),
        (["--out", "{tmp}/" + "n" * 300], "--out: nnnn"),
        (["--merge", "{tmp}", "--out", "{file}"], "--out: {file} is a file"),
    ],
)
def test_score_flags_are_checked_before_any_side_runs(
    fake_sides, capsys, tmp_path, monkeypatch, flags, says
):
    from jaxspreeze.score import runs as score_runs

    monkeypatch.setattr(score_runs, "run_one", lambda *a, **k: pytest.fail("a side ran"))
    file = tmp_path / "a-file"
    file.write_text("")
    fill = lambda text: text.format(file=file, tmp=tmp_path)
    capsys.readouterr()
    assert main(["score", "--rows", ROW, "--sides", "fake-a", *map(fill, flags)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"jaxspreeze: error: {fill(says)}") and "--logdir" not in line


def test_which_sides_run_which_rows():
    """brax's trainers on brax and Playground rows, rejax on gymnax, SBX on gymnasium."""
    table = {s.name: s for s in score_sides.BUILTIN}
    for task in score_tasks.ROWS.values():
        runs = {n for n, s in table.items() if s.runs(task.family, task.algo)}
        peer = {"brax": "brax", "playground": "brax", "gymnax": "rejax", "gymnasium": "sbx"}
        if task.algo.startswith("fast"):  # no peer runs the fast recipes
            assert runs == {"jaxspreeze"}, task.name
        else:
            assert runs == {"jaxspreeze", peer[task.family]}, task.name
    # the rows the issue lists
    for name in (
        "sac-Pendulum-v1", "td3-Pendulum-v1", "ppo-CartPole-v1", "ppo-Acrobot-v1",
        "sac-inverted_pendulum", "ppo-reacher", "sac-halfcheetah", "ppo-CartpoleBalance",
        "sac-CheetahRun", "sac-gymnasium-Pendulum-v1", "td3-HalfCheetah-v5",
        # issue 26's rows of the fast recipes
        *(f"{algo}-{env}" for algo in ("fasttd3", "fastsac") for env in (
            "Pendulum-v1", "inverted_pendulum", "reacher", "halfcheetah", "CheetahRun",
            "HalfCheetah-v5")),
    ):  # fmt: skip
        assert name in score_tasks.ROWS
    runs = score_run.order(
        [score_tasks.ROWS[ROW]], {ROW: ["jaxspreeze", "rejax"]}, 2, ("cold", "warm")
    )
    assert [(seed, cache, side) for _, seed, cache, side, _ in runs][:4] == [
        (0, "cold", "jaxspreeze"),
        (0, "cold", "rejax"),
        (0, "warm", "jaxspreeze"),
        (0, "warm", "rejax"),
    ]


def test_medians_count_an_unreached_seed_as_never():
    task = score_tasks.ROWS[ROW]

    def run(seed, returns, cache="cold"):
        curve = [
            {"env_steps": 100 * (i + 1), "return": r, "wall_s": i, "command_s": 10.0 + i}
            for i, r in enumerate(returns)
        ]
        return {"task": ROW, "side": "x", "seed": seed, "cache": cache,
                "row": score_rows.row("x", task, curve)}  # fmt: skip

    two_of_three = [run(0, [-300, -100]), run(1, [-100]), run(2, [-300, -300])]
    (line,) = score_rows.summarise(two_of_three)
    assert (line["reached"], line["of"]) == (2, 3)
    assert line["env_steps_to_threshold"] == 200  # median of 200, 100, never
    assert line["cold_command_to_threshold_s"] == 11.0
    (line,) = score_rows.summarise([run(0, [-300, -100]), run(1, [-300]), run(2, [-300])])
    assert line["env_steps_to_threshold"] is None  # one of three: no median
    assert math.isnan(score_rows.row("x", task, [])["final_return"])


@pytest.mark.slow
def test_a_real_tiny_row_end_to_end(tmp_path):
    """jaxspreeze (and rejax when installed, its own settings and matched) on gymnax
    Pendulum SAC, one seed, a reduced budget, cold and warm: every run has its curve with
    standard errors, each point's wall from the command's start exceeds its wall after
    compilation, every side is evaluated on the row's episodes, and the report is written."""
    import subprocess
    import sys

    out = tmp_path / "out"
    argv = ["--rows", ROW, "--seeds", "1", "--total-steps", "2000", "--out", str(out)]
    argv += ["--peer-settings", "both"]
    done = subprocess.run(
        [sys.executable, "-m", "jaxspreeze", "score", *argv], capture_output=True, text=True,
        timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "score.json").read_text())
    sides = doc["sides"][ROW]
    assert sides[0] == "jaxspreeze"
    kinds = {"jaxspreeze": ["preset"], "rejax": ["own", "matched"]}
    assert [(r["side"], r["settings"], r["cache"]) for r in doc["runs"]] == [
        (s, k, c) for c in ("cold", "warm") for s in sides for k in kinds[s]
    ]
    for r in doc["runs"]:
        curve = r["row"]["curve"]
        assert curve and curve[-1]["env_steps"] >= 2000, r["side"]
        # rejax's evaluation at step 0 (before any training) is at its run's start
        assert all(p["command_s"] > p["wall_s"] >= 0 for p in curve), curve
        assert curve[-1]["wall_s"] > 0, curve
        assert all(p["return_se"] > 0 for p in curve), curve
        assert r["row"]["compile_s"] > 0
        assert r["row"]["evaluation"]["episodes"] == 128
        assert r["row"]["settings"]["kind"] == r["settings"]
    if "rejax" not in sides:
        assert [k["side"] for k in doc["skipped"]] == ["rejax"]
    assert (out / f"{ROW}.png").exists() and "| jaxspreeze |" in (out / "score.md").read_text()


@pytest.mark.parametrize("row", ["sac-Pendulum-v1", "td3-Pendulum-v1", "ppo-CartPole-v1"])
def test_rejax_options_give_each_network_its_own_table(row):
    """rejax's create_agent pops "activation" from a network's table and writes the function
    back: two networks sharing one table (TD3's actor and critic) broke the second."""
    from jaxspreeze.score import runners as score

    task = score_tasks.ROWS[row]
    first = score_peers._rejax_config(score.preset_config(task), task)
    tables = [v for k, v in first.items() if k.endswith("_kwargs")]
    assert tables and len({id(t) for t in tables}) == len(tables)
    for t in tables:  # what rejax does to them
        t["activation"] = getattr(__import__("flax").linen, t.pop("activation"))
    again = score_peers._rejax_config(score.preset_config(task), task)
    assert all(v["activation"] == "relu" for k, v in again.items() if k.endswith("_kwargs"))


def test_a_one_program_peer_curve_is_stamped_by_its_share_of_the_steps():
    """rejax's evaluations come back with its trained state (no host callback): each point
    is the run's wall at its share of the env steps, from the run's start and the
    command's."""
    curve = score_peers.interpolated_curve([0, 500, 1500, 2000], [-9.0, -5.0, -2.0, -1.0],
                                           [1.0, 0.5, 0.25, 0.125], 8.0, 3.0)  # fmt: skip
    assert [p["wall_s"] for p in curve] == [0.0, 2.0, 6.0, 8.0]
    assert [p["command_s"] for p in curve] == [3.0, 5.0, 9.0, 11.0]
    assert [p["return"] for p in curve] == [-9.0, -5.0, -2.0, -1.0]
    assert curve[2] == {"env_steps": 1500, "return": -2.0, "return_se": 0.25, "wall_s": 6.0,
                        "command_s": 9.0}  # fmt: skip
    reached = score_rows.row("rejax", score_tasks.ROWS[ROW], curve)
    assert reached["final_return"] == -1.0 and reached["env_steps"] == 2000
