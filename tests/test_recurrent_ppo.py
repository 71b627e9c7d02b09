"""Recurrent PPO (``--ppo.memory gru|lstm``): the carry's resets, the stored start replayed
in the loss, sequence minibatches, truncation's bootstrap, the ratio at epoch one, resume,
the host workers' carries, the refusals, and the memory task (MemoryChain) it solves.

The probe env ``walk`` (as tests/test_carry.py's) terminates past 1.5 and truncates after
4 steps, so a rollout holds both kinds of episode end.
"""

from __future__ import annotations

import dataclasses
import types

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import schedules
from jaxspreeze.agent.agent import load
from jaxspreeze.algos import ppo, ppo_recurrent
from jaxspreeze.algos.base import BehaviourRollout, Sequences, episode_starts
from jaxspreeze.algos.ppo_config import PPOConfig
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition, reset_carry
from jaxspreeze.data.rollout import env_init, rollout
from jaxspreeze.envs import VecEnv, auto_reset
from jaxspreeze.host import hostenvs
from jaxspreeze.host.workers import ParamSlot, WorkerPool
from jaxspreeze.run.trainer import train
from jaxspreeze.schedules.iteration import Iteration
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint


def walk_env(num_envs: int) -> VecEnv:
    """obs = [position]: starts in [0, 1), walks 0.25 a step; terminates past 1.5, is
    truncated after 4 steps; reward = the action."""

    def reset(key):
        x = jax.random.uniform(key, (1,))
        return x, x

    def step(x, action):
        x = x + 0.25
        return x, x, action[0], x[0] > 1.5

    spec = EnvSpec("toy/walk", (1,), False, 1, (-1.0,), (1.0,), 4)
    parts = auto_reset(reset, step, 4)
    return VecEnv(
        spec, num_envs, parts.reset_one, parts.step_batch,
        step_batch_no_reset=parts.step_batch_no_reset,
    )  # fmt: skip


def recurrent(spec: EnvSpec, n: int, t: int, batch: int, memory: str = "gru", **ppo_kw):
    """Recurrent PPO for ``n`` envs x ``t`` steps in minibatches of ``batch``: (algo, learner)."""
    cfg = PPOConfig(memory=memory, memory_size=8, hidden=(16,), policy="clipped", **ppo_kw)
    run = types.SimpleNamespace(num_envs=n, rollout_steps=t, batch_size=batch, total_steps=10**6)
    algo = ppo.make(cfg, spec, run)
    return algo, algo.init.__self__


def leaves_equal(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = (jax.random.key_data(v) if jnp.issubdtype(v.dtype, jax.dtypes.prng_key) else v
                for v in (x, y))  # fmt: skip
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def stepped_rollout(env: VecEnv, algo, actor, steps: int, seed: int = 0):
    """``steps`` one-step rollouts: the carry each step acted with ``[T]`` (from the env
    carry), the rollout's start and the transitions ``[T, N]``."""
    initial = algo.initial_carry(env.num_envs)
    policy = lambda c, obs, k: algo.act(actor, c, obs, k, False)
    one = jax.jit(lambda c, k: rollout(env, policy, c, k, 1, initial))
    carry = env_init(env, jax.random.key(seed), initial)
    start, acted, trajs = carry.policy, [], []
    for key in jax.random.split(jax.random.key(seed + 1), steps):
        acted.append(carry.policy)
        carry, traj, _ = one(carry, key)
        trajs.append(traj)
    traj = jax.tree.map(lambda *x: jnp.concatenate(x), *trajs)
    return acted, start, traj


# ------------------------------------------------------------------ the carry's resets
@pytest.mark.parametrize("memory", ["gru", "lstm"])
def test_the_carry_is_initial_at_each_first_observation_and_the_loss_replays_it(memory):
    """Device rollout on the probe env: the carry a step acts with is the initial one where
    the previous step ended an episode (a termination or a truncation) and not otherwise;
    the policy batch's sequence starts, reset where their first step starts an episode,
    are the carries the rollout acted with there (the rollout's stored start for the
    first)."""
    env = walk_env(4)
    algo, learner = recurrent(env.spec, 4, 8, 16, memory, recurrent_chunk=2)
    agent = algo.init(jax.random.key(0))
    acted, start, traj = stepped_rollout(env, algo, agent.actor, 8)
    done = np.asarray(traj.terminated | traj.truncated)
    assert np.asarray(traj.terminated).any() and np.asarray(traj.truncated).any()
    zero = algo.initial_carry(4)
    for t in range(1, 8):
        for row in range(4):
            is_zero = all(
                np.array_equal(np.asarray(c)[row], np.asarray(z)[row])
                for c, z in zip(jax.tree.leaves(acted[t]), jax.tree.leaves(zero), strict=True)
            )
            assert is_zero == bool(done[t - 1, row]), (t, row)
    # the loss's replay: sequence k of env n starts at step 2k
    view = ppo.critic_view(agent.critic)
    batch = learner.policy_batch(agent.actor, view, Sequences(traj, start), jax.random.key(2))
    initial = algo.initial_carry(16)[0]  # the actor cell's
    replayed = reset_carry(batch.start, initial, batch.resets[0])
    actor_part = lambda c: c[0]
    for k in range(4):
        want = actor_part(acted[2 * k])
        got = jax.tree.map(lambda c: c[k * 4 : (k + 1) * 4], replayed)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-6)
    leaves_equal(actor_part(start), jax.tree.map(lambda c: c[:4], batch.start))


def test_collect_stores_the_carry_the_rollout_started_from():
    """Iteration.collect: ``Collected.start`` is the env carry's policy carry before the
    rollout, and the phases get it with the rollout (:class:`Sequences`)."""
    env = walk_env(2)
    algo, _ = recurrent(env.spec, 2, 3, 6)
    it = Iteration(algo, env, rollout_steps=3, buffer_size=0, warmup_steps=0)
    s = it.init(jax.random.key(0))
    env1, *_ = it.collect(*s.to_collect())
    env2, _, _, _, c, _ = it.collect(s.agent.actor, env1, *s.to_collect()[2:])
    leaves_equal(c.start, env1.policy)
    data = it.rollout_data(c)
    assert isinstance(data, Sequences)
    leaves_equal(data.start, env1.policy)
    assert not np.array_equal(np.asarray(env2.policy[0]), np.asarray(env1.policy[0]))


def test_truncation_resets_the_cell_but_bootstraps_from_the_final_observation():
    """One env, three steps, the middle one truncated: by hand, the value target of step 1
    bootstraps from V of its final observation read by the cell that continues the
    episode, and step 2's value reads a fresh cell."""
    env = walk_env(1)
    algo, learner = recurrent(env.spec, 1, 3, 3)
    critic = algo.init(jax.random.key(0)).critic
    net, p = learner.value_net, critic.params
    obs = jnp.array([[[0.1]], [[0.4]], [[0.2]]])
    final = jnp.array([[0.9]])
    next_obs = jnp.stack([obs[1], final, jnp.array([[0.45]])])
    reward = jnp.array([[1.0], [2.0], [3.0]])
    truncated = jnp.array([[False], [True], [False]])
    traj = Transition(
        obs, jnp.zeros((3, 1, 1)), reward, jnp.zeros_like(truncated), truncated, next_obs
    )
    resets = episode_starts(traj)
    np.testing.assert_array_equal(resets[:, 0], [False, False, True])
    start = net.initialize_carry(1)
    # by hand: step by step with the network's one-step path
    c0, v0 = ppo_recurrent.step(net, p, start, obs[0])
    c1, v1 = ppo_recurrent.step(net, p, c0, obs[1])
    _, v_final = ppo_recurrent.step(net, p, c1, final)  # the episode's cell, continued
    _, v2 = ppo_recurrent.step(net, p, net.initialize_carry(1), obs[2])  # a fresh cell
    view = ppo.CriticView(p, jnp.float32(0.9), jnp.float32(0.0), jnp.float32(1.0))
    stats = algo.init(jax.random.key(0)).actor.obs_stats
    adv, returns, _ = learner.seq_advantages(view, stats, traj, start, resets)
    np.testing.assert_allclose(returns[1, 0] - adv[1, 0], v1[0], atol=1e-6)
    np.testing.assert_allclose(returns[1, 0], 2.0 + 0.9 * v_final[0], atol=1e-6)
    np.testing.assert_allclose(returns[2, 0] - adv[2, 0], v2[0], atol=1e-6)
    np.testing.assert_allclose(returns[0, 0] - adv[0, 0], v0[0], atol=1e-6)


# ------------------------------------------------------------------ sequences
def test_a_sequence_minibatch_keeps_each_envs_steps_in_order():
    T, N, L = 8, 3, 4
    x = jnp.asarray(100 * np.arange(N)[None, :] + np.arange(T)[:, None])  # [T, N]
    seq = ppo_recurrent.sequences(x, L)
    assert seq.shape == (L, (T // L) * N)
    for s in range(seq.shape[1]):
        k, n = divmod(s, N)
        np.testing.assert_array_equal(seq[:, s], 100 * n + np.arange(k * L, (k + 1) * L))
    carries = x[..., None] + 0.5  # the carry after each step
    starts = ppo_recurrent.chunk_starts(-jnp.ones((N, 1)), carries, L)
    np.testing.assert_array_equal(starts[:N, 0], -1)  # the rollout's start
    np.testing.assert_array_equal(starts[N:, 0], 100 * np.arange(N) + L - 1 + 0.5)
    batch = ppo_recurrent.SeqValueBatch(seq, seq, jnp.zeros_like(seq, bool), starts)
    idx = jnp.array([4, 1])
    picked = ppo_recurrent.pick(batch, idx)
    np.testing.assert_array_equal(picked.obs, seq[:, idx])
    np.testing.assert_array_equal(picked.start, starts[idx])
    assert np.all(np.diff(np.asarray(picked.obs), axis=0) == 1)  # time order kept


def test_the_recurrent_loss_at_epoch_one_equals_the_rollouts_log_probabilities():
    """The device path's old log-probabilities are the actor's replay of the rollout, the
    host path's the behaviour policy's as it acted step by step: at the first minibatch of
    the first epoch the ratio is 1 (no clipping, no KL)."""
    env = walk_env(4)
    algo, learner = recurrent(env.spec, 4, 8, 32, ent_coef=0.0, epochs=1)
    agent = algo.init(jax.random.key(0))
    acted, start, traj = stepped_rollout(env, algo, agent.actor, 8)
    view = ppo.critic_view(agent.critic)
    # device: the batch's old log-probs against the loss's at the parameters that acted
    batch = learner.policy_batch(agent.actor, view, Sequences(traj, start), jax.random.key(3))
    _, out, _ = learner.policy.net.apply(agent.actor.params, batch.start, batch.obs, batch.resets)
    logp, _ = learner.policy.log_prob_entropy_out(out, batch.action.reshape(-1, 1))
    np.testing.assert_array_equal(np.asarray(logp), np.asarray(batch.old_logp.reshape(-1)))
    # host: the behaviour policy's step-by-step log-probs (and carries) as the extras
    carry, rows, extras = start, [], []
    for t in range(8):
        carry = acted[t]
        action, ex, _ = algo.behaviour(agent.actor, carry, traj.obs[t], jax.random.key(t))
        rows.append(action)
        extras.append(ex)
    extras = jax.tree.map(lambda *x: jnp.stack(x), *extras)
    host_traj = traj._replace(action=jnp.stack(rows))
    host = BehaviourRollout(host_traj, extras)
    hb = learner.policy_batch(agent.actor, view, host, jax.random.key(3))
    _, out, _ = learner.policy.net.apply(agent.actor.params, hb.start, hb.obs, hb.resets)
    logp, _ = learner.policy.log_prob_entropy_out(out, hb.action.reshape(-1, 1))
    np.testing.assert_allclose(np.exp(logp - hb.old_logp.reshape(-1)), 1.0, atol=1e-5)
    _, metrics = learner.actor_phase(agent.actor, view, host, jax.random.key(4))
    assert float(metrics["clip_frac"]) == 0.0 and abs(float(metrics["approx_kl"])) < 1e-8


# ------------------------------------------------------------------ runs
def memory_chain(memory: str, **changes) -> RunConfig:
    """The preset's sizes on MemoryChain (jaxspreeze/presets/ppo_memory_chain.toml)."""
    base = dict(
        algo="ppo", env="gymnax/MemoryChain-bsuite", total_steps=30_000, num_envs=16,
        rollout_steps=32, batch_size=128, chunk_iterations=20, placement="single", sinks=(),
        eval_episodes=64,
    )  # fmt: skip
    base.update(changes)
    ppo_cfg = PPOConfig(
        memory=memory, memory_size=32, hidden=(32,), lr=3e-3, epochs=4, ent_coef=0.01
    )
    return RunConfig(**base, ppo=ppo_cfg)


@pytest.mark.slow
def test_recurrent_ppo_solves_memory_chain_and_feed_forward_does_not(tmp_path):
    """Two seeds each at the preset's budget: a GRU scores about 1 (the cue remembered for
    the whole episode); feed-forward PPO stays at chance (0)."""
    runs = {}
    for memory in ("gru", "none"):
        cfg = memory_chain(memory, num_seeds=2, logdir=str(tmp_path), run_name=memory)
        runs[memory] = train(cfg, quiet=True).summary["final_eval_return_per_seed"]
    assert min(runs["gru"]) >= 0.9, runs
    assert max(abs(r) for r in runs["none"]) < 0.3, runs


def test_a_resume_mid_run_with_a_carry_is_bitwise(tmp_path):
    """Chunk A, save, chunk B == restore into a fresh state, chunk B: the cells' carries
    are in the checkpoint (the env carry) and the run continues bitwise."""
    cfg = resolve(memory_chain("lstm", total_steps=2048, num_envs=4, rollout_steps=8,
                               batch_size=16, chunk_iterations=2, num_seeds=2))  # fmt: skip
    schedule = schedules.make(plan(cfg, devices.single()))
    state_a, _ = schedule.chunk(schedule.init())
    assert any(np.asarray(x).any() for x in jax.tree.leaves(state_a.env.policy))
    path = checkpoint.save(tmp_path, state_a, env_steps=64, chunk=0, config=cfg)
    carry_a = jax.device_get(state_a.env.policy)
    state_b, _ = schedule.chunk(state_a)  # state_a is donated
    restored, _ = checkpoint.restore(path, schedule.init())
    leaves_equal(restored.env.policy, carry_a)
    resumed, _ = schedule.chunk(restored)
    leaves_equal(resumed, state_b)
    restored, _ = checkpoint.restore(path, schedule.init())
    forgot = restored._replace(
        env=restored.env._replace(policy=jax.tree.map(jnp.zeros_like, restored.env.policy))
    )
    other, _ = schedule.chunk(forgot)
    assert not np.array_equal(
        np.asarray(other.agent.actor.params["params"]["memory"]["cell"]["cell"]["ii"]["kernel"]),
        np.asarray(state_b.agent.actor.params["params"]["memory"]["cell"]["cell"]["ii"]["kernel"]),
    )


@pytest.mark.slow
def test_a_trained_recurrent_policy_evaluates_and_predicts_with_its_state(tmp_path):
    """train() (its evaluations too), then ``Agent.predict``: ``(action, state)`` where the
    state is both cells' carry, the actor's a hand step's and reset at ``episode_start``."""
    cfg = memory_chain("gru", total_steps=1024, num_envs=4, rollout_steps=8, batch_size=16,
                       chunk_iterations=4, logdir=str(tmp_path), run_name="r", eval_episodes=4)  # fmt: skip
    result = train(cfg, quiet=True)
    assert result.summary["final_eval_return"] is not None
    agent = load(result.run_dir)
    assert agent.has_memory
    obs = np.zeros((2, 3), np.float32)
    obs[:, 0] = 1.0
    action, state = agent.predict(obs, None, deterministic=True)
    assert action.shape == (2,) and state[0].shape == (2, 32)
    assert np.abs(np.asarray(state[0])).sum() > 0
    _, again = agent.predict(obs, state, np.array([True, False]), deterministic=True)
    _, fresh = agent.predict(obs, None, deterministic=True)
    np.testing.assert_allclose(np.asarray(again[0][0]), np.asarray(fresh[0][0]), atol=1e-6)
    assert not np.allclose(np.asarray(again[0][1]), np.asarray(fresh[0][1]))


# ------------------------------------------------------------------ host envs
class Cue(gym.Env):
    """obs = [step, cue at step 0 only]; episodes of 3 steps (terminated)."""

    observation_space = gym.spaces.Box(-1, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.cue = 0, float(self.np_random.integers(2) * 2 - 1)
        return np.array([0.0, self.cue], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, 0.0], np.float32)
        return obs, float(action == (self.cue > 0)), self.t == 3, False, {}


def test_host_workers_per_env_states_are_a_hand_loops(tmp_path):
    """A host worker's rows carry the cells' state each env acted with: a hand loop over
    the delivered observations (one cell step each, restarting after every episode end)
    gives the same states."""
    entry = hostenvs.register_user_env(lambda: gym.wrappers.TimeLimit(Cue(), 2))
    algo, learner = recurrent(entry.spec, 3, 5, 15)
    actor = algo.init(jax.random.key(0)).actor
    slot = ParamSlot()
    slot.publish(actor, 0)
    vec = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(Cue(), 2)] * 3)
    pool = WorkerPool(
        [hostenvs.make_host_env(vec, 3)],
        lambda params, carry, obs, key: algo.behaviour(params, carry, obs, key),
        slot, rollout_steps=5, initial_carry=algo.initial_carry,
    )  # fmt: skip
    with pool:
        batches = [pool.get(timeout=60) for _ in range(3)]
    carry = algo.initial_carry(3)
    step = jax.jit(lambda c, o: learner.step(actor, c, o, False)[1])
    for b in batches:
        tr = b.transition
        assert tr.truncated.any()
        for t in range(5):
            got = ppo_recurrent.carry_from_extras(
                {k: v[t : t + 1] for k, v in b.extras.items()}, carry
            )
            for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(carry), strict=True):
                np.testing.assert_allclose(g, np.asarray(w), atol=1e-6)
            carry = step(carry, jnp.asarray(tr.obs[t]))
            carry = reset_carry(
                carry, algo.initial_carry(3), jnp.asarray(tr.terminated[t] | tr.truncated[t])
            )


@pytest.mark.slow
def test_a_host_recurrent_run_trains(tmp_path):
    """train() on a host env with --ppo.memory gru (the rollout host schedule): the update
    replays each rollout from the carries its first row acted with; finite losses."""
    cfg = RunConfig(
        algo="ppo", env="user/Cue", num_envs=4, rollout_steps=6, batch_size=12,
        total_steps=96, chunk_iterations=2, eval_episodes=2, logdir=str(tmp_path),
        run_name="host", sinks=(), ppo=PPOConfig(memory="gru", memory_size=8, hidden=(8,)),
    )  # fmt: skip
    result = train(cfg, quiet=True, env=lambda: gym.wrappers.TimeLimit(Cue(), 10))
    assert result.summary["final_eval_return"] is not None
    assert result.summary["env_steps"] >= 96


# ------------------------------------------------------------------ config
def test_feed_forward_ppo_builds_todays_learner():
    env = walk_env(2)
    cfg = PPOConfig(policy="clipped")
    run = types.SimpleNamespace(num_envs=2, rollout_steps=4, batch_size=8, total_steps=100)
    algo = ppo.make(cfg, env.spec, run)
    assert type(algo.init.__self__) is ppo.Learner and not algo.has_memory
    assert algo.initial_carry(3) == ()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (dict(ppo=PPOConfig(memory="rnn")), "ppo.memory"),
        (dict(ppo=PPOConfig(memory="gru", memory_size=0)), "ppo.memory_size"),
        (dict(ppo=PPOConfig(memory="gru", recurrent_chunk=-1)), "ppo.recurrent_chunk"),
        (dict(ppo=PPOConfig(memory="gru", recurrent_chunk=5)), "ppo.recurrent_chunk"),
        (dict(ppo=PPOConfig(memory="gru", recurrent_chunk=16), batch_size=8), "batch_size"),
        (dict(ppo=PPOConfig(memory="gru"), placement="split"), "ppo.memory"),
        (dict(ppo=PPOConfig(memory="lstm"), placement="data"), "ppo.memory"),
    ],
)
def test_bad_recurrent_settings_are_refused_naming_the_field(changes, field):
    base = dict(algo="ppo", env="gymnax/CartPole-v1", num_envs=4, rollout_steps=32,
                batch_size=64)  # fmt: skip
    cfg = RunConfig(**{**base, **changes})
    with pytest.raises(ConfigError) as e:
        plan(cfg, on_devices=False)
    assert e.value.field == field


def test_auto_placement_on_two_devices_runs_a_recurrent_policy_on_one():
    cfg = memory_chain("gru", placement="auto")
    planned = plan(cfg, on_devices=False)
    cpu = jax.devices()[0]
    split = dataclasses.replace(devices.single(cpu), critic="a second device")  # auto's split
    placed = planned.placed(split)
    assert placed.schedule == "fused" and placed.placement.critic == cpu
    ff = plan(memory_chain("none", placement="auto"), on_devices=False)
    assert ff.placed(split).schedule == "split"  # feed-forward PPO still splits
