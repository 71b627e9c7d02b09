"""Rendering the JAX suites: each family's adapter draws states with the suite's own renderer
(Craftax's pixel renderer, Jumanji's viewers in ``rgb_array`` mode, XLand-MiniGrid's
``env.render``, Navix's ``observations.rgb``), and ``jaxspreeze render RUN`` writes a GIF.

The suites' drawings are called directly on reset states (cheap: one reset compiled);
the whole path, a run's episode to a GIF, on XLand-MiniGrid (slow). A suite that is not installed
is skipped, like the suites' own tests.
"""

from __future__ import annotations

import imageio.v3 as iio
import jax
import numpy as np
import pytest

from jaxspreeze import cli
from jaxspreeze.agent import render
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.core import envids
from jaxspreeze.envs import FAMILIES, make_env
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import rundir


def needs(family: str):
    """Skip unless the suite is installed."""
    module = FAMILIES[family]
    return pytest.mark.skipif(
        not module.installed(), reason=f"{family} is not installed: {module.INSTALL}"
    )


def test_every_device_family_has_a_renderer():
    """The family table names a renderer for each device family, and an ``adapter`` one
    is drawn by a ``frames`` of the family's adapter."""
    for name, family in envids.FAMILIES.items():
        assert family.renderer in render.RENDERERS, name
        if family.renderer == "adapter":
            assert callable(FAMILIES[name].frames), name


def reset_frames(env: str, n: int = 3, seed: int = 0) -> np.ndarray:
    """The family adapter's frames of ``n`` reset states of ``env`` (different starts)."""
    vec = make_env(env, n)
    _, state = vec.reset(jax.random.key(seed))
    return FAMILIES[env.partition("/")[0]].frames(vec.render_state, state.inner.state)


def assert_drawn(frames: np.ndarray, n: int) -> None:
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[0] == n
    assert frames.shape[-1] == 3 and min(frames.shape[1:3]) >= 32
    assert all(f.std() > 0 for f in frames)  # something is drawn on each


@needs("xminigrid")
def test_xminigrid_draws_its_grid():
    frames = reset_frames("xminigrid/MiniGrid-EmptyRandom-5x5")
    assert_drawn(frames, 3)
    assert (frames[0] != frames[1]).any() or (frames[1] != frames[2]).any()  # random starts


@needs("jumanji")
@pytest.mark.parametrize(
    "env", ["jumanji/Game2048-v1", pytest.param("jumanji/Snake-v1", marks=pytest.mark.slow)]
)
def test_jumanji_draws_with_its_viewer(env):
    """A frame per state (the viewer draws every figure into one buffer: each is copied),
    on a figure of FIGURE_INCHES, and the env's own viewer left as it was."""
    frames = reset_frames(env)
    assert_drawn(frames, 3)
    side = round(FAMILIES["jumanji"].FIGURE_INCHES * 100)
    assert frames.shape[1:3] == (side, side)
    assert (frames[0] != frames[1]).any() or (frames[1] != frames[2]).any()
    viewer = make_env(env, 1).render_state._viewer  # the same env (the registry keeps it)
    assert viewer.figure_size == (10.0, 10.0) and viewer._display == viewer._display_human


@needs("jumanji")
def test_a_jumanji_env_without_an_rgb_viewer_is_one_line():
    class NoViewer:
        _viewer = object()

    with pytest.raises(ValueError, match="has no rgb_array mode") as e:
        FAMILIES["jumanji"].frames(NoViewer(), {"x": np.zeros((2, 1))})
    assert "\n" not in str(e.value)


@needs("navix")
def test_navix_draws_its_grid():
    frames = reset_frames("navix/Navix-Empty-Random-5x5-v0", n=2)
    assert_drawn(frames, 2)
    assert (frames[0] != frames[1]).any()


@needs("craftax")
@pytest.mark.slow  # Craftax's reset compiles for about a minute on 2 busy cores
def test_craftax_draws_the_agents_view():
    frames = reset_frames("craftax/Craftax-Classic-Symbolic-v1", n=2)
    assert_drawn(frames, 2)
    assert (frames[0] != frames[1]).any()  # two worlds


def test_small_frames_are_scaled_up_and_large_ones_down():
    small = np.arange(40 * 30 * 3, dtype=np.uint8).reshape(40, 30, 3)
    up = render.fitted(small)
    assert up.shape == (160, 120, 3) and (up[::4, ::4] == small).all()
    large = np.zeros((960, 640, 3), np.uint8)
    assert render.fitted(large).shape == (480, 320, 3)
    middle = np.zeros((200, 300, 3), np.uint8)
    assert render.fitted(middle) is middle


@pytest.mark.slow  # the policy's init and act and the episode compile (15 s to minutes)
@pytest.mark.parametrize(
    "env",
    [
        pytest.param("xminigrid/MiniGrid-Empty-5x5", marks=needs("xminigrid")),
        pytest.param("jumanji/Game2048-v1", marks=needs("jumanji")),
        pytest.param("navix/Navix-Empty-5x5-v0", marks=needs("navix")),
        pytest.param("craftax/Craftax-Classic-Symbolic-v1", marks=needs("craftax")),
    ],
)
def test_render_a_suites_run_to_a_gif(env, tmp_path, capsys):
    """``jaxspreeze render RUN``: one deterministic episode of the run's policy, a frame
    per step until the episode ends (here at most the step cap)."""
    cfg = RunConfig().replace(
        algo="ppo", env=env, logdir=str(tmp_path), run_name="run", ppo={"hidden": (8,)}
    )
    run_dir = rundir.create(cfg).path
    init = RunPlan.saved(cfg).make_algorithm().init
    save_policy(run_dir, jax.vmap(init)(jax.random.split(jax.random.key(0), 1)).actor)
    assert cli.main(["render", str(run_dir), "--max-steps", "5"]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "render.gif")
    frames = iio.imread(run_dir / "render.gif", index=None)
    assert 1 <= frames.shape[0] <= 5 and frames.shape[-1] == 3
    assert 160 <= max(frames.shape[1:3]) <= 480 and frames[0].std() > 0
