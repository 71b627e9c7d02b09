"""The jumanji/ family: its ids, the adapter against Jumanji's own step on the same keys
(observations flattened with the mask last, rewards, terminations, truncations, final
observations), a misspelled id answered with the nearest one, a missing extra named."""

from __future__ import annotations

import dataclasses
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.cli import fastcheck
from jaxspreeze.core import envids
from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.envs import VecEnv, check_env_name, env_ids, env_spec, jaxenv
from jaxspreeze.envs import jumanji as family

HAVE_JUMANJI = importlib.util.find_spec("jumanji") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_JUMANJI, reason='Jumanji not installed: pip install "jaxspreeze[jumanji]"'
)


def minesweeper_flat(obs) -> np.ndarray:
    """Minesweeper's observation flattened by hand: board, mines, steps, then the mask."""
    parts = [obs.board, obs.num_mines, obs.step_count, obs.action_mask]
    return np.concatenate([np.ravel(np.asarray(x, np.float32)) for x in parts])


def game2048_flat(obs) -> np.ndarray:
    """Game2048's: the board, then the mask."""
    return np.concatenate([np.ravel(np.asarray(x, np.float32)) for x in obs])


CASES = {
    # terminations (a mine, or every safe cell open), a multi-discrete action (row,
    # column) taken as one of 100 with its 10 x 10 mask
    "Minesweeper-v0": (minesweeper_flat, lambda a: jnp.array([a // 10, a % 10], jnp.int32), 40),
    # truncations: Game2048 has no time limit of its own, so the adapter's applies (here
    # 6 steps, set on the object): the episode is cut with its final observation kept
    "Game2048-v1": (game2048_flat, lambda a: jnp.int32(a), 20),
}


@pytest.mark.parametrize("task", list(CASES))
def test_the_adapter_steps_as_jumanjis_own_step_on_the_same_keys(task):
    """One env through the adapter's VecEnv beside a loop over Jumanji's own reset and
    step on the same keys, resetting as :func:`~jaxspreeze.envs.base.auto_reset` does with
    one env (its next start drawn with each step's key, taken where an episode ends);
    random legal actions drawn from the loop's own mask. The observations are flattened
    here by hand. (Jumanji's own time limits end with discount 0: terminations, as its
    step says.)"""
    import jumanji

    flat, to_env, steps = CASES[task]
    own = jumanji.make(task)
    if task == "Game2048-v1":
        own.time_limit = 6
    own_reset, own_step = jax.jit(own.reset), jax.jit(own.step)
    parts = jaxenv.jumanji_parts(own, f"jumanji/{task}")
    registered = env_spec(f"jumanji/{task}")
    assert parts.spec == dataclasses.replace(
        registered, max_episode_steps=parts.spec.max_episode_steps
    )
    vec = VecEnv.from_parts(parts, 1)
    vec_reset, vec_step = jax.jit(vec.reset), jax.jit(vec.step)
    limit = getattr(own, "time_limit", None) or parts.spec.max_episode_steps

    key = jax.random.key(3)
    k_now, k_next = jax.random.split(jax.random.split(key, 1)[0])
    state, ts = own_reset(k_now)
    start, start_ts = own_reset(k_next)
    obs, vstate = vec_reset(key)
    ends, length = {"terminated": 0, "truncated": 0}, 0
    rng = np.random.default_rng(0)
    for t in range(steps):
        np.testing.assert_array_equal(np.asarray(obs)[0], flat(ts.observation))
        legal = np.flatnonzero(np.ravel(np.asarray(ts.observation.action_mask)))
        action = int(rng.choice(legal))
        k_step = jax.random.key(100 + t)
        obs, vstate, reward, terminated, truncated, final = vec_step(
            k_step, vstate, jnp.array([action], jnp.int32)
        )
        state, ts = own_step(state, to_env(action))
        length += 1
        own_term = bool(ts.last()) and float(ts.discount) == 0.0
        own_trunc = not own_term and (bool(ts.last()) or length == limit)
        np.testing.assert_array_equal(np.asarray(final)[0], flat(ts.observation))
        assert float(reward[0]) == pytest.approx(float(ts.reward))
        assert (bool(terminated[0]), bool(truncated[0])) == (own_term, own_trunc), t
        if own_term or own_trunc:
            ends["terminated" if own_term else "truncated"] += 1
            state, ts, length = start, start_ts, 0
        start, start_ts = own_reset(jax.random.split(k_step, 1)[0])
    assert ends["terminated" if task == "Minesweeper-v0" else "truncated"] >= 2, ends


def test_the_ids_are_listed_and_refused_ones_say_why():
    ids = env_ids("jumanji")
    assert "jumanji/Snake-v1" in ids and "jumanji/Minesweeper-v0" in ids
    assert "jumanji/Cleaner-v0" not in ids and "jumanji/Sokoban-v0" not in ids
    assert family.names() == envids.FAMILIES["jumanji"].ids
    with pytest.raises(UnknownEnvError, match="multi-agent"):
        check_env_name("jumanji/Cleaner-v0")
    with pytest.raises(UnknownEnvError, match="downloads its levels"):
        check_env_name("jumanji/Sokoban-v0")


def test_a_misspelled_id_is_answered_with_the_nearest_one():
    # before JAX starts (the CLI's early check reads the family table)...
    assert "did you mean jumanji/Snake-v1" in fastcheck.check_env("jumanji/Snak-v1")
    assert "did you mean jumanji/Game2048-v1" in fastcheck.check_env("jumanji/game2048-v1")
    # ... and in the full check
    with pytest.raises(UnknownEnvError, match="did you mean jumanji/Minesweeper-v0"):
        check_env_name("jumanji/Minesweper-v0")


def test_a_missing_extra_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setattr(family, "installed", lambda: False)
    for call in (lambda: check_env_name("jumanji/Snake-v1"), lambda: env_ids("jumanji")):
        with pytest.raises(UnknownEnvError) as e:
            call()
        assert 'pip install "jaxspreeze[jumanji]"' in str(e.value) and "\n" not in str(e.value)


def test_specs_of_the_family():
    """A discrete env with a mask, a multi-discrete one with its joint mask, and one
    without a mask (the Rubik's cube: 6 faces x 1 depth x 3 turns)."""
    snake = env_spec("jumanji/Snake-v1")
    assert snake.discrete and snake.action_dim == 4 and snake.action_mask
    assert snake.obs_shape == (12 * 12 * 5 + 1 + 4,) and snake.actor_obs == (0, 12 * 12 * 5 + 1)
    mines = env_spec("jumanji/Minesweeper-v0")
    assert mines.action_dim == 100 and mines.action_mask and mines.obs_shape == (202,)
    cube = env_spec("jumanji/RubiksCube-v0")
    assert cube.action_dim == 18 and not cube.action_mask and cube.actor_obs is None


@pytest.mark.slow
def test_ppo_trains_on_a_jumanji_env_from_the_command_line(tmp_path):
    from jaxspreeze.cli import main

    argv = ["train", "--algo", "ppo", "--env", "jumanji/Game2048-v1", "--total-steps", "2048",
            "--num-envs", "8", "--rollout-steps", "16", "--batch-size", "64",
            "--eval-episodes", "4", "--logdir", str(tmp_path), "--sinks", "jsonl"]  # fmt: skip
    assert main(argv) in (0, None)
