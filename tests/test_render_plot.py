"""Plots and renders of a short run directory: the library functions and their commands
(``jaxspreeze plot``, ``jaxspreeze render``)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import jax
import numpy as np
import pytest
from test_host_train import tiny_ppo

from jaxspreeze import cli
from jaxspreeze.agent import render
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.algos.ppo import PPOConfig
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.sinks import JsonlSink, NotebookPlotSink
from jaxspreeze.sinks import figures as plots
from jaxspreeze.store import rundir

PNG = b"\x89PNG\r\n\x1a\n"


def short_run(tmp: Path, name: str, env: str = "gymnax/Pendulum-v1", algo: str = "sac") -> Path:
    """A run directory as a short 2-seed run leaves it: config, metrics, policy."""
    cfg = RunConfig(
        algo=algo,
        env=env,
        num_seeds=2,
        total_steps=1000,
        logdir=str(tmp),
        run_name=name,
        sac=SACConfig(hidden=(32, 32)),
        ppo=PPOConfig(hidden=(32, 32)),
    )
    run_dir = rundir.create(cfg).path
    algorithm = RunPlan.saved(cfg).make_algorithm()
    save_policy(run_dir, jax.vmap(algorithm.init)(jax.random.split(jax.random.key(0), 2)).actor)
    sink = JsonlSink(run_dir)
    for i in range(6):
        steps = 200 * (i + 1)
        ret = [-1500.0 + 100 * i + 30 * s for s in range(2)]
        sink.write(
            {
                "kind": "chunk",
                "env_steps": steps,
                "chunk": i,
                "wall_s": 2.0 + i,
                "episode_return": math.nan if i == 0 else sum(ret) / 2,
                "episode_return_per_seed": [math.nan, math.nan] if i == 0 else ret,
                "env_steps_per_s": 1000.0 + 50 * i,
                "update_samples_per_s": 2.5e5 + 1e4 * i,
            }
        )
        if i % 2:
            sink.write(
                {
                    "kind": "eval",
                    "env_steps": steps,
                    "chunk": i,
                    "wall_s": 2.0 + i,
                    "final": i == 5,
                    "eval_return": sum(ret) / 2 + 50,
                    "eval_return_per_seed": [r + 50 for r in ret],
                }
            )
    sink.close()
    return run_dir


@pytest.mark.slow  # a whole run for its plots (the default run stays under 10 minutes)
def test_write_run_plots_writes_the_run_pngs(tmp_path):
    run_dir = short_run(tmp_path, "a")
    paths = plots.write_run_plots(run_dir)
    assert paths == [run_dir / plots.LEARNING_CURVE, run_dir / plots.THROUGHPUT]
    for name in (plots.LEARNING_CURVE, plots.THROUGHPUT):
        data = (run_dir / name).read_bytes()
        assert data[:8] == PNG and len(data) > 5000


def test_plot_command_writes_the_run_pngs(tmp_path, capsys):
    run_dir = short_run(tmp_path, "a")
    assert cli.main(["plot", str(run_dir)]) == 0
    for name in (plots.LEARNING_CURVE, plots.THROUGHPUT):
        data = (run_dir / name).read_bytes()
        assert data[:8] == PNG and len(data) > 5000
    assert str(run_dir / plots.LEARNING_CURVE) in capsys.readouterr().out


def test_plot_compares_several_runs(tmp_path):
    runs = [str(short_run(tmp_path, name)) for name in ("a", "b")]
    out = tmp_path / "figs" / "compare.png"
    assert plots.compare_runs(runs, out) == out
    assert out.read_bytes()[:8] == PNG
    out.unlink()
    assert cli.main(["plot", *runs, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG


def test_plot_of_a_missing_run_is_an_error(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=r"metrics\.jsonl"):
        plots.write_run_plots(tmp_path / "nope")
    assert cli.main(["plot", str(tmp_path / "nope")]) == 2
    assert "metrics.jsonl" in capsys.readouterr().err


def test_notebook_plot_sink_keeps_records_and_draws_on_demand(tmp_path):
    sink = NotebookPlotSink(every_s=0.0)
    assert not sink.live  # not inside a Jupyter kernel here: no display calls
    for record in plots.load_records(short_run(tmp_path, "nb")):
        sink.write(record)
    sink.close()
    out = plots.save(sink.figure(), tmp_path / "live.png")
    assert out.read_bytes()[:8] == PNG


def test_render_pendulum_gif(tmp_path):
    import imageio.v3 as iio

    run_dir = short_run(tmp_path, "pendulum")
    out = tmp_path / "pendulum.gif"
    assert cli.main(["render", str(run_dir), "--out", str(out), "--max-steps", "40"]) == 0
    assert out.read_bytes()[:6] == b"GIF89a"
    frames = iio.imread(out, index=None)
    assert frames.shape == (40, render.HEIGHT, render.WIDTH, 3)
    assert frames[0].std() > 0  # something is drawn


def test_render_cartpole_gif_with_a_discrete_policy(tmp_path):
    run_dir = short_run(tmp_path, "cartpole", env="gymnax/CartPole-v1", algo="ppo")
    path = render.render_run(run_dir, tmp_path / "cartpole.gif", max_steps=60)
    assert path.read_bytes()[:6] == b"GIF89a"


def test_render_rejects_a_wrong_file_type(tmp_path, capsys):
    run_dir = short_run(tmp_path, "pendulum")
    with pytest.raises(ValueError, match="GIF"):
        render.render_run(run_dir, tmp_path / "x.mp4")
    assert cli.main(["render", str(run_dir), "--out", str(tmp_path / "x.mp4")]) == 2
    assert "GIF" in capsys.readouterr().err


@pytest.mark.slow
def test_render_brax_html(tmp_path):
    run_dir = short_run(tmp_path, "brax", env="brax/inverted_pendulum")
    path = render.render_run(run_dir, tmp_path / "brax.html", max_steps=20)
    text = path.read_text()
    assert "<html" in text[:200].lower() and "Brax visualizer" in text


# ------------------------------------------------------------------- gymnasium runs
def test_render_a_trained_gymnasium_cartpole_ppo_run(tmp_path, capsys):
    """`jaxspreeze render` of a tiny PPO run on gymnasium/CartPole-v1 writes the GIF of one
    deterministic episode (reset with seed 0): one frame per step and the last state."""
    import imageio.v3 as iio

    import jaxspreeze
    from jaxspreeze.run.trainer import train

    # test_host_train's tiny PPO run (the compile cache serves its programs), one chunk
    cfg = tiny_ppo(tmp_path, run_name="gym", total_steps=256)
    run_dir = train(cfg, quiet=True).run_dir
    out = tmp_path / "g.gif"
    assert cli.main(["render", str(run_dir), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    frames = iio.imread(out, index=None)
    episode = jaxspreeze.load(run_dir).evaluate(gym.make("CartPole-v1"), episodes=1, seed=0)
    drawn = render.gymnasium_frames(render.load_policy(run_dir))
    assert len(drawn) == episode.length_mean + 1
    # the GIF encoder merges identical consecutive frames (a cart that moved under a pixel)
    distinct = 1 + sum(bool((a != b).any()) for a, b in itertools.pairwise(drawn))
    assert frames.shape[0] == distinct and frames.shape[-1] == 3
    assert frames[0].std() > 0 and (frames[0] != frames[-1]).any()  # the pole moved
    # --max-steps caps the episode
    assert len(render.gymnasium_frames(render.load_policy(run_dir), max_steps=3)) == 4


class Dots(gym.Env):
    """A gymnasium env drawing its own rgb_array frames (a bright column at the position)."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"]}
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.pos += 1
        return np.full(1, self.pos / 10, np.float32), 0.0, False, False, {}

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((8, 12, 4), np.uint8)  # RGBA: the alpha is dropped
        frame[:, self.pos % 12] = 255
        return frame


def test_render_a_gymnasium_env_with_its_own_frames(tmp_path):
    gym.register("JaxspreezeRenderDots-v0", entry_point=Dots, max_episode_steps=5)
    run_dir = short_run(tmp_path, "dots", env="gymnasium/JaxspreezeRenderDots-v0")
    frames = render.gymnasium_frames(render.load_policy(run_dir))
    assert len(frames) == 6  # the reset frame and one per step of the 5-step time limit
    for t, frame in enumerate(frames):
        assert frame.shape == (8, 12, 3) and frame.dtype == np.uint8
        assert (frame[:, t] == 255).all() and frame.sum() == 8 * 3 * 255


def test_render_refuses_a_gymnasium_env_without_frames(tmp_path, capsys, monkeypatch):
    gym.register("JaxspreezeNoFrames-v0", entry_point=Dots, max_episode_steps=5)
    run_dir = short_run(tmp_path, "noframes", env="gymnasium/JaxspreezeNoFrames-v0")
    make = gym.make
    # the env ignores the render mode asked for: its render() gives None
    monkeypatch.setattr(gym, "make", lambda *a, **kw: make(*a, **{**kw, "render_mode": None}))
    assert cli.main(["render", str(run_dir), "--out", str(tmp_path / "x.gif")]) == 2
    line = capsys.readouterr().err
    assert "gymnasium/JaxspreezeNoFrames-v0 draws no frames here" in line
    assert "no rgb_array frame" in line and not (tmp_path / "x.gif").exists()
