"""Asymmetric actor-critic observations: the actor and the critic read dict observations
at their own keys (``--actor-obs-key``, ``--critic-obs-key``).

Playground's locomotion tasks (the ones that observe ``{"state", "privileged_state"}``)
need models this machine lacks, so the stand-in ``PointMass`` of ``test_playground``
plays one: registered as the Playground task ``playground/TestPointMass`` by patching the
family's ``check`` and ``load_env`` (``playground/TestFlatPointMass`` observes one array).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_playground import PointMass
from test_split import run_worker

from jaxspreeze import algos, envs, networks
from jaxspreeze.agent.agent import load
from jaxspreeze.agent.evaluate import make_evaluate
from jaxspreeze.agent.policy import load_policy
from jaxspreeze.agent.render import rollout_episode
from jaxspreeze.cli import main
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import ObsKeys
from jaxspreeze.envs import VecEnv
from jaxspreeze.envs import playground as pg_family
from jaxspreeze.run.checkpoint_eval import evaluate_checkpoint
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import config
from jaxspreeze.setup.plan import RunPlan, plan
from jaxspreeze.store import resume

ASYMMETRIC = ObsKeys(critic="privileged_state")  # actor: state (1 column), critic: 3 columns


class FlatPointMass(PointMass):
    """PointMass observing one array (its ``state``), as the dm_control tasks do."""

    observation_size = 1

    def _state(self, pos, reward):
        state = super()._state(pos, reward)
        return state.replace(obs=state.obs["state"])


STANDINS = {"TestPointMass": PointMass, "TestFlatPointMass": FlatPointMass}


def register_standins(setattr_=setattr) -> None:
    """Make ``playground/TestPointMass`` and ``playground/TestFlatPointMass`` load as tasks
    (``setattr_``: ``monkeypatch.setattr`` in a test, plain ``setattr`` in a worker)."""
    check, load = pg_family.check, pg_family.load_env
    setattr_(pg_family, "check", lambda n: None if n in STANDINS else check(n))
    setattr_(pg_family, "load_env", lambda n: STANDINS[n]() if n in STANDINS else load(n))


@pytest.fixture
def standins(monkeypatch):
    """The stand-ins registered for one test."""
    register_standins(monkeypatch.setattr)


def _first_layer_width(params) -> int:
    """The input width of a network's first dense layer (the MLP's ``Dense_0``)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    widths = {
        leaf.shape[-2]
        for path, leaf in flat
        if "kernel" in jax.tree_util.keystr(path)
        and "MLP" in jax.tree_util.keystr(path)
        and "Dense_0" in jax.tree_util.keystr(path)
    }
    assert len(widths) == 1, widths
    return widths.pop()


# ---------------------------------------------------------------- the adapter
def test_asymmetric_observation_is_actor_then_critic_columns():
    parts = pg_family.from_env(PointMass(), "test/PointMass", ASYMMETRIC)
    spec = parts.spec
    assert spec.obs_shape == (4,) and spec.actor_obs == (0, 1) and spec.critic_obs == (1, 4)
    env = VecEnv(spec, 2, parts.reset_one, parts.step_batch)
    obs, state = env.reset(jax.random.key(0))
    pos = np.asarray(obs[:, 0])
    np.testing.assert_allclose(obs[:, 1:], np.stack([pos, 10 * pos, np.ones(2)], 1), rtol=1e-6)
    # the final observation (before an auto-reset) is laid out the same way
    nxt, _, _, _, _, final_obs = env.step(jax.random.key(1), state, jnp.ones((2, 1)))
    for o in (nxt, final_obs):
        np.testing.assert_allclose(o[:, 2], 10 * o[:, 0], rtol=1e-5)
        np.testing.assert_array_equal(o[:, 1], o[:, 0])
    # the same key for both is the one-key observation (no columns), as is the default
    same = pg_family.from_env(PointMass(), "test/PointMass", ObsKeys("state", "state")).spec
    default = pg_family.from_env(PointMass(), "test/PointMass").spec
    assert same == default and default.obs_shape == (1,) and default.critic_obs is None


def test_adapter_refuses_keys_it_cannot_read():
    with pytest.raises(ConfigError, match=r"keys privileged_state, state; .*'pixels'") as e:
        pg_family.from_env(PointMass(), "test/PointMass", ObsKeys(critic="pixels"))
    assert e.value.field == "critic_obs_key"
    with pytest.raises(ConfigError, match=r"observes one array.*--actor-obs-key") as e:
        pg_family.from_env(FlatPointMass(), "test/Flat", ObsKeys(actor="state"))
    assert e.value.field == "actor_obs_key"
    assert pg_family.from_env(FlatPointMass(), "test/Flat").spec.obs_shape == (1,)


# ---------------------------------------------------------------- the networks
@pytest.mark.parametrize("algo", algos.NAMES)
def test_each_network_reads_only_its_columns(algo, standins):
    """The actor's first layer is as wide as the actor's key, the critic's as the critic's
    (plus the action for Q), and the action does not move with the critic's columns."""
    spec = envs.env_spec("playground/TestPointMass", ASYMMETRIC)
    run = config.RunConfig(algo=algo, env="playground/TestPointMass", critic_obs_key="privileged_state")
    if algos.get(algo).supports(spec) is not None:  # a discrete-only algorithm (PQN): refused
        with pytest.raises(ConfigError, match="discrete action space"):
            plan(run, on_devices=False)
        return
    cfg = config.resolve(run)
    algorithm = algos.get(algo).make(getattr(cfg, algo), spec, cfg)
    agent = jax.jit(algorithm.init)(jax.random.key(0))
    action_in = 0 if algos.get(algo).on_policy else spec.action_dim  # Q(s, a) reads a too
    actor = getattr(agent.actor, "inner", agent.actor)  # inside observation normalisation
    assert _first_layer_width(actor.params) == 1
    assert _first_layer_width(agent.critic.params) == 3 + action_in
    obs = jax.random.normal(jax.random.key(1), (5, 4))
    # as is; only the critic's columns moved; the actor's column moved
    variants = jnp.stack([obs, obs.at[:, 1:].set(100.0), obs.at[:, 0].add(3.0)])
    # one compiled program run on each (under vmap the rows' rounding could differ)
    act = jax.jit(lambda o: algorithm.act(agent.actor, (), o, jax.random.key(2), True)[0])
    same, critic_moved, actor_moved = (act(o) for o in variants)
    np.testing.assert_array_equal(same, critic_moved)
    assert not np.allclose(same, actor_moved)


def test_critic_and_discrete_policy_networks_slice_their_columns():
    obs = jax.random.normal(jax.random.key(0), (6, 5))
    # as is; the actor's columns (0, 2) moved; the critic's (2, 5) moved
    variants = jnp.stack([obs, obs.at[:, :2].add(5.0), obs.at[:, 2:].add(5.0)])
    action = jnp.zeros((6, 1))
    q = networks.QEnsemble((8,), 2, obs_cols=(2, 5))
    v = networks.ValueNet((8,), obs_cols=(2, 5))
    pi = networks.CategoricalActor((8,), 3, obs_cols=(0, 2))
    k = jax.random.split(jax.random.key(1), 3)
    qp, vp, pp = jax.jit(
        lambda: (q.init(k[0], obs, action), v.init(k[1], obs), pi.init(k[2], obs))
    )()
    apply = jax.jit(lambda o: (q.apply(qp, o, action), v.apply(vp, o), pi.apply(pp, o)))
    (q0, v0, p0), (q_actor, v_actor, p_actor), (q_critic, v_critic, p_critic) = (
        apply(o) for o in variants
    )
    np.testing.assert_array_equal(q0, q_actor)
    np.testing.assert_array_equal(v0, v_actor)
    np.testing.assert_array_equal(p0, p_critic)
    assert not np.allclose(q0, q_critic) and not np.allclose(v0, v_critic)
    assert not np.allclose(p0, p_actor, atol=1e-6)
    assert _first_layer_width(pp) == 2 and _first_layer_width(vp) == 3
    assert _first_layer_width(qp) == 3 + 1


# ---------------------------------------------------------------- end to end
@pytest.mark.slow  # PPO's asymmetric run from the CLI stays in the default run
def test_sac_trains_asymmetric_and_its_policy_sees_only_the_actor_key(standins, tiny_cfg):
    cfg = tiny_cfg.replace(
        env="playground/TestPointMass", critic_obs_key="privileged_state", run_name="asym"
    )
    result = train(cfg, quiet=True)
    assert np.isfinite(result.summary["final_eval_return"])
    agent = result.state.agent
    actor = getattr(agent.actor, "inner", agent.actor)  # inside observation normalisation
    assert _first_layer_width(actor.params) == 1  # leaves [S, ...]: the seed axis first
    assert _first_layer_width(agent.critic.params) == 3 + 1
    saved = json.loads((result.run_dir / "config.json").read_text())
    assert saved["actor_obs_key"] == "" and saved["critic_obs_key"] == "privileged_state"
    # the exported policy: rebuilt from config.json, fed the env's observation, it acts
    # on the actor's column only
    policy = load_policy(result.run_dir)
    assert policy.algo.act is not None and _first_layer_width(policy.actor) == 1
    env = envs.make_env(cfg.env, 3, policy.cfg.obs_keys)
    assert env.spec.obs_shape == (4,)
    got = jax.jit(make_evaluate(policy.algo, env))(policy.seed(0), jax.random.key(0))
    assert np.isfinite(got.return_mean)
    # jaxspreeze eval (the checkpoint's actor) and the rendered episode build the same env
    evaluated = evaluate_checkpoint(result.run_dir, episodes=2)
    assert np.isfinite(evaluated["return_mean"]).all()
    _, length, _ = rollout_episode(policy, max_steps=25)
    assert 1 <= length <= 25
    # the agent (jaxspreeze.load) takes the whole observation row, the actor reads its
    # column; it evaluates the run's env with the run's keys
    agent = load(result.run_dir)
    rows = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    want, _ = policy.algo.act(policy.seed(0), (), rows, jax.random.key(0), True)
    np.testing.assert_array_equal(agent.predict(rows), np.asarray(want))
    assert np.isfinite(agent.evaluate(cfg.env, episodes=2).return_mean)
    # a resume that reads other keys is refused, naming the field, before anything runs
    with pytest.raises(ConfigError, match="critic_obs_key 'privileged_state' -> ''") as e:
        train(cfg.replace(critic_obs_key="", total_steps=1200), quiet=True, resume=result.run_dir)
    assert e.value.field == "critic_obs_key"


@pytest.mark.slow  # a whole CLI run; the asymmetric networks and plan are tested above
def test_ppo_trains_asymmetric_from_the_cli(standins, tmp_path):
    args = [
        "train", "--algo", "ppo", "--env", "playground/TestPointMass",
        "--actor-obs-key", "privileged_state", "--critic-obs-key", "state",
        "--total-steps", "256", "--num-envs", "4", "--rollout-steps", "16",
        "--batch-size", "32", "--chunk-iterations", "2", "--eval-episodes", "2",
        "--ppo.hidden", "16", "16", "--ppo.epochs", "2", "--ppo.normalize-obs",
        "--sinks", "jsonl", "--logdir", str(tmp_path), "--run-name", "ppo",
    ]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((tmp_path / "ppo" / "summary.json").read_text())
    assert summary["env_steps"] >= 256 and np.isfinite(summary["final_eval_return"])
    policy = load_policy(tmp_path / "ppo")
    assert policy.cfg.obs_keys == ObsKeys("privileged_state", "state")
    assert _first_layer_width(policy.actor) == 3  # the privileged state, 3 columns
    spec = envs.env_spec("playground/TestPointMass", policy.cfg.obs_keys)
    assert spec.actor_obs == (0, 3) and spec.critic_obs == (3, 4)


@pytest.mark.slow  # single and split, SAC and PPO, in a subprocess: ~5 min on 2 busy cores
def test_split_equals_single_with_asymmetric_keys():
    """The device split (two fake CPU devices, split_worker.py) runs the sliced networks
    unchanged: SAC (2 seeds) and PPO end bitwise equal to the single-device run."""
    found = run_worker("asym", "sac", "ppo", timeout=900)
    for name in ("sac", "ppo"):
        assert found[name]["state"]["bitwise"], found[name]["state"]
        assert found[name]["metrics"]["bitwise"], found[name]["metrics"]
    assert found["obs_shape"] == [4] and found["actor_obs"] == [0, 1]


# ---------------------------------------------------------------- bad input
BAD_KEYS = [
    (["--env", "gymnax/Pendulum-v1", "--actor-obs-key", "state"], "--actor-obs-key", "drop"),
    (["--env", "gymnasium/Pendulum-v1", "--critic-obs-key", "x"], "--critic-obs-key", "playground/"),
    (["--env", "playground/TestFlatPointMass", "--actor-obs-key", "state"], "--actor-obs-key",
     "observes one array"),
    (["--env", "playground/TestPointMass", "--critic-obs-key", "pixels"], "--critic-obs-key",
     "privileged_state, state"),
    (["--env", "playground/TestPointMass", "--actor-obs-key", "State"], "--actor-obs-key",
     "choose one of those"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "flag", "says"), BAD_KEYS)
def test_bad_keys_exit_2_naming_the_field(args, flag, says, standins, capsys, tmp_path):
    assert main(["train", *args, "--logdir", str(tmp_path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"error: {flag}: " in err[0] and says in err[0], err
    assert not any(tmp_path.iterdir()), "nothing is written for a rejected config"


def test_resume_refuses_other_keys_as_a_shape_field(standins):
    saved = config.resolve(config.RunConfig(env="playground/X", actor_obs_key="state"))
    sac = algos.get(saved.algo)
    for name in ("actor_obs_key", "critic_obs_key"):
        assert name in resume.shape_fields(sac)
    as_planned = lambda cfg: RunPlan(cfg, sac, envs.env_spec("playground/TestPointMass"))
    resume.check_compatible(saved, sac, as_planned(saved))
    with pytest.raises(ConfigError, match="actor_obs_key 'state' -> 'privileged_state'"):
        changed = saved.replace(actor_obs_key="privileged_state")
        resume.check_compatible(saved, sac, as_planned(changed))


def test_defaults_record_no_columns():
    spec = envs.env_spec("gymnax/Pendulum-v1")
    assert spec.actor_obs is None and spec.critic_obs is None
    assert config.RunConfig().obs_keys == ObsKeys() and not ObsKeys().given
