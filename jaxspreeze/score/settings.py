"""The peers' own settings per row of time to score: one table, each entry with its source.

A peer side runs, by default (``jaxspreeze score --peer-settings own``), the settings its
authors publish or ship for the row's task: rejax's shipped configs for gymnax tasks
(``configs/gymnax/*.yaml``), brax's published PPO hyperparameters for brax envs (its
training notebook) and MuJoCo Playground's for its dm_control tasks
(``mujoco_playground/config/dm_control_suite_params.py``), and rl-zoo3's hyperparameters
for SBX on gymnasium tasks (``hyperparams/*.yml``). Where a peer publishes none for a
task, the entry is its trainer's documented defaults, and says so (``defaults``).

Each entry keeps the peer's own option names and values as published; :func:`own` scales
them to the row's env-step budget only (the entry's ``budget`` option), nothing else.
The evaluation's cadence and episodes are not settings but the row's protocol (every side
of a row is evaluated alike: :func:`protocol`), and each peer's runner sets them.
``--peer-settings matched`` gives the peer the row's jaxspreeze preset instead
(:mod:`jaxspreeze.score.peers`, :mod:`jaxspreeze.score.runners`).

Imports no JAX.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jaxspreeze.setup.config import default_eval_episodes

KINDS = ("own", "matched")  # a peer's settings (--peer-settings; "both" runs each)
PRESET = "preset"  # jaxspreeze's side: always its row's preset

_REJAX = "https://github.com/keraJLi/rejax/blob/4954fbf6a765ca5fe17b3037fc20a6f217291271/"
_BRAX_NB = (
    "brax's training notebook (https://github.com/google/brax/blob/"
    "0b96d056328d15ea7ebfd3ce07f42be72ec76e40/notebooks/training.ipynb, train_fn['{env}'])"
)
_BRAX_DEFAULTS = (
    "brax.training.agents.{algo}.train's documented defaults (brax 0.14.2's signature): "
    "brax publishes no {ALGO} settings for {env}"
)
_PLAYGROUND = (
    "MuJoCo Playground's mujoco_playground/config/dm_control_suite_params.py "
    "brax_{algo}_config('{env}') (playground 0.2.0)"
)
_ZOO = (
    "rl-zoo3's hyperparams/{algo}.yml, {entry} (https://github.com/DLR-RM/rl-baselines3-zoo/"
    "blob/22e3ff2450fd92033f7f032915e1f64894a09584/hyperparams/{algo}.yml)"
)


@dataclass(frozen=True)
class Published:
    """One peer's own settings for one task, in the peer's own option names."""

    peer: str  # a side's name: "rejax", "brax", "sbx"
    algo: str  # jaxspreeze's algorithm name of the row
    env: str  # the row's env ("gymnax/Pendulum-v1")
    options: Mapping[str, Any] = field(hash=False, compare=False)
    source: str = ""  # where the options are published (file, entry, version)
    budget: str = ""  # the option that holds the env-step budget (scaled to the row's)
    defaults: bool = False  # no entry for the task: the trainer's documented defaults
    note: str = ""  # what the runner changes or leaves out, and why


# what a rejax entry's note adds for one algorithm
_REJAX_NOTES = {
    "sac": "; target_entropy_ratio null leaves rejax's own (unused for continuous actions: "
    "the target entropy is -action_dim)",
    "pqn": "; rejax's PQN fixes its network: hidden (64, 64), LayerNorm then ReLU, Adam",
    "dqn": "; rejax's DQN fixes its hidden sizes at (64, 64); one-step targets (no n-step)",
}


def _rejax(algo: str, env: str, config: str, note: str = "", **options: Any) -> Published:
    return Published(
        "rejax",
        algo,
        f"gymnax/{env}",
        options,
        f"rejax's shipped config {_REJAX}configs/gymnax/{config}.yaml, `{algo}:`",
        "total_timesteps",
        note="`env:` names the task, eval_freq is the row's (its protocol)"
        + _REJAX_NOTES.get(algo, "")
        + (f"; {note}" if note else ""),
    )


def _rejax_dqn(**options: Any) -> dict[str, Any]:
    """rejax's shipped DQN entry for CartPole and Acrobot: what they share, and ``options``."""
    return dict(
        agent="DuelingQNetwork",
        agent_kwargs={"activation": "swish"},
        num_envs=10,
        **options,
        batch_size=100,
        max_grad_norm=10,
        learning_rate=0.001,
        num_epochs=5,
        total_timesteps=100_000,
        eval_freq=2_500,
        eps_start=1,
        eps_end=0.05,
        exploration_fraction=0.5,
        gamma=0.99,
        ddqn=True,
        normalize_observations=False,
    )


# rejax 0.1.3's documented defaults (its classes' fields) where it ships no config
_REJAX_DEFAULTS = {
    "pqn": "num_envs 64, num_steps 64, num_minibatches 16, num_epochs 1, learning_rate "
    "3e-4 (constant, Adam), max_grad_norm inf, gamma 0.99, td_lambda 0.9, epsilon 1.0 -> "
    "0.05 over exploration_fraction 0.1 of the run, hidden (64, 64) with LayerNorm",
    "ppo": "num_envs 64, num_steps 64, num_minibatches 16, num_epochs 8, learning_rate "
    "3e-4, max_grad_norm inf, gamma 0.99, gae_lambda 0.95, clip_eps 0.2, ent_coef 0.01, "
    "vf_coef 0.5, hidden (64, 64), swish",
}


def _rejax_defaults(algo: str, env: str) -> Published:
    """rejax's defaults for a task it ships no config for (the MinAtar rows)."""
    return Published(
        "rejax",
        algo,
        f"gymnax/{env}",
        {},
        f"rejax.{algo.upper()}'s documented defaults (rejax 0.1.3's class fields): rejax "
        f"publishes no {algo.upper()} settings for {env} (its configs/gymnax/ has none)",
        "total_timesteps",
        defaults=True,
        note=f"rejax's defaults: {_REJAX_DEFAULTS[algo]}; its MLP flattens the "
        "observation (a MinAtar grid: 10x10xC inputs, no convolution)",
    )


def _brax_ppo_notebook(env: str, **options: Any) -> Published:
    return Published(
        "brax",
        "ppo",
        f"brax/{env}",
        options,
        _BRAX_NB.format(env=env),
        "num_timesteps",
        note="num_evals and seed are the row's (its protocol and seed); max_devices_per_host "
        "left out (one device)",
    )


def _brax_sac_defaults(env: str) -> Published:
    return Published(
        "brax",
        "sac",
        f"brax/{env}",
        {},
        _BRAX_DEFAULTS.format(algo="sac", ALGO="SAC", env=env),
        "num_timesteps",
        defaults=True,
        note="brax's defaults: 1 env, learning rate 1e-4, discounting 0.9, batch 256, one "
        "gradient step per env step, no warm-up, networks 256x256; the notebook's only SAC "
        "entries are hopper's and walker2d's",
    )


# MuJoCo Playground's dm_control suite settings (the same for CartpoleBalance and
# CheetahRun but for num_timesteps, which the row's budget replaces)
_PLAYGROUND_SAC = dict(
    num_timesteps=5_000_000,
    reward_scaling=1.0,
    episode_length=1000,
    normalize_observations=True,
    action_repeat=1,
    discounting=0.99,
    learning_rate=1e-3,
    num_envs=128,
    batch_size=512,
    grad_updates_per_step=8,
    max_replay_size=1048576 * 4,
    min_replay_size=8192,
    network_factory=dict(q_network_layer_norm=True),
    num_resets_per_eval=10,
)
_PLAYGROUND_PPO = dict(
    num_timesteps=60_000_000,
    reward_scaling=10.0,
    episode_length=1000,
    normalize_observations=True,
    action_repeat=1,
    unroll_length=30,
    num_minibatches=32,
    num_updates_per_batch=16,
    discounting=0.995,
    learning_rate=1e-3,
    entropy_cost=1e-2,
    num_envs=2048,
    batch_size=1024,
    num_resets_per_eval=10,
)


def _playground(algo: str, env: str) -> Published:
    options = {"sac": _PLAYGROUND_SAC, "ppo": _PLAYGROUND_PPO}[algo]
    return Published(
        "brax",
        algo,
        f"playground/{env}",
        options,
        _PLAYGROUND.format(algo=algo, env=env),
        "num_timesteps",
        note="num_evals is the row's (its protocol); an option brax's train() does not take "
        "(SAC's num_resets_per_eval) is left out",
    )


def _zoo(algo: str, env: str, entry: str, **options: Any) -> Published:
    return Published(
        "sbx",
        algo,
        f"gymnasium/{env}",
        options,
        _ZOO.format(algo=algo, entry=entry),
        "n_timesteps",
        note="rl-zoo3's entry for SB3; SBX takes the same names (policy_kwargs as the entry's "
        "dict; noise_type normal with noise_std: a NormalActionNoise); unnamed options: "
        "SBX's defaults"
        + (f"; the entry is {entry}'s (rl-zoo3 has none for {env})" if entry != env else ""),
    )


TABLE: tuple[Published, ...] = (
    # rejax (gymnax rows)
    _rejax(
        "sac",
        "Pendulum-v1",
        "pendulum",
        agent_kwargs={"activation": "swish"},
        num_envs=1,
        buffer_size=10_000,
        fill_buffer=256,
        batch_size=256,
        learning_rate=0.01,
        num_epochs=1,
        total_timesteps=10_000,
        eval_freq=100,
        gamma=0.99,
        polyak=0.98,
        target_entropy_ratio=None,
        normalize_observations=True,
    ),
    _rejax(
        "td3",
        "Pendulum-v1",
        "pendulum",
        actor_kwargs={"activation": "swish"},
        critic_kwargs={"activation": "swish"},
        num_envs=1,
        buffer_size=10_000,
        fill_buffer=1000,
        batch_size=100,
        learning_rate=0.001,
        num_epochs=1,
        total_timesteps=10_000,
        eval_freq=100,
        gamma=0.99,
        polyak=0.95,
        max_grad_norm=100,
        exploration_noise=0.3,
        target_noise=0.2,
        target_noise_clip=0.5,
        policy_delay=2,
        normalize_observations=True,
    ),
    *(
        _rejax(
            "ppo",
            env,
            config,
            agent_kwargs={"activation": "tanh"},
            num_envs=5,
            num_steps=100,
            num_epochs=5,
            num_minibatches=5,
            learning_rate=0.00075,
            max_grad_norm=0.5,
            total_timesteps=100_000,
            eval_freq=1000,
            gamma=0.99,
            gae_lambda=0.95,
            clip_eps=0.2,
            ent_coef=0.01,
            vf_coef=0.5,
            **extra,
        )
        for env, config, extra in (
            ("CartPole-v1", "cartpole", {}),
            ("Acrobot-v1", "acrobot", {"normalize_observations": True}),
        )
    ),
    # rejax's PQN: the same entry in cartpole.yaml and acrobot.yaml
    *(
        _rejax(
            "pqn",
            env,
            config,
            num_envs=16,
            num_steps=128,
            num_minibatches=16,
            max_grad_norm=10,
            learning_rate=0.0003,
            num_epochs=5,
            total_timesteps=524_288,
            eval_freq=16_384,
            eps_start=1,
            eps_end=0.05,
            exploration_fraction=0.5,
            gamma=0.99,
            td_lambda=0.9,
            normalize_observations=False,
        )
        for env, config in (("CartPole-v1", "cartpole"), ("Acrobot-v1", "acrobot"))
    ),
    # rejax's DQN: the entries of cartpole.yaml and acrobot.yaml share all but the buffer,
    # its warm-up and the target's update
    _rejax(
        "dqn",
        "CartPole-v1",
        "cartpole",
        note="target_update_freq is commented out in the file (rejax's default 1: Polyak "
        "0.98 every iteration)",
        **_rejax_dqn(buffer_size=50_000, fill_buffer=5_000, polyak=0.98),
    ),
    _rejax(
        "dqn",
        "Acrobot-v1",
        "acrobot",
        note="no polyak in the file: rejax's default 0.99 applies at each target_update_freq "
        "(every 200 env steps the target moves 1% toward the online network), as shipped",
        **_rejax_dqn(buffer_size=10_000, fill_buffer=1_000, target_update_freq=200),
    ),
    # MinAtar: rejax ships no config (its PQN and PPO with their defaults)
    *(
        _rejax_defaults(algo, env)
        for env in ("Breakout-MinAtar", "SpaceInvaders-MinAtar")
        for algo in ("pqn", "ppo")
    ),
    # brax's trainers on brax envs: the notebook's PPO; no SAC entry (its defaults)
    _brax_ppo_notebook(
        "inverted_pendulum",
        num_timesteps=2_000_000,
        reward_scaling=10,
        episode_length=1000,
        normalize_observations=True,
        action_repeat=1,
        unroll_length=5,
        num_minibatches=32,
        num_updates_per_batch=4,
        discounting=0.97,
        learning_rate=3e-4,
        entropy_cost=1e-2,
        num_envs=2048,
        batch_size=1024,
    ),
    _brax_ppo_notebook(
        "reacher",
        num_timesteps=50_000_000,
        reward_scaling=5,
        episode_length=1000,
        normalize_observations=True,
        action_repeat=4,
        unroll_length=50,
        num_minibatches=32,
        num_updates_per_batch=8,
        discounting=0.95,
        learning_rate=3e-4,
        entropy_cost=1e-3,
        num_envs=2048,
        batch_size=256,
    ),
    _brax_ppo_notebook(
        "halfcheetah",
        num_timesteps=50_000_000,
        reward_scaling=1,
        episode_length=1000,
        normalize_observations=True,
        action_repeat=1,
        unroll_length=20,
        num_minibatches=32,
        num_updates_per_batch=8,
        discounting=0.95,
        learning_rate=3e-4,
        entropy_cost=0.001,
        num_envs=2048,
        batch_size=512,
    ),
    *(_brax_sac_defaults(env) for env in ("inverted_pendulum", "reacher", "halfcheetah")),
    # brax's trainers on MuJoCo Playground's dm_control tasks
    *(
        _playground(algo, env)
        for env in ("CartpoleBalance", "CheetahRun")
        for algo in ("sac", "ppo")
    ),
    # SBX on gymnasium: rl-zoo3's hyperparameters
    _zoo("sac", "Pendulum-v1", "Pendulum-v1", n_timesteps=20_000, learning_rate=1e-3),
    _zoo(
        "td3",
        "Pendulum-v1",
        "Pendulum-v1",
        n_timesteps=20_000,
        gamma=0.98,
        buffer_size=200_000,
        learning_starts=10_000,
        noise_type="normal",
        noise_std=0.1,
        gradient_steps=1,
        train_freq=1,
        learning_rate=1e-3,
        policy_kwargs={"net_arch": [400, 300]},
    ),
    _zoo("sac", "HalfCheetah-v5", "HalfCheetah-v4", n_timesteps=1_000_000, learning_starts=10_000),
    _zoo(
        "td3",
        "HalfCheetah-v5",
        "HalfCheetah-v4",
        n_timesteps=1_000_000,
        learning_starts=10_000,
        noise_type="normal",
        noise_std=0.1,
        train_freq=1,
        gradient_steps=1,
        learning_rate=1e-3,
        batch_size=256,
        policy_kwargs={"net_arch": [400, 300]},
    ),
)


def published(peer: str, algo: str, env: str) -> Published | None:
    """The table's entry for ``peer`` on (``algo``, ``env``), or None."""
    return next(
        (p for p in TABLE if (p.peer, p.algo, p.env) == (peer, algo, env)),
        None,
    )


@dataclass(frozen=True)
class Settings:
    """The settings one side ran with, as the report writes them beside it."""

    kind: str  # "own", "matched" or "preset" (jaxspreeze's side)
    options: dict[str, Any]  # in the side's own option names
    source: str
    defaults: bool = False
    note: str = ""

    def record(self) -> dict[str, Any]:
        """The row's ``settings`` field (JSON)."""
        return {
            "kind": self.kind,
            "source": self.source,
            "defaults": self.defaults,
            "note": self.note,
            "options": {k: _plain(v) for k, v in self.options.items()},
        }


def _plain(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def own(peer: str, task: Any, total_steps: int) -> Settings:
    """``peer``'s own settings for ``task`` (a :class:`~jaxspreeze.score.tasks.ScoreTask`),
    the budget option set to the row's ``total_steps``; KeyError when the table has no
    entry (every row a built-in peer runs has one: ``tests/test_score_settings.py``)."""
    entry = published(peer, task.algo, task.env)
    if entry is None:
        raise KeyError(f"no own settings of {peer} for {task.algo} on {task.env}")
    options = {k: copy.deepcopy(v) for k, v in entry.options.items() if v is not None}
    options[entry.budget] = int(total_steps)
    note = entry.note
    if too_late := _warmup_beyond(options, total_steps):
        note = f"{note}; {too_late}" if note else too_late
    return Settings("own", options, entry.source, entry.defaults, note)


_WARMUPS = ("fill_buffer", "min_replay_size", "learning_starts")


def _warmup_beyond(options: Mapping[str, Any], total_steps: int) -> str:
    """Words when a published warm-up leaves no learning within the budget ("" else)."""
    for name in _WARMUPS:
        if int(options.get(name) or 0) >= total_steps:
            return (
                f"its {name} ({options[name]:,}) is not below the row's budget "
                f"({total_steps:,}): it does not learn within it"
            )
    return ""


def matched(task: Any, options: Mapping[str, Any]) -> Settings:
    """A peer given the row's jaxspreeze preset (``options`` in the peer's names)."""
    return Settings(
        "matched",
        dict(options),
        f"jaxspreeze's preset {task.preset} (jaxspreeze/presets/{task.preset}.toml), "
        "matched as far as the peer allows",
    )


def preset(task: Any, options: Mapping[str, Any]) -> Settings:
    """jaxspreeze's side: the row's preset (never jaxspreeze's defaults)."""
    return Settings(
        PRESET,
        dict(options),
        f"jaxspreeze's preset {task.preset} (jaxspreeze/presets/{task.preset}.toml), not "
        "its defaults",
    )


# ----------------------------------------------------------------------------- protocol
def episodes(task: Any) -> int:
    """The episodes of every evaluation of every side of ``task``'s row: the row's own
    count where it names one (the brax and Playground rows, HalfCheetah-v5: a CPU's
    budget), else jaxspreeze's default for the env (128 on device envs, 16 on host envs).
    Every row on a family whose default depends on the backend (brax, Playground) names
    its count (a test checks), so the backend passed here changes nothing."""
    return task.eval_episodes or default_eval_episodes(task.env, "cpu")


def protocol(task: Any, by: str, every: int | None = None) -> dict[str, Any]:
    """A side's ``evaluation`` field: the row's episodes and starts, who evaluated, and
    ``every`` env steps (the row's ``eval_every`` unless the side evaluates less often:
    brax between its updates)."""
    return {
        "episodes": episodes(task),
        "every": every or task.eval_every,
        "starts": "fresh at every evaluation",
        "deterministic": True,
        "by": by,
    }


# how each side's policy is evaluated (the report's words, by side)
JAXSPREEZE_EVALUATOR = (
    "jaxspreeze's evaluator (agent/evaluate.py): one deterministic episode in each of the "
    "row's envs, starts drawn from the seed's evaluation key folded with the env step"
)
HOST_EVALUATOR = (
    "jaxspreeze's host evaluator (agent/evaluate.py): one deterministic episode per "
    "gymnasium env, env j reset with seed host_start_seed(seed + 10000, 0, env step) + j"
)
