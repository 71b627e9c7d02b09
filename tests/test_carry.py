"""The policy's carry (a recurrent policy's state between steps) through every path that
steps envs: the device rollout, the evaluations, a checkpoint and its resume, the trainer,
``Agent.predict`` and the host sampling workers.

The toy policy's carry counts the steps since its episode started and its action reads
it, so each path's carry is checked against a hand count, reset at every episode's first
step (after terminations and after truncations). The toy trains through ``train()`` in
the place of PPO in the registry (monkeypatched: ``_SPECS`` and ``_BY_NAME``, never the
package's own list).
"""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos, schedules
from jaxspreeze.agent.agent import load
from jaxspreeze.agent.evaluate import make_evaluate, make_host_evaluate, make_seed_evaluate
from jaxspreeze.algos.base import AgentState, Algorithm, BehaviourRollout
from jaxspreeze.core.types import EnvSpec, reset_carry
from jaxspreeze.data.rollout import env_init, rollout
from jaxspreeze.envs import VecEnv, auto_reset
from jaxspreeze.host import hostenvs
from jaxspreeze.host.workers import ParamSlot, WorkerPool
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

ACTOR = {"w": jnp.float32(1.0)}


# ------------------------------------------------------------------ the toy policy
def counting(spec: EnvSpec) -> Algorithm:
    """A policy with memory: the carry counts the steps since the episode started.

    Its action reads the count: ``w * count / 1000`` in every dimension (continuous), or
    1 from the episode's 5th step on (discrete). It learns nothing; its actor phase reports
    how often the count a host worker acted with equals the env's own step counter (the
    observation of :class:`StepCounter`).
    """

    def act(actor, carry, obs, key, deterministic):
        if spec.discrete:
            action = (carry >= 4).astype(jnp.int32)
        else:
            count = (actor["w"] * carry / 1000.0).astype(jnp.float32)
            action = jnp.broadcast_to(count[:, None], (obs.shape[0], spec.action_dim))
        return action, carry + 1

    def behaviour(actor, carry, obs, key):
        action, new = act(actor, carry, obs, key, False)
        return action, {"count": carry}, new

    def actor_phase(actor, view, data, key):
        metrics = {"finite": jnp.float32(1.0)}
        if isinstance(data, BehaviourRollout):
            same = data.extras["count"] == data.traj.obs[..., 0].astype(jnp.int32)
            metrics["count_is_obs"] = same.mean()
        return actor, metrics

    return Algorithm(
        name="ppo",
        on_policy=True,
        init=lambda key: AgentState(dict(ACTOR), {"v": jnp.zeros(())}),
        act=act,
        actor_view=lambda actor: (),
        critic_view=lambda critic: (),
        critic_phase=lambda critic, view, data, key: (critic, {"finite": jnp.float32(1.0)}),
        actor_phase=actor_phase,
        actor_steps_per_iteration=1,
        critic_steps_per_iteration=1,
        behaviour=behaviour,
        initial_carry=lambda n: jnp.zeros((n,), jnp.int32),
    )


@pytest.fixture
def toy(monkeypatch):
    """The registry with the toy in PPO's place (PPO's config section, the toy's maths)."""
    spec = dataclasses.replace(
        algos.get("ppo"),
        validate=lambda cfg, prefix, run: None,
        supports=lambda env_spec: None,
        member_fields={},
    )
    # the maths: this spec's own make (shadows the method that imports PPO's module)
    object.__setattr__(spec, "make", lambda cfg, env_spec, run: counting(env_spec))
    monkeypatch.setattr(
        algos, "_SPECS", tuple(spec if s.name == "ppo" else s for s in algos._SPECS)
    )
    monkeypatch.setitem(algos._BY_NAME, "ppo", spec)
    return spec


def walk_env(num_envs: int) -> VecEnv:
    """obs = [position]: it starts in [0, 1) and walks 0.25 a step; past 1.5 the episode
    terminates, after 4 steps it is truncated (episodes of 3 or 4 steps, both ends);
    reward = the action, so a return sums the counts the policy acted with."""

    def reset(key):
        x = jax.random.uniform(key, (1,))
        return x, x

    def step(x, action):
        x = x + 0.25
        return x, x, action[0], x[0] > 1.5

    spec = EnvSpec("toy/walk", (1,), False, 1, (-1.0,), (1.0,), 4)
    parts = auto_reset(reset, step, 4)
    return VecEnv(
        spec,
        num_envs,
        parts.reset_one,
        parts.step_batch,
        step_batch_no_reset=parts.step_batch_no_reset,
    )


# ------------------------------------------------------------------ the contract
def test_reset_carry_sets_the_rows_where_episodes_start_on_device_and_host():
    carry = {"h": jnp.arange(6.0).reshape(3, 2), "n": jnp.array([5, 6, 7])}
    initial = jax.tree.map(jnp.zeros_like, carry)
    starts = np.array([False, True, False])
    out = jax.jit(reset_carry)(carry, initial, jnp.asarray(starts))
    np.testing.assert_array_equal(out["h"], [[0, 1], [0, 0], [4, 5]])
    np.testing.assert_array_equal(out["n"], [5, 0, 7])
    host = reset_carry(jax.device_get(carry), jax.device_get(initial), starts)
    assert isinstance(host["h"], np.ndarray)
    np.testing.assert_array_equal(host["n"], [5, 0, 7])
    assert reset_carry((), (), starts) == ()


@pytest.mark.parametrize("name", ["sac", "ppo"])
def test_a_feed_forward_policy_has_an_empty_carry_and_acts_as_its_stateless_act(name):
    """Feed-forward: carry ``()``, and the program is the stateless one's, bitwise."""
    cfg = resolve(RunConfig(algo=name, env="gymnax/Pendulum-v1", num_envs=4))
    algo = plan(cfg, on_devices=False).make_algorithm()
    assert algo.initial_carry(4) == () and not algo.has_memory
    actor = algo.init(jax.random.key(0)).actor
    obs = jax.random.normal(jax.random.key(1), (4, 3))
    action, carry = jax.jit(algo.act, static_argnums=4)(actor, (), obs, jax.random.key(2), False)
    assert carry == ()
    inner = algo.act.__closure__[0].cell_contents  # feed_forward's stateless act
    want = jax.jit(inner, static_argnums=3)(actor, obs, jax.random.key(2), False)
    np.testing.assert_array_equal(action, want)
    # the same program: an empty carry adds nothing to it
    with_carry = jax.jit(lambda a, o, k: algo.act(a, (), o, k, False))
    stateless = jax.jit(lambda a, o, k: (inner(a, o, k, False), ()))
    args = (actor, obs, jax.random.key(2))
    assert with_carry.lower(*args).as_text() == stateless.lower(*args).as_text()


# ------------------------------------------------------------------ the device paths
def test_the_rollout_carry_counts_steps_since_each_episode_start_across_chunks():
    """Two rollouts in a row (the carry crosses them in the env carry) against a hand count
    reset after every termination and truncation; the count is the env's episode length."""
    env = walk_env(6)
    algo = counting(env.spec)
    policy = lambda c, obs, k: algo.act(ACTOR, c, obs, k, False)
    run = jax.jit(lambda c, k: rollout(env, policy, c, k, 10, algo.initial_carry(6)))
    carry = env_init(env, jax.random.key(0), algo.initial_carry(6))
    count = np.zeros(6, np.int64)
    terminated = truncated = 0
    for key in jax.random.split(jax.random.key(1), 2):
        carry, traj, _ = run(carry, key)
        for t in range(10):
            np.testing.assert_allclose(traj.action[t, :, 0], count / 1000, rtol=1e-6)
            terminated += int(traj.terminated[t].sum())
            truncated += int(traj.truncated[t].sum())
            count = np.where(traj.terminated[t] | traj.truncated[t], 0, count + 1)
        np.testing.assert_array_equal(carry.policy, count)
        np.testing.assert_array_equal(carry.policy, carry.env_state.episode_length)
    assert terminated > 0 and truncated > 0


def test_the_evaluation_starts_each_episode_from_the_initial_carry():
    """Reward = count / 1000: an episode of L steps returns L (L - 1) / 2000 when its
    count starts at 0 (episodes of 3 or 4 steps: a mean of (6 L_mean - 12) / 2000)."""
    env = walk_env(8)
    algo = counting(env.spec)
    res = jax.jit(make_evaluate(algo, env))(ACTOR, jax.random.key(3))
    assert 3 <= float(res.length_mean) <= 4
    np.testing.assert_allclose(res.return_mean, (6 * res.length_mean - 12) / 2000, rtol=1e-5)
    seeds = jax.tree.map(lambda x: jnp.stack([x, x]), ACTOR)
    keys = jax.random.split(jax.random.key(3), 2)
    both = make_seed_evaluate(algo, env, keys)(seeds)
    np.testing.assert_allclose(both.return_mean, (6 * both.length_mean - 12) / 2000, rtol=1e-5)


def cartpole_toy(**changes) -> RunConfig:
    """The toy in PPO's place on gymnax CartPole (it falls within about 10 steps)."""
    base = dict(
        algo="ppo",
        env="gymnax/CartPole-v1",
        num_envs=3,
        rollout_steps=8,
        batch_size=24,
        total_steps=96,
        chunk_iterations=2,
        num_seeds=2,
        eval_episodes=2,
        sinks=(),
    )
    return resolve(RunConfig(**{**base, **changes}))


def test_the_carry_is_in_the_checkpoint_and_a_resume_is_bitwise(toy, tmp_path):
    """Chunk A, save, chunk B == restore into a fresh state, chunk B; the carry counts the
    episode's steps; restoring without it (the initial carry) acts otherwise."""
    cfg = cartpole_toy()
    schedule = schedules.make(plan(cfg, devices.single()))
    state_a, _ = schedule.chunk(schedule.init())
    counts = np.asarray(state_a.env.policy)
    np.testing.assert_array_equal(counts, state_a.env.env_state.episode_length)
    assert counts.shape == (2, 3) and counts.any()
    path = checkpoint.save(tmp_path, state_a, env_steps=48, chunk=0, config=cfg)
    assert any(e["path"] == ".env.policy" for e in checkpoint.read_manifest(path)["leaves"])
    state_b, _ = schedule.chunk(state_a)
    restored, _ = checkpoint.restore(path, schedule.init())
    np.testing.assert_array_equal(restored.env.policy, counts)
    resumed, _ = schedule.chunk(restored)
    for x, y in zip(jax.tree.leaves(resumed), jax.tree.leaves(state_b), strict=True):
        x, y = (jax.random.key_data(v) if jnp.issubdtype(v.dtype, jax.dtypes.prng_key) else v
                for v in (x, y))  # fmt: skip
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(state_b.env.policy, state_b.env.env_state.episode_length)
    restored, _ = checkpoint.restore(path, schedule.init())
    forgot = restored._replace(env=restored.env._replace(policy=jnp.zeros_like(counts)))
    other, _ = schedule.chunk(forgot)
    assert not np.array_equal(np.asarray(other.env.obs), np.asarray(state_b.env.obs))


def test_a_trained_policy_with_memory_predicts_with_its_state(toy, tmp_path):
    """train() with the toy (its evaluator too), then ``Agent.predict``: ``(action,
    state)``, the state a hand count reset where ``episode_start`` says."""
    cfg = cartpole_toy(logdir=str(tmp_path), run_name="toy", sinks=("jsonl",), num_seeds=1)
    result = train(cfg, quiet=True)
    np.testing.assert_array_equal(
        result.state.env.policy, result.state.env.env_state.episode_length
    )
    assert result.summary["final_eval_return"] is not None  # the evaluator acted with it
    agent = load(result.run_dir)
    assert agent.has_memory
    obs = np.zeros((3, 4), np.float32)
    state, count = None, np.zeros(3, np.int64)
    starts = [None, None, [False, True, False], None, None, True, None, None]
    for start in starts:
        if start is not None:
            count = np.where(np.broadcast_to(start, (3,)), 0, count)
        action, state = agent.predict(obs, state, start)
        np.testing.assert_array_equal(action, (count >= 4).astype(np.int32))
        count = count + 1
        np.testing.assert_array_equal(state, count)
    action, one = agent.predict(obs[0], None)
    assert action.shape == () and one.shape == (1,) and int(one[0]) == 1
    with pytest.raises(ValueError, match="rows"):
        agent.predict(obs[:2], state)
    ev = agent.evaluate("gymnax/CartPole-v1", episodes=2)
    assert ev.length_mean > 4


# ------------------------------------------------------------------ the host paths
class StepCounter(gym.Env):
    """obs = [steps since the episode started]; terminates at step ``stop`` (None: never);
    reward = the action."""

    observation_space = gym.spaces.Box(0, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, stop: int | None = None):
        self.t, self.stop = 0, stop

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t == self.stop
        return np.array([self.t], np.float32), float(action[0]), done, False, {}


def counters(n: int = 4) -> list:
    """Factories: even envs terminate at step 3, odd ones are truncated at 4."""
    return [
        lambda i=i: gym.wrappers.TimeLimit(StepCounter(3 if i % 2 == 0 else None), 4)
        for i in range(n)
    ]


def _host_policy(algo: Algorithm):
    return lambda params, carry, obs, key: algo.behaviour(params, carry, obs, key)


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_host_workers_keep_each_envs_carry_and_reset_it_at_episode_starts(mode):
    """Every row a worker delivers acted with the count of the env's own step counter:
    reset after terminations and truncations, with same-step or next-step resets (the
    reset rows of the latter dropped)."""
    spec = EnvSpec("user/StepCounter", (1,), False, 1, (-1.0,), (1.0,), 4)
    algo = counting(spec)
    autoreset = getattr(gym.vector.AutoresetMode, mode.upper())
    vecs = [gym.vector.SyncVectorEnv(counters(), autoreset_mode=autoreset) for _ in range(2)]
    slot = ParamSlot()
    slot.publish(ACTOR, 0)
    envs = [hostenvs.make_host_env(v, 4) for v in vecs]
    pool = WorkerPool(
        envs, _host_policy(algo), slot, rollout_steps=5, initial_carry=algo.initial_carry
    )
    with pool:
        batches = [pool.get(timeout=60) for _ in range(6)]
    tr = np.stack([b.transition.terminated for b in batches])
    assert tr.any() and np.stack([b.transition.truncated for b in batches]).any()
    for b in batches:
        np.testing.assert_array_equal(b.extras["count"], b.transition.obs[..., 0])
        np.testing.assert_allclose(b.transition.action[..., 0], b.extras["count"] / 1000)
    assert {int(c) for b in batches for c in b.extras["count"].ravel()} == {0, 1, 2, 3}


def test_host_evaluation_starts_each_episode_from_the_initial_carry():
    """Episodes of 3 steps (terminated) return (0 + 1 + 2) / 1000."""
    entry = hostenvs.register_user_env(lambda: gym.wrappers.TimeLimit(StepCounter(3), 10))
    algo = counting(entry.spec)
    seeds = jax.tree.map(lambda x: x[None], ACTOR)
    res = make_host_evaluate(algo, entry.name, episodes=3, seed=0)(seeds)
    np.testing.assert_allclose(res.length_mean, [3.0])
    np.testing.assert_allclose(res.return_mean, [0.003], rtol=1e-6)


def test_the_host_schedule_acts_with_each_envs_count(toy, tmp_path):
    """train() on a host env with the toy in PPO's place (the rollout host schedule): every
    row of every rollout acted with the env's own step count (the toy's actor phase
    reports it)."""
    made = iter(range(1000))
    factory = lambda: counters(2)[next(made) % 2]()  # terminations and truncations
    cfg = RunConfig(
        algo="ppo",
        env="user/StepCounter",
        num_envs=4,
        rollout_steps=8,
        batch_size=32,
        total_steps=128,
        chunk_iterations=2,
        eval_episodes=2,
        logdir=str(tmp_path),
        run_name="host",
        sinks=("jsonl",),
    )
    result = train(cfg, quiet=True, env=factory)
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    matches = [r["count_is_obs"] for r in rows if "count_is_obs" in r]
    assert matches and all(m == 1.0 for m in matches)
