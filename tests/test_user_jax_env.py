"""Your own JAX env, passed from Python: ``jaxspreeze.train(cfg, env=<object>)``.

The object enters :mod:`jaxspreeze.envs.jaxenv` under ``jax/<ClassName>`` and is a device
env from then on (vmapped, stepped inside the jitted chunk, reset inside its step); the
run directory records it, ``jaxspreeze.load`` predicts from the record in a later process,
and what steps the env (evaluating, resuming) asks for the object again.
"""

from __future__ import annotations

import json
import shutil
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

import jaxspreeze
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.core.errors import ConfigError, UnknownEnvError
from jaxspreeze.envs import env_spec, is_host_env, jaxenv, make_env, register_env
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import rundir

LIMIT = 12  # steps per episode at most, in every env here


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
    """Each test starts as a fresh process would: no JAX env registered."""
    monkeypatch.setattr(jaxenv, "_ENVS", {})


# --- the envs: gymnax >= 1.0 subclasses, a classic gymnax-style one, a Jumanji-style one ---


@struct.dataclass
class PosState(environment.EnvState):
    x: jax.Array


@struct.dataclass
class Params(environment.EnvParams):
    max_steps_in_episode: int = LIMIT
    goal: float = 0.0


class Reach(environment.Environment):
    """Move a point on [-1, 1] to the goal; reaching it (within 0.1) ends the episode."""

    @property
    def default_params(self) -> Params:
        return Params()

    def step_env(self, key, state, action, params):
        x = jnp.clip(state.x + 0.25 * jnp.clip(action[0], -1.0, 1.0), -1.0, 1.0)
        state = PosState(time=state.time + 1, x=x)
        reward = -jnp.abs(x - params.goal)
        terminated = jnp.abs(x - params.goal) < 0.1
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params):
        state = PosState(time=0, x=jax.random.uniform(key, (), minval=-1.0, maxval=1.0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.x, state.time / LIMIT], jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,))

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,))


class Corridor(environment.Environment):
    """Walk right (action 1) from cell 0 to cell 4 of a corridor: reward 1 there."""

    @property
    def default_params(self) -> Params:
        return Params()

    def step_env(self, key, state, action, params):
        x = jnp.clip(state.x + jnp.where(action == 1, 1, -1), 0, 4)
        state = PosState(time=state.time + 1, x=x)
        terminated = x == 4
        reward = jnp.where(terminated, 1.0, -0.01)
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params):
        state = PosState(time=0, x=jax.random.randint(key, (), 0, 2))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.x, 5)

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (5,))


class ClassicReach:
    """The classic gymnax API, without gymnax: its step resets by itself and returns
    ``(obs, state, reward, done, info)``; ``done`` includes the time limit."""

    default_params = Params()

    def step_env(self, key, state, action, params):
        time, x = state
        x = x + 0.2 * action[0] + 0.01 * jax.random.normal(key)
        done = (jnp.abs(x) < 0.1) | (time + 1 >= params.max_steps_in_episode)
        return jnp.array([x]), (time + 1, x), -jnp.abs(x), done, {"discount": 1.0 - done}

    def reset_env(self, key, params):
        x = jax.random.uniform(key, (), minval=-1.0, maxval=1.0)
        return jnp.array([x]), (jnp.int32(0), x)

    def reset(self, key, params):
        return self.reset_env(key, params)

    def step(self, key, state, action, params):
        key, key_reset = jax.random.split(key)
        obs_st, state_st, reward, done, info = self.step_env(key, state, action, params)
        obs_re, state_re = self.reset_env(key_reset, params)
        state = jax.tree.map(lambda a, b: jax.lax.select(done, a, b), state_re, state_st)
        return jax.lax.select(done, obs_re, obs_st), state, reward, done, info

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,))

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (1,))


class TimeStep(NamedTuple):
    step_type: jax.Array
    reward: jax.Array
    discount: jax.Array
    observation: jax.Array


class Spec(NamedTuple):  # Jumanji's specs.Array / BoundedArray, as far as read here
    shape: tuple
    dtype: Any
    minimum: Any = None
    maximum: Any = None


class DiscreteSpec(NamedTuple):  # Jumanji's specs.DiscreteArray
    num_values: int
    shape: tuple = ()
    dtype: Any = jnp.int32
    minimum: int = 0
    maximum: int = 2


class JumanjiWalk:
    """Jumanji's API: ``reset(key) -> (state, timestep)``, ``step(state, action)``; no
    resets of its own. Action 2 walks right, 0 left; cell 3 ends the episode (discount
    0); ``time_limit`` steps end it with discount 1."""

    time_limit = LIMIT

    def observation_spec(self):
        return Spec((2,), jnp.float32)

    @property
    def action_spec(self):
        return DiscreteSpec(3)

    def reset(self, key):
        state = (jax.random.randint(key, (), -2, 1), jnp.int32(0))
        return state, self._timestep(state, 0, 0.0, 1.0)

    def step(self, state, action):
        x, t = state
        state = (x + action - 1, t + 1)
        done = state[0] >= 3
        last = done | (state[1] >= self.time_limit)
        return state, self._timestep(
            state, jnp.where(last, 2, 1), jnp.where(done, 1.0, 0.0), jnp.where(done, 0.0, 1.0)
        )

    def _timestep(self, state, step_type, reward, discount):
        obs = jnp.array([state[0], state[1]], jnp.float32)
        return TimeStep(jnp.int32(step_type), jnp.float32(reward), jnp.float32(discount), obs)


# --- the adapters against the objects' own steps ---------------------------------------------


def rollout(env, n: int, steps: int, actions, seed: int = 0):
    """``steps`` steps of ``n`` copies through the registry's VecEnv, every output kept."""
    vec = make_env(register_env(env), n)
    key = jax.random.key(seed)
    obs, state = vec.reset(key)
    outs = []
    for t in range(steps):
        key, k = jax.random.split(key)
        out = vec.step(k, state, actions(t))
        state = out[1]
        outs.append((k, out))
    return vec, obs, outs


def test_a_gymnax_env_steps_as_its_own_step_on_the_same_keys():
    env, n = Reach(), 4
    action = lambda t: jnp.full((n, 1), 0.3 if t % 5 else -0.8)
    vec, obs, outs = rollout(env, n, 3 * LIMIT, action)
    assert vec.spec.name == "jax/Reach" and vec.spec.max_episode_steps == LIMIT
    assert not is_host_env(vec.spec.name)
    params = env.default_params
    own_obs, own = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(0), n), params)
    np.testing.assert_array_equal(obs, own_obs)
    term_seen = trunc_seen = False
    for t, (k, (obs, _, reward, term, trunc, final)) in enumerate(outs):
        step = jax.vmap(env.step, (0, 0, 0, None))
        o, own, r, te, tr, info = step(jax.random.split(k, n), own, action(t), params)
        np.testing.assert_array_equal(obs, o)
        np.testing.assert_array_equal(reward, r)
        np.testing.assert_array_equal(term, te)
        np.testing.assert_array_equal(trunc, tr & ~te)
        np.testing.assert_array_equal(final, info["final_observation"])
        term_seen, trunc_seen = term_seen or bool(te.any()), trunc_seen or bool(tr.any())
    assert term_seen and trunc_seen  # both endings happened, and were told apart


def test_a_classic_gymnax_env_keeps_its_final_observation_and_time_limit():
    """Five outputs, no info["final_observation"]: step_env and reset_env are stepped as
    the env's own step does (the same obs, state and reward), the observation before the
    reset is kept, and a done at the time limit is a truncation."""
    env, n = ClassicReach(), 3
    action = lambda t: jnp.full((n, 1), 0.05)
    _, obs, outs = rollout(env, n, 2 * LIMIT + 3, action, seed=1)
    params = env.default_params
    _, own = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(1), n), params)
    steps = np.zeros(n, int)
    ends = {"term": 0, "trunc": 0}
    for t, (k, (obs, state, reward, term, trunc, final)) in enumerate(outs):
        keys = jax.random.split(k, n)
        before = own
        o, own, r, done, _ = jax.vmap(env.step, (0, 0, 0, None))(keys, own, action(t), params)
        np.testing.assert_array_equal(obs, o)
        np.testing.assert_array_equal(reward, r)
        for got, want in zip(jax.tree.leaves(state.inner[0]), jax.tree.leaves(own), strict=True):
            np.testing.assert_array_equal(got, want)
        step_keys = jax.vmap(lambda key: jax.random.split(key)[0])(keys)
        f, *_ = jax.vmap(env.step_env, (0, 0, 0, None))(step_keys, before, action(t), params)
        np.testing.assert_array_equal(final, f)
        steps += 1
        at_limit = np.asarray(done) & (steps >= LIMIT)
        np.testing.assert_array_equal(trunc, at_limit)
        np.testing.assert_array_equal(term, np.asarray(done) & ~at_limit)
        ends["term"] += int(np.sum(term))
        ends["trunc"] += int(np.sum(trunc))
        steps[np.asarray(done)] = 0
    assert ends["trunc"] > 0


def test_a_jumanji_env_steps_through_the_adapter():
    """Reset by the shared auto-reset: a discount of 0 ends the episode (terminated), the
    time limit truncates it, and the final observation is the last one seen."""
    env, n = JumanjiWalk(), 3
    vec, obs, outs = rollout(env, n, 3 * LIMIT, lambda t: jnp.array([2, 1, 0]))
    assert vec.spec == jaxenv.entry("jax/JumanjiWalk").spec
    assert vec.spec.discrete and vec.spec.action_dim == 3 and vec.spec.obs_shape == (2,)
    x0 = np.asarray(obs[:, 0])
    assert ((-2 <= x0) & (x0 <= 0)).all() and (obs[:, 1] == 0).all()
    # env 0 walks right: it ends at cell 3 (terminated, reward 1) after 3 - x0 steps
    first_end = next(t for t, (_, out) in enumerate(outs) if out[3][0])
    assert first_end + 1 == 3 - x0[0]
    _, (_, _, reward, term, trunc, final) = outs[first_end]
    assert float(reward[0]) == 1.0 and not trunc[0] and float(final[0, 0]) == 3.0
    # env 1 stays: truncated at the time limit, its final observation the last step's
    _, (obs, _, reward, term, trunc, final) = outs[LIMIT - 1]
    assert trunc[1] and not term[1] and float(final[1, 1]) == LIMIT and float(obs[1, 1]) == 0
    assert not any(out[4][1] for _, out in outs[: LIMIT - 1])
    # env 2 walks left, away from the goal: only truncations
    assert not any(out[3][2] for _, out in outs) and sum(out[4][2] for _, out in outs) == 3


# --- wrong objects ---------------------------------------------------------------------------


class NoSpaces:
    default_params = Params()

    def reset(self, key, params):
        return jnp.zeros(2), ()

    def step(self, key, state, action, params):
        return jnp.zeros(2), (), 0.0, False, False, {"final_observation": jnp.zeros(2)}


class DictObs(NoSpaces):
    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Dict({"x": spaces.Box(0, 1, (2,))})


class MatrixAction(Reach):
    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (2, 2))


class TupleAction(Reach):
    def action_space(self, params):
        return spaces.Tuple([spaces.Discrete(2), spaces.Discrete(2)])


class BrokenStep(Reach):
    def step_env(self, key, state, action, params):
        raise ValueError("no step here\nsecond line")


class NoFinalObs(NoSpaces):
    """A classic step that resets by itself, with nothing that keeps the final observation."""

    def step(self, key, state, action, params):
        return jnp.zeros(2), (), 0.0, False, {"discount": 1.0}

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0, 1, (2,))


class DictObservation(Reach):
    def get_obs(self, state, params=None, key=None):
        return {"x": jnp.array([state.x])}


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (42, "got int, which has no reset, step, action_space"),
        (NoSpaces(), "NoSpaces, which has no action_space, observation_space"),
        (DictObs(), "observation space is a Dict"),
        (MatrixAction(), "Box of shape (2, 2)"),
        (TupleAction(), "action space is a Tuple"),
        (BrokenStep(), "step(key, state, float32[1] action, params) failed: ValueError: no step"),
        (NoFinalObs(), "no info['final_observation']"),
        (DictObservation(), "observes a dict"),
        ((Reach(), Params(), 3), "a tuple of 3"),
    ],
)
def test_a_wrong_object_is_one_config_error_naming_env(env, words):
    with pytest.raises(ConfigError) as e:
        register_env(env)
    assert e.value.field == "env" and words in str(e.value) and "\n" not in str(e.value)


def test_train_refuses_a_wrong_object_before_anything_runs(tmp_path):
    cfg = RunConfig(logdir=str(tmp_path), run_name="bad")
    with pytest.raises(ConfigError) as e:
        jaxspreeze.train(cfg, env=DictObs(), quiet=True)
    assert e.value.field == "env" and "Dict" in str(e.value)
    assert not (tmp_path / "bad").exists()


def test_params_passed_with_the_env_are_its_own_and_a_later_one_replaces_it():
    register_env(Reach())
    assert env_spec("jax/Reach").max_episode_steps == LIMIT
    assert register_env((Reach(), Params(max_steps_in_episode=7))) == "jax/Reach"
    assert env_spec("jax/Reach").max_episode_steps == 7  # not a cached spec
    vec = make_env("jax/Reach", 2)
    assert vec.spec.max_episode_steps == 7


# --- a run directory of a JAX env ------------------------------------------------------------


def recorded_run(tmp_path, env, algo: str = "ppo") -> RunConfig:
    """A run directory as a finished run on a JAX env leaves it (no training): config, the
    env's record, an untrained policy; then the registry is emptied (a new process)."""
    name = register_env(env)
    cfg = RunConfig().replace(algo=algo, env=name, logdir=str(tmp_path), run_name="run")
    run_dir = rundir.create(cfg).path
    jaxenv.save_record(run_dir, name)
    actor = jax.vmap(RunPlan.saved(cfg).make_algorithm().init)(
        jax.random.split(jax.random.key(0), 1)
    )
    save_policy(run_dir, actor.actor)
    jaxenv._ENVS.clear()
    return cfg


def test_a_recorded_run_predicts_without_the_env_and_evaluates_with_it(tmp_path):
    recorded_run(tmp_path, Corridor())
    record = json.loads((tmp_path / "run" / jaxenv.RECORD_FILE).read_text())
    assert record["name"] == "jax/Corridor" and record["kind"] == "gymnax"
    assert record["class"] == f"{__name__}:Corridor" and record["importable"] is True
    assert "pass the object again" in record["rebuild"] and record["spec"]["obs_shape"] == [5]
    agent = jaxspreeze.load(tmp_path / "run")
    assert agent.predict(np.eye(5, dtype=np.float32)).shape == (5,)
    with pytest.raises(UnknownEnvError, match=r"passed from Python.*env=obj, resume=RUN_DIR"):
        agent.evaluate("jax/Corridor", episodes=1)
    agent = jaxspreeze.load(tmp_path / "run", env=Corridor())
    res = agent.evaluate(agent.cfg.env, episodes=4)
    assert res.episodes == 4 and 1 <= res.length_mean <= LIMIT


def test_resuming_without_the_object_is_refused_naming_env(tmp_path):
    cfg = recorded_run(tmp_path, Corridor())
    with pytest.raises(ConfigError, match="pass it again from Python") as e:
        jaxspreeze.train(cfg, resume=tmp_path / "run", quiet=True)
    assert e.value.field == "env"


# --- training (slow: compiling a run takes about a minute on 2 busy cores) -------------------


def tiny(tmp_path, name: str, algo: str, **changes) -> RunConfig:
    sizes = (
        dict(num_envs=8, rollout_steps=16, batch_size=64, chunk_iterations=2, ppo={"hidden": (16, 16)})
        if algo == "ppo"
        else dict(num_envs=2, grad_steps=1, batch_size=32, learning_starts=64,
                  chunk_iterations=32, buffer_size=1000, sac={"hidden": (16, 16)})
    )  # fmt: skip
    base = dict(algo=algo, total_steps=1024, eval_every=0, checkpoint_every=512, eval_episodes=4, seed=0,
                logdir=str(tmp_path), run_name=name, sinks=("jsonl",), **sizes)  # fmt: skip
    return RunConfig().replace(**{**base, **changes})


def leaves(tree) -> list[bytes]:
    def data(x):
        return jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    return [np.asarray(data(x)).tobytes() for x in jax.tree.leaves(tree)]


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "env"), [("ppo", Corridor), ("sac", Reach)])
def test_train_a_jax_env_resume_it_bitwise_and_load_it(tmp_path, algo, env):
    """A run killed after its checkpoint half way (its newer checkpoint, summary and
    policy removed) and resumed with the object passed again ends bitwise as it did."""
    whole = jaxspreeze.train(tiny(tmp_path, "run", algo), env=env(), quiet=True)
    assert whole.summary["env_steps"] == 1024
    assert json.loads((whole.run_dir / "config.json").read_text())["env"] == f"jax/{env.__name__}"
    shutil.rmtree(whole.run_dir / "checkpoints" / f"{1024:012d}")
    (whole.run_dir / "summary.json").unlink()
    (whole.run_dir / "policy.msgpack").unlink()
    jaxenv._ENVS.clear()  # as a later process: the object is passed again
    resumed = jaxspreeze.train(
        tiny(tmp_path, "run", algo), env=env(), resume=whole.run_dir, quiet=True
    )
    assert resumed.summary["resumed_from"] is not None and resumed.summary["env_steps"] == 1024
    assert leaves(resumed.state) == leaves(whole.state)
    jaxenv._ENVS.clear()
    agent = jaxspreeze.load(resumed.run_dir)
    assert agent.predict(np.zeros((3, *agent.spec.obs_shape))).shape[0] == 3
    agent = jaxspreeze.load(resumed.run_dir, env=env())
    res = agent.evaluate(agent.cfg.env, episodes=4)
    assert res.episodes == 4 and res.length_mean <= LIMIT
