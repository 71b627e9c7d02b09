"""Recurrent PQN (``--pqn.memory gru|lstm``, ``--pqn.last-action``): the carry's resets
(the cell's and the previous action's), the stored start replayed in the loss, the loss's
Q-values at epoch one against those acting computed, a truncation's bootstrap, resume
with a carry, the refusals, and the memory task (MemoryChain) it solves.

The probe env ``walk`` terminates past 1.5 and truncates after 4 steps, so a rollout
holds both kinds of episode end; its two actions do not move it (the reward is the
action).
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_recurrent_ppo import leaves_equal, stepped_rollout

from jaxspreeze import schedules
from jaxspreeze.algos import pqn, pqn_recurrent
from jaxspreeze.algos.base import episode_starts
from jaxspreeze.algos.pqn_config import PQNConfig
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition, reset_carry
from jaxspreeze.envs import VecEnv, auto_reset
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

MEMORY_CHAIN = "gymnax/MemoryChain-bsuite"


def walk_env(num_envs: int) -> VecEnv:
    """obs = [position]: starts in [0, 1), walks 0.25 a step; terminates past 1.5, is
    truncated after 4 steps; two actions, reward = the action."""

    def reset(key):
        x = jax.random.uniform(key, (1,))
        return x, x

    def step(x, action):
        x = x + 0.25
        return x, x, action.astype(jnp.float32), x[0] > 1.5

    spec = EnvSpec("toy/walk", (1,), True, 2, max_episode_steps=4)
    parts = auto_reset(reset, step, 4)
    return VecEnv(
        spec, num_envs, parts.reset_one, parts.step_batch,
        step_batch_no_reset=parts.step_batch_no_reset,
    )  # fmt: skip


def recurrent(spec: EnvSpec, n: int, t: int, batch: int, memory: str = "gru", **pqn_kw):
    """Recurrent PQN for ``n`` envs x ``t`` steps in minibatches of ``batch``: (algo, learner)."""
    cfg = PQNConfig(memory=memory, memory_size=8, hidden=(16,), **pqn_kw)
    run = types.SimpleNamespace(num_envs=n, rollout_steps=t, batch_size=batch, total_steps=10**6)
    algo = pqn.make(cfg, spec, run)
    return algo, algo.init.__self__


def half_random(actor):
    """The actor with epsilon 0.5 all run long: both actions are taken."""
    return actor._replace(eps_start=jnp.float32(0.5), eps_end=jnp.float32(0.5))


# ------------------------------------------------------------------ the carry's resets
def test_the_carry_resets_at_episode_starts_and_the_loss_replays_it():
    """Device rollout on the probe env: the carry a step acts with (the cell's state and
    the previous action) is the initial one where the previous step ended an episode (a
    termination or a truncation) and not otherwise; the previous action is the one-hot of
    the action before. The loss's batch starts from the rollout's stored start and its
    unroll, reset where episodes start, passes through the carries the rollout acted with."""
    env = walk_env(4)
    algo, learner = recurrent(env.spec, 4, 8, 32, "lstm", last_action=True)
    actor = half_random(algo.init(jax.random.key(0)).actor)
    acted, start, traj = stepped_rollout(env, algo, actor, 8)
    done = np.asarray(traj.terminated | traj.truncated)
    assert np.asarray(traj.terminated).any() and np.asarray(traj.truncated).any()
    zero = algo.initial_carry(4)
    rows = lambda carry, row: [np.asarray(leaf)[row] for leaf in jax.tree.leaves(carry)]
    for t in range(1, 8):
        for row in range(4):
            is_zero = all(
                np.array_equal(c, z)
                for c, z in zip(rows(acted[t], row), rows(zero, row), strict=True)
            )
            assert is_zero == bool(done[t - 1, row]), (t, row)
            if not done[t - 1, row]:
                want = np.eye(2)[int(traj.action[t - 1, row])]
                np.testing.assert_array_equal(np.asarray(acted[t].last_action)[row], want)
    # the loss's replay: the stored start, the previous actions acted with, the carries
    batch = jax.jit(learner.batch)(actor, traj, start)
    leaves_equal(batch.start, start.cell)
    for t in range(8):
        np.testing.assert_array_equal(np.asarray(batch.prev[t]), acted[t].last_action)
    _, _, carries = jax.jit(learner.net.apply)(
        actor.params, batch.start, batch.obs, batch.resets, batch.prev
    )
    initial = algo.initial_carry(4).cell
    for t in range(1, 8):
        before = jax.tree.map(lambda c, t=t: c[t - 1], carries)
        replayed = reset_carry(before, initial, batch.resets[t])
        for got, want in zip(
            jax.tree.leaves(replayed), jax.tree.leaves(acted[t].cell), strict=True
        ):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)


def test_recurrent_pqn_has_a_carry_and_feed_forward_pqn_builds_todays_learner():
    """A carry with leaves is what makes the iteration store the rollout's start (and the
    workers keep per-env carries); feed-forward PQN keeps the stateless learner."""
    env = walk_env(2)
    algo, _ = recurrent(env.spec, 2, 4, 8, last_action=True)
    assert algo.has_memory
    run = types.SimpleNamespace(num_envs=2, rollout_steps=4, batch_size=8, total_steps=64)
    plain = pqn.make(PQNConfig(hidden=(16,)), env.spec, run)
    assert not plain.has_memory and type(plain.init.__self__) is pqn.Learner


# ------------------------------------------------------------------ the loss and targets
def test_the_loss_at_epoch_one_reads_the_q_values_acting_computed():
    """The Q-values the loss recomputes from the stored start at the parameters that acted
    equal those each step computed as it acted (step by step from its carry): the first
    gradient step's ``Q(s, a)`` is the rollout's own."""
    env = walk_env(4)
    algo, learner = recurrent(env.spec, 4, 8, 32, epochs=1)  # no previous action fed
    actor = half_random(algo.init(jax.random.key(0)).actor)
    acted, start, traj = stepped_rollout(env, algo, actor, 8)
    # Q as each step acted: from the carry it acted with
    step = jax.jit(lambda c, o: pqn_recurrent.step(learner.net, actor.params, c, o)[0])
    q_acted = jnp.stack([step(acted[t], traj.obs[t]) for t in range(8)])  # [T, N, K]
    chosen = jnp.take_along_axis(q_acted, traj.action[..., None], -1)[..., 0]
    batch = jax.jit(learner.batch)(actor, traj, start)
    assert batch.prev is None and start.last_action == ()
    _, q, _ = jax.jit(learner.net.apply)(
        actor.params, batch.start, batch.obs, batch.resets, batch.prev
    )
    np.testing.assert_allclose(np.asarray(q).reshape(8, 4, 2), np.asarray(q_acted), atol=1e-6)
    # the loss's own path: one gradient step on the whole rollout reports its Q(s, a)
    _, metrics = jax.jit(learner.update_sequences)(actor, batch)
    np.testing.assert_allclose(float(metrics["q_mean"]), float(chosen.mean()), atol=1e-6)
    want_loss = 0.5 * jnp.mean((chosen - batch.target) ** 2)
    np.testing.assert_allclose(float(metrics["q_loss"]), float(want_loss), rtol=1e-5)


def test_a_truncation_restarts_the_cell_but_bootstraps_from_the_final_observation():
    """One env, three steps, the middle one truncated, lambda 0 (one-step targets): by
    hand, step 1's target bootstraps from max Q of its final observation read by the cell
    that continues the episode (with step 1's action as the previous one); step 2 reads a
    fresh cell and no previous action."""
    env = walk_env(1)
    algo, learner = recurrent(env.spec, 1, 3, 3, last_action=True, q_lambda=0.0, gamma=0.9)
    actor = algo.init(jax.random.key(0)).actor
    net, p = learner.net, actor.params
    obs = jnp.array([[[0.1]], [[0.4]], [[0.2]]])
    final = jnp.array([[0.9]])
    next_obs = jnp.stack([obs[1], final, jnp.array([[0.45]])])
    action = jnp.array([[1], [0], [1]])
    reward = jnp.array([[1.0], [2.0], [3.0]])
    truncated = jnp.array([[False], [True], [False]])
    traj = Transition(obs, action, reward, jnp.zeros_like(truncated), truncated, next_obs)
    np.testing.assert_array_equal(episode_starts(traj)[:, 0], [False, False, True])
    start = algo.initial_carry(1)
    # by hand, step by step with the network's one-step path
    hot = lambda a: jnp.eye(2)[a]
    step = jax.jit(lambda c, o: pqn_recurrent.step(net, p, c, o))
    q0, c0 = step(start, obs[0])
    q1, c1 = step(pqn_recurrent.QCarry(c0, hot(action[0])), obs[1])
    q_final, _ = step(pqn_recurrent.QCarry(c1, hot(action[1])), final)
    q2, c2 = step(start, obs[2])  # a fresh cell, no previous action
    q_next2, _ = step(pqn_recurrent.QCarry(c2, hot(action[2])), next_obs[2])
    targets = jax.jit(learner.batch)(actor, traj, start).target[:, 0]
    want = [
        0.1 * 1.0 + 0.9 * jnp.max(q1),  # reward_scaling 0.1
        0.1 * 2.0 + 0.9 * jnp.max(q_final),
        0.1 * 3.0 + 0.9 * jnp.max(q_next2),
    ]
    np.testing.assert_allclose(np.asarray(targets), np.asarray(want), atol=1e-6)
    assert not np.allclose(np.asarray(q2), np.asarray(q1)) and q0.shape == (1, 2)


# ------------------------------------------------------------------ runs
def memory_chain(memory="gru", last_action=False, size=32, hidden=(32,), **changes) -> RunConfig:
    """Recurrent PQN on MemoryChain (memory length 5: 6-step episodes)."""
    base = dict(
        algo="pqn", env=MEMORY_CHAIN, total_steps=30_000, num_envs=16, rollout_steps=32,
        batch_size=128, chunk_iterations=20, placement="single", sinks=(), eval_episodes=64,
    )  # fmt: skip
    base.update(changes)
    cfg = PQNConfig(memory=memory, memory_size=size, hidden=hidden, last_action=last_action)
    return RunConfig(**base, pqn=cfg)


@pytest.mark.slow  # the carry through a resume: test_recurrent_ppo's resume test by default
def test_a_resume_mid_run_with_a_carry_is_bitwise(tmp_path):
    """Chunk A, save, chunk B == restore into a fresh state, chunk B: the cell's carry and
    the previous action are in the checkpoint (the env carry) and the run continues
    bitwise; forgetting the carry changes the run."""
    cfg = resolve(memory_chain("gru", True, 8, (8,), total_steps=1024, num_envs=4,
                               rollout_steps=8, batch_size=16, chunk_iterations=2, num_seeds=2))  # fmt: skip
    schedule = schedules.make(plan(cfg, devices.single()))
    state_a, _ = schedule.chunk(schedule.init())
    carry = state_a.env.policy
    assert np.asarray(carry.cell).any() and np.asarray(carry.last_action).any()
    path = checkpoint.save(tmp_path, state_a, env_steps=64, chunk=0, config=cfg)
    carry_a = jax.device_get(carry)
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
    params = lambda state: jax.tree.leaves(state.agent.actor.params)
    assert not all(
        np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(params(other), params(state_b), strict=True)
    )


@pytest.mark.slow
def test_recurrent_pqn_solves_memory_chain_and_feed_forward_does_not(tmp_path):
    """Three seeds each (vmapped): a GRU scores about 1 (the cue remembered for the whole
    episode); feed-forward PQN stays at chance (0). Measured:
    experiments/results/pqn_cpu.md, Recurrent PQN."""
    runs = {}
    for memory in ("gru", "none"):
        cfg = memory_chain(memory, num_seeds=3, logdir=str(tmp_path), run_name=memory)
        runs[memory] = train(cfg, quiet=True).summary["final_eval_return_per_seed"]
    assert min(runs["gru"]) >= 0.9, runs
    assert max(abs(r) for r in runs["none"]) < 0.3, runs


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (dict(pqn=PQNConfig(memory="rnn")), "pqn.memory"),
        (dict(pqn=PQNConfig(memory="gru", memory_size=0)), "pqn.memory_size"),
        (dict(pqn=PQNConfig(memory="gru", last_action=1)), "pqn.last_action"),
        (dict(pqn=PQNConfig(memory="gru"), batch_size=48), "batch_size"),
        (dict(pqn=PQNConfig(memory="lstm"), placement="data"), "pqn.memory"),
        (dict(pqn=PQNConfig(memory="gru"), placement="split"), "placement"),
    ],
)
def test_bad_recurrent_settings_are_refused_naming_the_field(changes, field):
    base = dict(algo="pqn", env="gymnax/CartPole-v1", num_envs=4, rollout_steps=32,
                batch_size=64)  # fmt: skip
    with pytest.raises(ConfigError) as e:
        plan(RunConfig(**{**base, **changes}), on_devices=False)
    assert e.value.field == field
