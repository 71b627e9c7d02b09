"""Every preset (jaxspreeze/presets, shipped as package data) validates; the time-to-score table.

Cheap: configs are loaded, resolved and validated (which builds each env's spec, no
compile); nothing trains.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from jaxspreeze import algos
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.score import runners as score
from jaxspreeze.score import tasks as score_tasks
from jaxspreeze.setup import config
from jaxspreeze.setup.plan import plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRESETS = score_tasks.PRESETS  # the package's presets (package data)
HAVE_PLAYGROUND = importlib.util.find_spec("mujoco_playground") is not None
HAVE_BRAX = importlib.util.find_spec("brax") is not None
HAVE_CRAFTAX = importlib.util.find_spec("craftax") is not None  # an extra, not in [test]
ALL = sorted(PRESETS.glob("*.toml"))


def _needs(path: Path) -> str | None:
    text = path.read_text()
    if 'env = "playground/' in text and not HAVE_PLAYGROUND:
        return "MuJoCo Playground not installed"
    if 'env = "brax/' in text and not HAVE_BRAX:
        return "brax not installed"
    if 'env = "craftax/' in text and not HAVE_CRAFTAX:
        return 'Craftax not installed (pip install "jaxspreeze[craftax]")'
    return None


def test_the_presets_folder_is_found():
    assert len(ALL) >= 20


def test_the_presets_ship_as_package_data(tmp_path):
    """The presets live in the package (pyproject's package-data names them) and
    ``jaxspreeze score`` reads them there: from a copy of the package alone, away from the
    source tree, every row's preset is found and loads."""
    package = Path(config.__file__).parents[1]  # jaxspreeze/ (config: jaxspreeze/setup/)
    assert PRESETS == package / "presets"
    data = tomllib.loads((package.parent / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["jaxspreeze"]
    shipped = {p for g in globs for p in package.glob(g)}
    assert set(ALL) <= shipped, "a preset left out of the package data"
    site = tmp_path / "site"
    shutil.copytree(package, site / "jaxspreeze", ignore=shutil.ignore_patterns("__pycache__"))
    child = (
        "from jaxspreeze.bench import score_tasks as s; from jaxspreeze import config; "
        f"assert str(s.PRESETS).startswith({str(site)!r}), s.PRESETS; "
        "[config.load(t.path) for t in s.ROWS.values()]; print(len(s.ROWS))"
    )
    out = subprocess.run(
        [sys.executable, "-c", child],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) == len(score.ROWS)


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_every_preset_validates(path):
    if reason := _needs(path):
        pytest.skip(reason)
    cfg = plan(config.load(path), on_devices=False).cfg
    assert path.stem.startswith(cfg.algo + "_"), "a preset is named <algo>_<task>"
    assert f"--config experiments/presets/{path.name}" in path.read_text(), (
        "a preset's header gives the command that runs it"
    )


def test_a_broken_preset_is_refused(tmp_path):
    bad = tmp_path / "sac_bad.toml"
    bad.write_text('algo = "sac"\nenv = "gymnax/Pendulum-v1"\nnum_envs = 0\n')
    with pytest.raises(ConfigError):
        plan(config.load(bad), on_devices=False)


def test_every_time_to_score_task_has_its_preset_and_threshold():
    assert len(score.TASKS) == 10
    assert {t.algo for t in score.TASKS.values()} == {"sac", "ppo"}
    for task in score.TASKS.values():
        assert task.path.exists(), task.path
        cfg = config.load(task.path)
        assert (cfg.algo, cfg.env) == (task.algo, task.env), task.name
        assert task.threshold == score.THRESHOLDS[task.env]


@pytest.mark.parametrize("name", list(score.TASKS))
def test_time_to_score_configs_align_chunks_to_evaluations(name):
    task = score.TASKS[name]
    if reason := _needs(task.path):
        pytest.skip(reason)
    planned = score.preset_config(task)
    cfg = planned.cfg
    assert cfg.num_seeds == 1 and cfg.eval_episodes == task.eval_episodes
    chunk_steps = cfg.chunk_iterations * planned.steps_per_iteration
    assert 0 < chunk_steps <= task.eval_every
    assert task.eval_every - chunk_steps < planned.steps_per_iteration


@pytest.mark.parametrize("name", list(score.TASKS))
def test_brax_arguments_match_the_preset(name):
    task = score.TASKS[name]
    if reason := _needs(task.path):
        pytest.skip(reason)
    planned = score.preset_config(task)
    cfg = planned.cfg
    kw = score.brax_kwargs(planned, task)
    assert kw["num_envs"] == cfg.num_envs and kw["num_timesteps"] == cfg.total_steps
    assert kw["hidden"] == tuple(planned.algo_config.hidden)
    assert kw["num_eval_envs"] == task.eval_episodes and kw["deterministic_eval"]
    if algos.get(task.algo).on_policy:
        # brax collects batch_size x num_minibatches rows of unroll_length steps per
        # update: one row per env, the same samples per minibatch as jaxspreeze
        assert kw["batch_size"] * kw["num_minibatches"] == cfg.num_envs
        assert kw["unroll_length"] == cfg.rollout_steps
        assert kw["batch_size"] * kw["unroll_length"] == cfg.batch_size
        assert kw["num_updates_per_batch"] == planned.algo_config.epochs
    else:
        assert kw["batch_size"] == cfg.batch_size
        assert kw["grad_updates_per_step"] * cfg.num_envs == cfg.grad_steps * cfg.num_envs
        assert kw["max_replay_size"] == cfg.buffer_size


def _curve(*returns: float) -> list[dict]:
    return [
        {
            "env_steps": 1000 * (i + 1),
            "return": r,
            "wall_s": 2.0 * (i + 1),
            "train_s": 1.5 * (i + 1),
        }
        for i, r in enumerate(returns)
    ]


def test_the_first_evaluation_at_the_threshold_is_read_and_the_last_is_final():
    task = score.TASKS["sac-inverted_pendulum"]
    row = score._row("jaxspreeze", task, _curve(10.0, 950.0, 400.0, 1000.0), compile_s=3.0)
    assert row["reached"]
    assert row["env_steps_to_threshold"] == 2000
    assert row["wall_to_threshold_s"] == 4.0 and row["train_to_threshold_s"] == 3.0
    assert row["final_return"] == 1000.0 and row["best_return"] == 1000.0
    assert "| yes | 2,000 |" in score.markdown({"rows": [row]})


def test_an_unreached_threshold_reports_the_final_return():
    task = score.TASKS["sac-reacher"]
    row = score._row("brax", task, _curve(-200.0, -120.0, -95.0), compile_s=1.0)
    assert not row["reached"] and row["env_steps_to_threshold"] is None
    assert row["final_return"] == -95.0
    table = score.markdown({"rows": [row, score.failed_row("jaxspreeze", task, "boom")]})
    assert "| no | - |" in table and "failed: boom" in table


@pytest.mark.parametrize("name", list(score.TASKS))
def test_gpu_sizes_validate_and_keep_the_update_ratio(name):
    task = score.TASKS[name]
    if reason := _needs(task.path):
        pytest.skip(reason)
    cpu = score.preset_config(task)
    gpu = score.preset_config(task, **score.gpu_fields(task))
    assert gpu.cfg.num_envs == cpu.cfg.num_envs * score.GPU_ENVS
    ratio = lambda p: p.cfg.grad_steps * p.cfg.batch_size / p.steps_per_iteration
    if not algos.get(task.algo).on_policy:
        assert ratio(gpu) == ratio(cpu)
    else:
        per_update = lambda p: p.cfg.num_envs * p.cfg.rollout_steps // p.cfg.batch_size
        assert per_update(gpu) == per_update(cpu)


def test_the_readme_table_puts_brax_beside_jaxspreeze():
    task = score.TASKS["ppo-inverted_pendulum"]
    ours = score._row("jaxspreeze", task, _curve(100.0, 1000.0), compile_s=30.0, wall_s=5.0)
    theirs = score._row("brax", task, _curve(50.0, 200.0), wall_s=7.0)
    table = score.side_by_side({"rows": [ours, theirs]})
    line = next(x for x in table.splitlines() if x.startswith("| ppo_inverted_pendulum"))
    assert "| 2,000 | 4 | 1000.0 | 5 | not reached | - | 200.0 | 7 | 30 |" in line
    assert "sac_inverted_pendulum" not in table  # rows not run are left out



@pytest.mark.skipif(not HAVE_BRAX, reason="brax is not installed")
@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_run_brax_calls_brax_train_with_the_preset(algo, monkeypatch):
    """The brax side calls brax's own ``train`` function (looked up by brax's trainer name)
    with the preset's arguments, and reads its evaluations into a row."""
    train_fn, factory = score._brax_trainer(algo, score._brax_hidden(algo, (32, 32)))
    assert train_fn.__module__ == f"brax.training.agents.{algo}.train" and callable(factory)
    calls = []

    def fake_train(**kwargs):
        calls.append(kwargs)
        kwargs["progress_fn"](0, {"eval/episode_reward": 1.0})
        kwargs["progress_fn"](kwargs["num_timesteps"], {"eval/episode_reward": 950.0})

    monkeypatch.setattr(score, "_brax_trainer", lambda a, hidden: (fake_train, factory))
    task = next(
        t for t in score.TASKS.values() if t.env == "brax/inverted_pendulum" and t.algo == algo
    )
    row = score.run_brax(task, compile_cache="off")
    (kwargs,) = calls
    assert kwargs["num_timesteps"] == score.brax_kwargs(score.preset_config(task), task)[
        "num_timesteps"
    ]
    assert kwargs["network_factory"] is factory and kwargs["environment"] is not None
    assert row["side"] == "brax" and row["final_return"] == 950.0


@pytest.mark.skipif(not HAVE_BRAX, reason="brax is not installed")
def test_brax_ppo_keeps_terminations_on_inverted_pendulum():
    """brax's inverted_pendulum marks every fall ``time_out``: brax's PPO must not bootstrap
    there (``bootstrap_on_timeout``), or falling costs nothing and it cannot learn."""
    from brax import envs as brax_envs

    task = score.TASKS["ppo-inverted_pendulum"]
    assert score.brax_kwargs(score.preset_config(task), task)["bootstrap_on_timeout"] is False
    env = brax_envs.get_environment("inverted_pendulum")
    assert "time_out" in env.reset(jax.random.key(0)).info  # the reason, still there
