"""The MuJoCo Playground family: the env contract on CartpoleBalance, dict observations,
final observations on termination and truncation, and the errors for bad names.

The adapter's logic (dict keys, action repeat, termination apart from truncation) is
pinned on a cheap stand-in for a Playground ``MjxEnv``; the contract on a real task
(CartpoleBalance, pure-JAX MJX) is one compiled program run for two keys.
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxspreeze import algos
from jaxspreeze.cli import main
from jaxspreeze.cli.train import parse_train_args
from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.core.types import ObsKeys
from jaxspreeze.envs import VecEnv, available_envs, check_env_name, env_spec, make_env
from jaxspreeze.envs import playground as pg_family
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import config
from jaxspreeze.setup.plan import plan

HAVE_PLAYGROUND = importlib.util.find_spec("mujoco_playground") is not None
needs_playground = pytest.mark.skipif(
    not HAVE_PLAYGROUND,
    reason='MuJoCo Playground not installed: pip install "jaxspreeze[playground]"',
)
COMPILE = "/jax/core/compile/backend_compile_duration"


def _scan(env: VecEnv, steps: int, action_fn):
    """A jitted ``steps``-step rollout: ``(obs before each step, *step outputs)`` stacked."""

    def run(key):
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(carry, k):
            obs, state = carry
            out = env.step(k, state, action_fn(obs))
            return out[:2], (obs, *out)

        return jax.lax.scan(body, (obs, state), jax.random.split(k_run, steps))[1]

    return jax.jit(run)


# ---------------------------------------------------------------- the adapter, on a stand-in
@struct.dataclass
class _State:
    """The fields of a Playground ``State`` the adapter reads, plus the position."""

    obs: dict
    reward: jax.Array
    done: jax.Array
    pos: jax.Array


class PointMass:
    """A stand-in for a Playground ``MjxEnv``: a point on a line, observed as a dict.

    ``{"state": [pos], "privileged_state": [pos, 10 * pos, 1]}``; reset draws the position
    in ``[-0.1, 0.1]``; each physics step moves it by ``0.1 * action`` with reward
    ``-|pos|``; ``done`` when ``pos > 0.5``. 40 physics steps per episode, each env step
    repeats its action twice (Playground's ``action_repeat``): 20 env steps.
    """

    action_size = 1
    observation_size = {"state": (1,), "privileged_state": (3,)}  # noqa: RUF012
    _config = {"episode_length": 40, "action_repeat": 2}  # noqa: RUF012

    def _state(self, pos, reward):
        obs = {"state": pos[None], "privileged_state": jnp.stack([pos, 10 * pos, jnp.ones(())])}
        return _State(obs, reward, (pos > 0.5).astype(jnp.float32), pos)

    def reset(self, rng):
        return self._state(jax.random.uniform(rng, (), minval=-0.1, maxval=0.1), jnp.zeros(()))

    def step(self, state, action):
        pos = state.pos + 0.1 * action[0]
        return self._state(pos, -jnp.abs(pos))


def test_adapter_reads_dict_observations_at_the_chosen_key():
    parts = pg_family.from_env(PointMass(), "test/PointMass")
    privileged = pg_family.from_env(
        PointMass(), "test/PointMass", ObsKeys(actor="privileged_state")
    )
    assert parts.spec.obs_shape == (1,) and privileged.spec.obs_shape == (3,)
    assert parts.spec.max_episode_steps == 20  # 40 physics steps, action repeated twice
    assert parts.spec.action_dim == 1 and parts.spec.action_low == (-1.0,)
    # one key for both: every column is the actor's and the critic's (no columns recorded)
    assert parts.spec.actor_obs is None and parts.spec.critic_obs is None
    assert privileged.spec.actor_obs is None and privileged.spec.critic_obs is None
    with pytest.raises(ConfigError, match="privileged_state, state") as e:
        pg_family.from_env(PointMass(), "test/PointMass", ObsKeys(actor="pixels"))
    assert e.value.field == "actor_obs_key"
    # the same key draws the same state, seen through either key
    obs_s, _ = VecEnv(parts.spec, 2, parts.reset_one, parts.step_batch).reset(jax.random.key(0))
    obs_p, _ = VecEnv(privileged.spec, 2, privileged.reset_one, privileged.step_batch).reset(
        jax.random.key(0)
    )
    assert obs_s.shape == (2, 1) and obs_p.shape == (2, 3) and obs_s.dtype == np.float32
    np.testing.assert_array_equal(obs_p[:, 0], obs_s[:, 0])
    np.testing.assert_allclose(obs_p[:, 1], 10 * obs_s[:, 0], rtol=1e-6)


def test_adapter_final_obs_on_termination_and_truncation():
    parts = pg_family.from_env(PointMass(), "test/PointMass")
    env = VecEnv(parts.spec, 2, parts.reset_one, parts.step_batch)
    # env 0 pushes (+0.2 per env step: past 0.5 at its 3rd step, terminated), env 1 waits
    # (truncated at 20 steps); 45 steps
    push = jnp.array([[1.0], [0.0]])
    obs, nxt, state, reward, term, trunc, final_obs = jax.device_get(
        _scan(env, 45, lambda obs: push)(jax.random.key(1))
    )
    assert term.shape == trunc.shape == reward.shape == (45, 2)
    assert not (term & trunc).any()
    assert term[2::3, 0].all() and term[:, 0].sum() == 15 and not trunc[:, 0].any()
    assert not term[:, 1].any() and trunc[19::20, 1].all() and trunc[:, 1].sum() == 2
    # the final observation is where the episode ended; the next one a fresh initial state
    assert (final_obs[2::3, 0, 0] > 0.5).all() and (np.abs(nxt[2::3, 0, 0]) <= 0.1).all()
    done = term | trunc
    np.testing.assert_array_equal(final_obs[~done], nxt[~done])
    assert state.last_length[2, 0] == 3 and state.last_length[19, 1] == 20
    # the action repeated twice: the reward of an env step is the sum over both physics steps
    p0 = obs[0, 0, 0]
    np.testing.assert_allclose(reward[0, 0], -abs(p0 + 0.1) - abs(p0 + 0.2), rtol=1e-5)
    np.testing.assert_allclose(state.last_return[2, 0], reward[:3, 0].sum(), rtol=1e-5)
    # every episode starts from its own draw: no two starts of env 0 are equal
    starts = nxt[2::3, 0, 0]
    assert len(np.unique(np.round(starts, 7))) == starts.size


# ---------------------------------------------------------------- a real task: CartpoleBalance
@pytest.mark.slow  # compiles MJX CartpoleBalance (the default run stays under 10 minutes)
@needs_playground
def test_cartpole_contract_compiles_once_and_truncates():
    env = make_env("playground/CartpoleBalance", 3)
    spec = env.spec
    assert spec == env_spec("playground/CartpoleBalance")
    assert spec.obs_shape == (5,) and spec.action_dim == 1 and not spec.discrete
    assert spec.action_low == (-1.0,) and spec.action_high == (1.0,)
    assert spec.max_episode_steps == 1000
    run = _scan(env, 1001, lambda obs: jnp.zeros((3, 1)))
    compiles = []

    def listen(event: str, duration: float, **kwargs: object) -> None:
        if event == COMPILE:
            compiles.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        outs = [jax.device_get(run(jax.random.key(s))) for s in (0, 1)]
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles.count("jit(run)") == 1 and run._cache_size() == 1  # the second key reuses it
    obs, nxt, state, reward, term, trunc, final_obs = outs[0]
    assert obs.shape == (1001, 3, 5) and obs.dtype == np.float32 and reward.dtype == np.float32
    assert term.shape == trunc.shape == (1001, 3)
    assert np.isfinite(obs).all() and np.all((reward >= 0) & (reward <= 1))  # dm_control: [0, 1]
    # the balance task never terminates: truncated at its time limit, once per env
    assert not term.any() and trunc[999].all() and trunc.sum() == 3
    np.testing.assert_array_equal(final_obs[:999], nxt[:999])  # no episode ended: the same
    assert not np.allclose(final_obs[999], nxt[999])  # the final obs is kept apart
    np.testing.assert_allclose(state.last_return[999], reward[:1000].sum(0), rtol=1e-4)
    assert (state.last_length[999] == 1000).all() and (state.episode_length[1000] == 1).all()
    assert not np.allclose(nxt[999], obs[0])  # the second episode starts elsewhere
    assert not np.allclose(outs[0][0][0], outs[1][0][0])  # another key, other initial states


class DictObsCartpole:
    """CartpoleBalance observing ``{"state", "privileged_state"}`` (as Playground's
    locomotion tasks do), ending when the cart leaves ``|x| < 0.3``, 40-step episodes."""

    def __init__(self, env):
        self.env = env
        self._config = {"episode_length": 40, "action_repeat": 1}
        self.action_size = env.action_size
        self.observation_size = {"state": (5,), "privileged_state": (7,)}

    def _observe(self, state):
        obs = {
            "state": state.obs,
            "privileged_state": jnp.concatenate([state.obs, state.data.qpos]),
        }
        return state.replace(obs=obs)

    def reset(self, rng):
        return self._observe(self.env.reset(rng))

    def step(self, state, action):
        nxt = self._observe(self.env.step(state.replace(obs=state.obs["state"]), action))
        return nxt.replace(done=(jnp.abs(nxt.data.qpos[0]) > 0.3).astype(jnp.float32))


@needs_playground
@pytest.mark.slow  # two more MJX compiles (minutes on a busy CPU)
def test_real_dict_observations_final_obs_on_termination_and_truncation():
    wrapped = DictObsCartpole(pg_family.load_env("CartpoleBalance"))
    parts = pg_family.from_env(wrapped, "test/DictCartpole")
    privileged = pg_family.from_env(wrapped, "test/DictCartpole", ObsKeys(actor="privileged_state"))
    assert parts.spec.obs_shape == (5,) and privileged.spec.obs_shape == (7,)
    env = VecEnv(parts.spec, 2, parts.reset_one, parts.step_batch)
    # env 0 pushes the cart out (terminated), env 1 does nothing (truncated at 40 steps)
    push = jnp.array([[1.0], [0.0]])
    obs, nxt, state, _, term, trunc, final_obs = jax.device_get(
        _scan(env, 90, lambda obs: push)(jax.random.key(1))
    )
    assert not (term & trunc).any()
    assert term[:, 0].any() and not term[:, 1].any() and not trunc[:, 0].any()
    assert trunc[39, 1] and trunc[79, 1] and trunc[:, 1].sum() == 2
    t = int(np.argmax(term[:, 0]))
    assert abs(final_obs[t, 0, 0]) > 0.3  # the cart position that ended the episode
    assert abs(nxt[t, 0, 0]) <= 0.1 + 1e-6  # the next obs is a fresh initial state
    assert state.last_length[t, 0] == t + 1
    assert not np.allclose(final_obs[39, 1], nxt[39, 1])
    np.testing.assert_array_equal(final_obs[:39, 1], nxt[:39, 1])
    assert not np.allclose(obs[0, 1], nxt[39, 1])  # the new episode starts elsewhere


@needs_playground
@pytest.mark.parametrize("algo", [spec.name for spec in algos.all_specs()])
def test_every_algorithm_accepts_a_playground_task(algo):
    """Playground's tasks have continuous actions: every algorithm for continuous actions
    validates on them, and a discrete-only one (PQN) is refused naming --algo."""
    args = parse_train_args(["--algo", algo, "--env", "playground/CartpoleBalance"])
    if algos.get(algo).supports(env_spec("playground/CartpoleBalance")) is not None:
        with pytest.raises(ConfigError, match="discrete action space") as e:
            plan(args, on_devices=False)
        assert e.value.field == "algo"
        return
    cfg = plan(args, on_devices=False).cfg
    assert cfg.env == "playground/CartpoleBalance"


# ---------------------------------------------------------------- bad input
@needs_playground
def test_bad_playground_names_say_why(monkeypatch, tmp_path):
    with pytest.raises(UnknownEnvError, match="playground/CartpoleBalance"):
        check_env_name("playground/cartpolebalance")  # nearest names, case aside
    with pytest.raises(UnknownEnvError, match="tasks that run offline"):
        check_env_name("playground/NoSuchTask")
    assert "playground/CartpoleBalance" in available_envs()
    # a locomotion task without its models: refused before anything is cloned, saying where
    # the models go (Playground would clone the MuJoCo Menagerie there)
    absent = tmp_path / "mujoco_menagerie"
    monkeypatch.setattr(pg_family, "menagerie_path", lambda: absent)
    with pytest.raises(UnknownEnvError, match=r"locomotion task.*absent.*mujoco_menagerie"):
        check_env_name("playground/Go1JoystickFlatTerrain")
    assert not absent.exists()
    assert "playground/Go1JoystickFlatTerrain" not in available_envs()
    assert "playground/CheetahRun" in available_envs()  # dm_control tasks ship their models


@needs_playground
def test_bad_playground_names_exit_2_naming_env(capsys, monkeypatch, tmp_path):
    code = main(["train", "--env", "playground/CartpoleBalanse", "--logdir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--env" in err[0]
    assert "playground/CartpoleBalance" in err[0]  # the nearest name
    monkeypatch.setattr(pg_family, "menagerie_path", lambda: tmp_path / "absent")
    code = main(["train", "--env", "playground/Go1JoystickFlatTerrain", "--logdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "absent" in err and "does not download" in err
    assert not any(tmp_path.iterdir())


def test_missing_playground_gives_the_install_command(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pg_family, "installed", lambda: False)
    with pytest.raises(UnknownEnvError, match=r'pip install "jaxspreeze\[playground\]"'):
        check_env_name("playground/CartpoleBalance")
    assert not any(n.startswith("playground/") for n in available_envs())
    code = main(["train", "--env", "playground/CartpoleBalance", "--logdir", str(tmp_path)])
    assert code == 2 and 'pip install "jaxspreeze[playground]"' in capsys.readouterr().err


@needs_playground
@pytest.mark.slow  # ~200k env steps of MJX physics: about two minutes on 2 CPU cores
def test_ppo_defaults_learn_cartpole_balance(tmp_path):
    """PPO with its defaults on playground/CartpoleBalance balances the pole: the final
    evaluation is >= 900 after 200k env steps (measured: 999.7; 317 after 61k)."""
    cfg = config.RunConfig(
        algo="ppo",
        env="playground/CartpoleBalance",
        total_steps=200_000,
        logdir=str(tmp_path),
        run_name="ppo-cartpole-balance",
        sinks=("jsonl",),
    )
    summary = train(cfg, quiet=True).summary
    assert summary["final_eval_return"] >= 900, summary["final_eval_return"]
