"""Your own JAX env as a pair of pure functions: ``train(cfg, env=JaxEnv(reset, step, ...))``.

The pair enters :mod:`jaxspreeze.envs.jaxenv` under ``jax/<name>``; jaxspreeze resets it
(the shared auto-reset) and keeps the final observation. Here: the adapter beside the
functions themselves on the same states and keys (both step signatures, the time limit and
the env's own truncation), every wrong pair one line naming ``env``, the run directory's
record (importable functions rebuilt by ``load``; others asked for again), and (slow) a run
that trains, resumes bitwise, sweeps and loads.
"""

from __future__ import annotations

import functools
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_suites import check_against_the_suite
from test_user_jax_env import leaves, recorded_run, tiny

import jaxspreeze
from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.envs import env_spec, jaxenv, register_env
from jaxspreeze.envs.jaxenv import JaxEnv
from jaxspreeze.run.checkpoint_eval import evaluate_checkpoint

LIMIT = 12  # the time limit of the envs here


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
    """Each test starts as a fresh process would: no JAX env registered."""
    monkeypatch.setattr(jaxenv, "_ENVS", {})


# --- the pairs: a corridor (state, action) and a noisy reach (key, state, action) -----------


def corridor_reset(key):
    """Cell 0 or 1 of a 5-cell corridor, one-hot; the state is (cell, steps)."""
    x = jax.random.randint(key, (), 0, 2)
    return jax.nn.one_hot(x, 5), (x, 0)


def corridor_step(state, action):
    """Action 1 walks right, 0 left; cell 4 ends the episode with reward 1."""
    x, t = state
    x = jnp.clip(x + jnp.where(action == 1, 1, -1), 0, 4)
    done = x == 4
    return jax.nn.one_hot(x, 5), (x, t + 1), jnp.where(done, 1.0, -0.01), done


def reach_reset(key):
    x = jax.random.uniform(key, (), minval=-1.0, maxval=1.0)
    return jnp.array([x, 0.0]), {"x": x, "t": jnp.int32(0)}


def reach_step(key, state, action):
    """A noisy point on a line: near 0 ends it; the env's own limit (LIMIT - 2 steps) truncates."""
    x = state["x"] + 0.3 * action[0] + 0.05 * jax.random.normal(key)
    t = state["t"] + 1
    obs = jnp.array([x, t / LIMIT])
    return obs, {"x": x, "t": t}, -jnp.abs(x), jnp.abs(x) < 0.1, t >= LIMIT - 2, {}


CORRIDOR = JaxEnv(corridor_reset, corridor_step, actions=2, max_steps=LIMIT)
REACH = JaxEnv(reach_reset, reach_step, action_bounds=(-1.0, 1.0), max_steps=LIMIT)


def test_the_names_and_specs_come_from_the_functions():
    assert register_env(CORRIDOR) == "jax/corridor" and register_env(REACH) == "jax/reach"
    corridor, reach = env_spec("jax/corridor"), env_spec("jax/reach")
    assert corridor.discrete and corridor.action_dim == 2 and corridor.obs_shape == (5,)
    assert corridor.max_episode_steps == LIMIT and corridor.obs_dtype == "float32"
    assert not reach.discrete and reach.action_dim == 1 and reach.obs_shape == (2,)
    assert (reach.action_low, reach.action_high) == ((-1.0,), (1.0,))
    named = JaxEnv(corridor_reset, corridor_step, actions=2, name="Corridor-v0")
    assert register_env(named) == "jax/Corridor-v0"
    assert jaxenv.entry("jax/corridor").importable  # module-level functions of this module


def masked_step(state, action, bonus=0.0):
    """A structured observation whose action_mask allows actions 0 and 2 only."""
    obs = {"pos": jnp.zeros(2), "action_mask": jnp.array([True, False, True])}
    return obs, state + 1, bonus + action, state >= 3


def test_a_structured_observation_carries_its_mask_and_a_partial_is_not_importable():
    env = JaxEnv(
        lambda key: (masked_step(jnp.int32(0), 0)[0], jnp.int32(0)),
        functools.partial(masked_step, bonus=1.0),
        actions=3,
        obs_shape=(5,),
        name="masked",
    )
    found = jaxenv.entry(register_env(env))
    assert found.spec.action_mask and found.spec.obs_shape == (5,)
    assert found.spec.actor_obs == (0, 2) == found.spec.critic_obs
    assert not found.importable and found.functions["step"] == "functools:partial"


def test_a_pair_without_a_key_steps_as_its_functions():
    """The corridor beside its own step on the same states: rewards, terminations, the time
    limit as a truncation, final observations, and the start drawn ahead after an end."""
    parts = jaxenv.make(register_env(CORRIDOR))

    def own_step(state, action):
        obs, (_, t), reward, done = corridor_step(state, action)
        return obs, reward, done, (t >= LIMIT) & ~done

    check_against_the_suite(parts, own_step, lambda k: corridor_reset(k)[0], steps=3 * LIMIT)


def test_a_pair_with_a_key_steps_as_its_functions():
    """The reach: each step's key split from the one carried beside the state (drawn from
    the second half of the reset's key), its own truncation or'ed with the time limit."""
    parts = jaxenv.make(register_env(REACH))

    def own_step(carried, action):
        state, raw = carried
        k_step = jax.random.wrap_key_data(jax.random.split(raw)[1])
        obs, state, reward, term, trunc, _ = reach_step(k_step, state, action[None] - 0.5)
        return obs, reward, term, trunc | (state["t"] >= LIMIT)

    def own_reset(key):
        return reach_reset(jax.random.split(key)[0])[0]

    # the suite check draws discrete actions 0/1: as floats, -0.5 / +0.5 after the shift
    shifted = parts._replace(step_batch=lambda k, s, a: parts.step_batch(k, s, a[:, None] - 0.5))
    spec = parts.spec
    discrete = shifted._replace(spec=type(spec)(spec.name, spec.obs_shape, True, 2))
    check_against_the_suite(discrete, own_step, own_reset, steps=3 * LIMIT)


# --- wrong pairs: one line naming env --------------------------------------------------------


def fixed(obs, state, *rest):
    """A step that returns fixed outputs (to check what is refused)."""
    return lambda s, a: (obs, state(s), *rest)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ((corridor_reset, corridor_step), "a (reset, step) pair needs its actions"),
        (JaxEnv(corridor_reset, corridor_step), "its actions are not declared"),
        (JaxEnv(corridor_reset, corridor_step, actions=2, action_bounds=(0, 1)), "not both"),
        (JaxEnv(corridor_reset, corridor_step, actions=0), "actions=0"),
        (JaxEnv(corridor_reset, corridor_step, action_bounds=(1.0, -1.0)), "low < high"),
        (JaxEnv(corridor_reset, corridor_step, action_bounds=([0, 0], [1, 1, 1])), "one size"),
        (JaxEnv(corridor_reset, corridor_step, actions=2, max_steps=0), "max_steps=0"),
        (JaxEnv(corridor_reset, corridor_step, actions=2, name="a/b"), "name='a/b'"),
        (JaxEnv(corridor_reset, corridor_step, actions=2, obs_shape=(4,)), "obs_shape=(4,)"),
        (JaxEnv(corridor_reset, lambda s: s, actions=2), "takes (key, state, action) or"),
        (JaxEnv(lambda k: jnp.zeros(5), corridor_step, actions=2), "expected (obs, state)"),
        (JaxEnv(lambda k: 1 / 0, corridor_step, actions=2), "reset(key) failed: ZeroDivision"),
        (JaxEnv(corridor_reset, lambda s, a: (s, 0.0), actions=2), "returned 2 values"),
        (JaxEnv(corridor_reset, fixed(jnp.zeros(3), lambda s: s, 0.0, False), actions=2),
         "step observes float32[3], reset float32[5]"),
        (JaxEnv(corridor_reset, fixed(jnp.zeros(5), lambda s: (s[0], 1.0), 0.0, False), actions=2),
         "[1]: int32[] after reset, float32[] after step"),
        (JaxEnv(corridor_reset, fixed(jnp.zeros(5), lambda s: s, jnp.zeros(2), False), actions=2),
         "a reward of shape (2,)"),
        (JaxEnv(lambda k: (None, (0, 0)), corridor_step, actions=2), "observes a NoneType"),
    ],
)  # fmt: skip
def test_a_wrong_pair_is_one_config_error_naming_env(env, words):
    with pytest.raises(ConfigError) as e:
        register_env(env)
    assert e.value.field == "env" and words in str(e.value) and "\n" not in str(e.value)


def test_train_refuses_a_wrong_pair_before_anything_runs(tmp_path):
    cfg = jaxspreeze.RunConfig(logdir=str(tmp_path), run_name="bad")
    with pytest.raises(ConfigError) as e:
        jaxspreeze.train(cfg, env=JaxEnv(corridor_reset, corridor_step), quiet=True)
    assert e.value.field == "env" and not (tmp_path / "bad").exists()


# --- the run directory's record --------------------------------------------------------------


@pytest.mark.slow  # the record's other paths run by default (asked again, another spec)
def test_importable_functions_are_rebuilt_from_the_record(tmp_path):
    """``load(run)`` in a later process imports the functions the record names and
    evaluates with them; the record says how."""
    recorded_run(tmp_path, CORRIDOR)
    record = json.loads((tmp_path / "run" / jaxenv.RECORD_FILE).read_text())
    assert record["kind"] == "functions" and record["importable"] is True
    assert record["functions"]["step"] == f"{__name__}:corridor_step"
    assert record["functions"]["actions"] == 2 and record["functions"]["max_steps"] == LIMIT
    assert "imports the functions" in record["rebuild"]
    agent = jaxspreeze.load(tmp_path / "run")  # no env passed
    res = agent.evaluate(agent.cfg.env, episodes=4)
    assert res.episodes == 4 and 1 <= res.length_mean <= LIMIT


def test_functions_an_import_cannot_find_are_asked_for_again(tmp_path):
    def local_step(state, action):  # a function's locals: no import finds it
        return corridor_step(state, action)

    env = JaxEnv(corridor_reset, local_step, actions=2, max_steps=LIMIT, name="local")
    recorded_run(tmp_path, env)
    record = json.loads((tmp_path / "run" / jaxenv.RECORD_FILE).read_text())
    assert record["importable"] is False and "pass them again" in record["rebuild"]
    agent = jaxspreeze.load(tmp_path / "run")
    assert agent.predict(np.eye(5, dtype=np.float32)).shape == (5,)  # from the record alone
    with pytest.raises(UnknownEnvError, match=r"not importable.*pass it again") as e:
        agent.evaluate("jax/local", episodes=1)
    assert "\n" not in str(e.value)
    agent = jaxspreeze.load(tmp_path / "run", env=env)
    assert agent.evaluate("jax/local", episodes=2).episodes == 2


def test_a_record_whose_functions_now_give_another_spec_is_not_rebuilt(tmp_path, monkeypatch):
    recorded_run(tmp_path, CORRIDOR)
    # the module's functions changed since the run: a corridor of 6 cells
    monkeypatch.setattr(f"{__name__}.corridor_reset", lambda key: (jnp.zeros(6), (0, 0)))
    monkeypatch.setattr(f"{__name__}.corridor_step", lambda s, a: (jnp.zeros(6), s, 0.0, False))
    found = jaxenv.load_record(tmp_path / "run")
    assert found is not None and found.parts is None and "obs_shape" in found.why
    with pytest.raises(UnknownEnvError, match="another spec"):
        jaxenv.make("jax/corridor")


# --- training (slow: compiling a run takes about a minute on 2 busy cores) -------------------


@pytest.mark.slow
def test_train_a_pair_resume_it_bitwise_sweep_it_and_load_it(tmp_path):
    whole = jaxspreeze.train(tiny(tmp_path, "run", "ppo"), env=CORRIDOR, quiet=True)
    assert whole.summary["env_steps"] == 1024
    assert json.loads((whole.run_dir / "config.json").read_text())["env"] == "jax/corridor"
    shutil.rmtree(whole.run_dir / "checkpoints" / f"{1024:012d}")
    (whole.run_dir / "summary.json").unlink()
    (whole.run_dir / "policy.msgpack").unlink()
    jaxenv._ENVS.clear()  # as a later process: the pair is rebuilt from the record
    cfg = tiny(tmp_path, "run", "ppo").replace(env="jax/corridor")  # no env= this time
    resumed = jaxspreeze.train(cfg, resume=whole.run_dir, quiet=True)
    assert resumed.summary["resumed_from"] is not None
    assert leaves(resumed.state) == leaves(whole.state)
    jaxenv._ENVS.clear()
    agent = jaxspreeze.load(resumed.run_dir)  # rebuilt from the record
    assert agent.evaluate(agent.cfg.env, episodes=4).episodes == 4
    jaxenv._ENVS.clear()  # `jaxspreeze eval RUN` in a later process
    assert evaluate_checkpoint(resumed.run_dir, episodes=4)["episodes"] == 4
    swept = jaxspreeze.sweep(
        tiny(tmp_path, "sweep", "ppo"), grid={"lr": [1e-3, 3e-4]}, env=CORRIDOR, quiet=True
    )
    assert len(swept.summary["members"]) == 2
