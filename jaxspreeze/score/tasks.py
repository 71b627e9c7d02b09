"""The rows of time to score (``jaxspreeze score``): a preset, an env, a return threshold.

Imports no JAX: ``jaxspreeze score --list`` and the parent process of ``jaxspreeze score``
(which only starts the sides' processes) read it. :mod:`jaxspreeze.score.runners` trains
a row's preset; :mod:`jaxspreeze.score.sides` says which sides run which row.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jaxspreeze.score import sides as score_sides

# the presets ship with the package (package data: pyproject's [tool.setuptools.package-data]);
# a source checkout's experiments/presets links to them
PRESETS = Path(str(importlib.resources.files("jaxspreeze") / "presets"))


@dataclass(frozen=True)
class ScoreTask:
    """One row of the table: a preset, its threshold and how often it is evaluated.

    ``env`` may differ from the preset's own (the preset's sizes on another env, e.g.
    ``pqn_cartpole`` on Acrobot); ``cpu`` are preset changes for ``--scale cpu`` (a budget
    a 2-core machine runs in minutes); ``label`` names the row when ``algo-<task>`` would
    be ambiguous (gymnax's and gymnasium's Pendulum-v1); ``versus`` are the rows it is
    meant to beat where no peer runs it (the fast recipes: SAC/TD3's rows of the same env;
    :mod:`jaxspreeze.score.goal`). Every side of a row is evaluated alike:
    :func:`jaxspreeze.score.settings.protocol` (``eval_episodes`` left unset: 128
    episodes on a device env, 16 on a host env).
    """

    algo: str
    env: str
    preset: str  # jaxspreeze/presets/<preset>.toml (PRESETS)
    threshold: float
    eval_every: int
    eval_episodes: int | None = None  # None: jaxspreeze's default (settings.episodes)
    label: str = ""
    cpu: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    versus: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``sac-CartpoleBalance`` (or the label)."""
        return self.label or f"{self.algo}-{self.env.split('/')[-1]}"

    @property
    def family(self) -> str:
        """The env's family: ``gymnax``, ``brax``, ``playground``, ``gymnasium``, ..."""
        return self.env.partition("/")[0]

    @property
    def path(self) -> Path:
        """The preset's TOML file."""
        return PRESETS / f"{self.preset}.toml"


# Thresholds, per env (the same for every algorithm): CartpoleBalance 800 of 1000 (brax's
# untrained policies scored 187 and 210 at step 0); inverted_pendulum 900 (steps balanced,
# max 1000); reacher -80 over 1000 steps (a zero action scores -180 on average, -81 to -253
# over 8 targets; SAC's 20k-step runs end near -70 to -90); CheetahRun 100 of 1000 and brax
# halfcheetah 500 (forward speed minus control cost): modest marks for CPU budgets.
# Pendulum-v1 -200 (a random policy scores about -1200; a swung-up pendulum -150 or so);
# CartPole-v1 450 of 500; Acrobot-v1 -100 (-500: never swung up); HalfCheetah-v5 1000
# (a modest mark for 30k env steps).
THRESHOLDS = {
    "playground/CartpoleBalance": 800.0,
    "playground/CheetahRun": 100.0,
    "brax/inverted_pendulum": 900.0,
    "brax/reacher": -80.0,
    "brax/halfcheetah": 500.0,
    "gymnax/Pendulum-v1": -200.0,
    "gymnax/CartPole-v1": 450.0,
    "gymnax/Acrobot-v1": -100.0,
    "gymnasium/Pendulum-v1": -200.0,
    "gymnasium/HalfCheetah-v5": 1000.0,
}


def _task(algo: str, env: str, preset: str, eval_every: int, **kw: Any) -> ScoreTask:
    return ScoreTask(algo, env, preset, THRESHOLDS[env], eval_every, **kw)


# The value-based rows (issue 41: PQN and DQN beside rejax's) and PPO on MinAtar beside
# PQN. Their thresholds, per env: CartPole-v1 475 (gymnasium's reward_threshold for
# CartPole-v1, the mark rejax's and purejaxql's CartPole reports are read against; the PPO
# rows keep their 450), Acrobot-v1 -100 (gymnasium's reward_threshold, as the PPO row).
# MinAtar at a CPU budget of 200k env steps (2% of purejaxql's 10M, whose curves are
# published as figures only, with no number to read at this budget), set before any run
# of these rows: Breakout-MinAtar 5 (a uniformly random policy scores 0.33 +- 0.04 over
# 256 episodes; PQN's defaults 6.9 at 200k on seed 0, pqn_cpu.md; PPO's CNN 9.1 and its
# flattened MLP 6.5 at 100k, minatar_cpu.md: a flattened MLP, as rejax's, can reach it),
# SpaceInvaders-MinAtar 15 (random: 4.0 +- 0.2; about 4x that, not yet measured beyond).
Q_THRESHOLDS = {
    "gymnax/CartPole-v1": 475.0,
    "gymnax/Acrobot-v1": -100.0,
    "gymnax/Breakout-MinAtar": 5.0,
    "gymnax/SpaceInvaders-MinAtar": 15.0,
}
_Q_EVAL_EVERY = 8_192  # CartPole and Acrobot: as the PPO rows (a multiple of every rollout)
_MINATAR_EVAL_EVERY = 20_480  # a chunk of PPO's presets (20 x 1,024) and PQN's (5 x 4,096)


def _q_task(algo: str, env: str, preset: str, eval_every: int, **kw: Any) -> ScoreTask:
    return ScoreTask(algo, env, preset, Q_THRESHOLDS[env], eval_every, **kw)


def _minatar(game: str, tail: str) -> tuple[ScoreTask, ...]:
    """PQN's and PPO's rows of a MinAtar game (the presets ``pqn_<tail>`` and
    ``ppo_<tail>``; both flatten the grid into their MLP); PQN's row names PPO's as the
    row to beat."""
    env = f"gymnax/{game}-MinAtar"
    return (
        _q_task("pqn", env, f"pqn_{tail}", _MINATAR_EVAL_EVERY,
                versus=(f"ppo-{game}-MinAtar",)),
        _q_task("ppo", env, f"ppo_{tail}", _MINATAR_EVAL_EVERY),
    )  # fmt: skip


# brax and Playground (jaxspreeze beside brax): a SAC and a PPO row per env, the presets
# named <algo>_<name>; PPO evaluated every 16,384 env steps
_BRAX_ENVS = {  # env: (name, SAC's eval_every, eval_episodes)
    "playground/CartpoleBalance": ("cartpole_balance", 2_000, 8),
    "playground/CheetahRun": ("cheetah_run", 4_000, 4),
    "brax/inverted_pendulum": ("inverted_pendulum", 2_000, 8),
    "brax/reacher": ("reacher", 2_000, 8),
    "brax/halfcheetah": ("brax_halfcheetah", 2_000, 4),
}
_PPO_EVAL_EVERY = 16_384
_FAST_ENVS = {  # env: (preset name, eval_every, eval_episodes), as SAC's row of the env
    # (None: jaxspreeze's default, as SAC's gymnax row)
    "gymnax/Pendulum-v1": ("pendulum", 1_000, None),
    "brax/inverted_pendulum": ("inverted_pendulum", 2_000, 8),
    "brax/reacher": ("reacher", 2_000, 8),
    "brax/halfcheetah": ("brax_halfcheetah", 2_000, 4),
    "playground/CheetahRun": ("cheetah_run", 4_000, 4),
    "gymnasium/HalfCheetah-v5": ("halfcheetah", 5_000, 5),
}


def _beside(env: str) -> tuple[str, ...]:
    """SAC's and TD3's rows of ``env`` (those the table has), the fast recipes' ``versus``."""
    tail = env.split("/")[-1]
    if env.partition("/")[0] in ("gymnax", "gymnasium"):
        return (f"sac-{tail}", f"td3-{tail}")
    return (f"sac-{tail}",)  # brax and Playground rows: SAC (and PPO) only


ROWS: dict[str, ScoreTask] = {
    t.name: t
    for t in (
        *(
            _task(algo, env, f"{algo}_{name}", every, eval_episodes=episodes)
            for env, (name, sac_every, episodes) in _BRAX_ENVS.items()
            for algo, every in (("sac", sac_every), ("ppo", _PPO_EVAL_EVERY))
        ),
        # gymnax (jaxspreeze beside rejax)
        _task("sac", "gymnax/Pendulum-v1", "sac_pendulum", 1_000),
        _task("td3", "gymnax/Pendulum-v1", "td3_pendulum", 1_000),
        _task("ppo", "gymnax/CartPole-v1", "ppo_cartpole", 8_192),
        _task("ppo", "gymnax/Acrobot-v1", "ppo_acrobot", 8_192),
        # value-based (jaxspreeze beside rejax's PQN and DQN): PQN's classic-control
        # preset (64 x 64) on CartPole and Acrobot, DQN's presets; MinAtar: PQN beside
        # rejax and beside jaxspreeze's PPO (both presets flatten the grid, as rejax does)
        _q_task("pqn", "gymnax/CartPole-v1", "pqn_cartpole", _Q_EVAL_EVERY),
        _q_task("pqn", "gymnax/Acrobot-v1", "pqn_cartpole", _Q_EVAL_EVERY),
        _q_task("dqn", "gymnax/CartPole-v1", "dqn_cartpole", _Q_EVAL_EVERY),
        _q_task("dqn", "gymnax/Acrobot-v1", "dqn_acrobot", _Q_EVAL_EVERY),
        *_minatar("Breakout", "breakout_minatar"),
        *_minatar("SpaceInvaders", "space_invaders_minatar"),
        # gymnasium host envs (jaxspreeze beside SBX)
        _task(
            "sac", "gymnasium/Pendulum-v1", "sac_pendulum", 1_000, label="sac-gymnasium-Pendulum-v1"
        ),
        _task(
            "td3", "gymnasium/Pendulum-v1", "td3_pendulum", 1_000, label="td3-gymnasium-Pendulum-v1"
        ),
        _task("sac", "gymnasium/HalfCheetah-v5", "sac_halfcheetah", 5_000, eval_episodes=5),
        _task("td3", "gymnasium/HalfCheetah-v5", "td3_halfcheetah", 5_000, eval_episodes=5),
        # the fast recipes (FastTD3, FastSAC; no peer runs them): beside SAC/TD3's rows of
        # the same env, evaluated as often, presets fast<algo>_<name>
        *(
            _task(algo, env, f"{algo}_{name}", every, eval_episodes=episodes, versus=_beside(env))
            for env, (name, every, episodes) in _FAST_ENVS.items()
            for algo in ("fasttd3", "fastsac")
        ),
    )
}

# the rows experiments/time_to_score.py runs (brax and Playground: jaxspreeze beside brax):
# those the brax side has a trainer for
_BRAX_SIDE = next(s for s in score_sides.BUILTIN if s.name == "brax")
BRAX_ROWS = tuple(n for n, t in ROWS.items() if _BRAX_SIDE.runs(t.family, t.algo))


def select(patterns: list[str] | tuple[str, ...]) -> list[ScoreTask]:
    """The rows whose name contains any of ``patterns`` (all of them when none); a pattern
    that is a row's whole name selects that row only (``sac-Pendulum-v1``, not also
    ``fastsac-Pendulum-v1``)."""

    def chosen(name: str, pattern: str) -> bool:
        return name == pattern if pattern in ROWS else pattern in name

    return [t for n, t in ROWS.items() if not patterns or any(chosen(n, p) for p in patterns)]
