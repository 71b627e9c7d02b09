"""Rendering every env family to a GIF: brax and MuJoCo Playground through MuJoCo's own
renderer (an offline OpenGL backend: EGL or OSMesa), envpool pools' own frames, a user's
gymnasium env; and the refusals (no backend, brax's HTML viewer needing the internet)."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import imageio.v3 as iio
import jax
import numpy as np
import pytest

from jaxspreeze import cli
from jaxspreeze.agent import render
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.host import hostenvs
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import rundir


def _backend() -> str | None:
    try:
        return render.mujoco_gl()
    except ValueError:
        return None


BACKEND = _backend()
needs_gl = pytest.mark.skipif(
    BACKEND is None, reason="no offline OpenGL backend (EGL or OSMesa) for MuJoCo here"
)
needs_envpool = pytest.mark.skipif(
    importlib.util.find_spec("envpool") is None, reason="envpool is not installed"
)
needs_playground = pytest.mark.skipif(
    importlib.util.find_spec("mujoco_playground") is None, reason="Playground is not installed"
)


def fresh_run(tmp_path, env: str, name: str = "run"):
    """A run directory holding an untrained (fresh) policy of one seed on ``env``."""
    cfg = RunConfig().replace(
        algo="sac", env=env, logdir=str(tmp_path), run_name=name, sac={"hidden": (16, 16)}
    )
    run_dir = rundir.create(cfg).path
    init = RunPlan.saved(cfg).make_algorithm().init
    save_policy(run_dir, jax.vmap(init)(jax.random.split(jax.random.key(0), 1)).actor)
    return run_dir


def read_gif(path) -> np.ndarray:
    assert path.read_bytes()[:6] == b"GIF89a"
    return iio.imread(path, index=None)


def assert_moving(frames: np.ndarray, count: int) -> None:
    assert frames.shape[0] == count and frames.shape[-1] == 3
    assert frames[0].std() > 0  # something is drawn
    assert (frames[0] != frames[-1]).any()  # and it moved


# --- the OpenGL backend --------------------------------------------------------------------


@needs_gl
def test_the_backend_found_is_named():
    assert BACKEND in render.MUJOCO_GL_BACKENDS


def test_no_working_backend_is_one_line_naming_it(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "nosuchgl")
    render.mujoco_gl.cache_clear()
    try:
        with pytest.raises(ValueError) as e:
            render.mujoco_gl()
    finally:
        render.mujoco_gl.cache_clear()
    message = str(e.value)
    assert "MUJOCO_GL=nosuchgl" in message and "EGL" in message and "\n" not in message


def saved_config_only(tmp_path, env: str):
    """A run directory holding only its config.json (nothing of the env is built)."""
    cfg = RunConfig().replace(algo="sac", env=env, logdir=str(tmp_path), run_name="cfg")
    return rundir.create(cfg).path


def no_backend():
    raise ValueError("no offline OpenGL backend for MuJoCo's renderer: MUJOCO_GL=egl (x)")


@pytest.mark.parametrize("env", ["brax/inverted_pendulum", "playground/CartpoleBalance"])
def test_a_mujoco_gif_without_a_backend_is_refused_before_the_policy_loads(
    tmp_path, monkeypatch, capsys, env
):
    monkeypatch.setattr(render, "mujoco_gl", no_backend)
    run_dir = saved_config_only(tmp_path, env)  # no policy: the refusal comes first
    with pytest.raises(ValueError, match="MUJOCO_GL=egl"):
        render.render_run(run_dir, tmp_path / "x.gif")
    assert cli.main(["render", str(run_dir)]) == 2
    err = capsys.readouterr().err
    if env.startswith("brax"):  # the default is the HTML viewer: it needs the policy
        assert "no saved policy" in err
    else:
        assert err.count("\n") == 1 and "MUJOCO_GL=egl" in err


# --- brax and Playground: MuJoCo's renderer ------------------------------------------------


@needs_gl
@pytest.mark.slow  # brax's env and episode compile: about a minute on 2 busy cores
def test_render_brax_to_a_gif_by_default(tmp_path, capsys, monkeypatch):
    run_dir = fresh_run(tmp_path, "brax/inverted_pendulum")
    assert cli.main(["render", str(run_dir), "--max-steps", "12"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run_dir / "render.gif")
    assert f"MUJOCO_GL={BACKEND}" in out.err
    frames = read_gif(run_dir / "render.gif")
    assert_moving(frames, 12)
    assert frames.shape[1:3] == (render.HEIGHT, render.WIDTH)
    # the HTML viewer: asked for, or the default where no backend works, with the note
    notes: list[str] = []
    path = render.render_run(run_dir, tmp_path / "v.html", max_steps=3, say=notes.append)
    assert "Brax visualizer" in path.read_text() and notes == [render.BRAX_HTML_NOTE]
    monkeypatch.setattr(render, "mujoco_gl", no_backend)
    assert render.render_run(run_dir, max_steps=3).name == "render.html"


@needs_gl
@needs_playground
@pytest.mark.slow  # the MJX episode compiles: about 1-2 minutes on 2 busy cores
def test_render_playground_to_a_gif(tmp_path):
    run_dir = fresh_run(tmp_path, "playground/CartpoleBalance")
    notes: list[str] = []
    path = render.render_run(run_dir, tmp_path / "p.gif", max_steps=10, say=notes.append)
    assert_moving(read_gif(path), 10)
    assert notes == [f"drawn by MuJoCo's renderer through {BACKEND.upper()} (MUJOCO_GL={BACKEND})"]


# --- envpool: the pool's own frames --------------------------------------------------------


@needs_envpool
@pytest.mark.slow  # envpool's pool and the policy compile (about 15 s)
def test_render_an_envpool_run(tmp_path):
    run_dir = fresh_run(tmp_path, "envpool/Pendulum-v1")
    frames = read_gif(render.render_run(run_dir, tmp_path / "e.gif", max_steps=8))
    assert_moving(frames, 9)  # the reset's frame and one per step


@needs_envpool
@needs_gl
@pytest.mark.slow
def test_render_an_envpool_mujoco_task_in_an_offline_context(tmp_path):
    run_dir = fresh_run(tmp_path, "envpool/HalfCheetah-v5")
    frames = read_gif(render.render_run(run_dir, tmp_path / "h.gif", max_steps=4))
    assert_moving(frames, 5)


# --- a user's env ----------------------------------------------------------------------------


@pytest.mark.slow  # about 30 s here (the policy's init and act compile)
def test_render_a_user_env_needs_it_passed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(hostenvs, "_USER_ENVS", {})
    name = hostenvs.register_user_env(lambda: gym.make("Pendulum-v1")).name
    run_dir = fresh_run(tmp_path, name)
    hostenvs.save_user_env(run_dir, name)
    hostenvs._USER_ENVS.clear()  # a later process
    assert cli.main(["render", str(run_dir)]) == 2  # one line: pass the env from Python
    path = render.render_run(run_dir, env=lambda: gym.make("Pendulum-v1"), max_steps=5)
    assert_moving(read_gif(path), 6)


@needs_gl
@pytest.mark.slow  # the policy's init and act compile, MuJoCo's model loads
def test_render_a_gymnasium_mujoco_task_through_the_offline_backend(tmp_path):
    pytest.importorskip("mujoco")
    run_dir = fresh_run(tmp_path, "gymnasium/HalfCheetah-v5")
    frames = read_gif(render.render_run(run_dir, tmp_path / "g.gif", max_steps=4))
    assert_moving(frames, 5)
