"""Legal-action masks end to end: a Jumanji-style probe env whose observation carries a
mask, flattened with the mask last; PPO (feed-forward and recurrent) and PQN never pick an
illegal action when sampling, acting greedily, exploring at random or warming up; the
masked log-probabilities are a distribution over the legal actions; a PPO run learns the
best legal action though an illegal one pays more."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.algos import masks, ppo, ppo_policy, pqn
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data.rollout import random_policy
from jaxspreeze.envs import env_spec, jaxenv, make_env, register_env
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.store import rundir

# the probe's rewards R[context, action] and legal actions: the best action whatever the
# mask says (0, paying 10) is never legal; the best legal one is 1 in context 0, 3 in 1
REWARD = np.array([[10.0, 1.0, 0.2, 5.0], [10.0, 5.0, 0.2, 1.0]], np.float32)
LEGAL = np.array([[0, 1, 1, 0], [0, 0, 1, 1]], bool)
BEST_LEGAL = [1, 3]


class Obs(NamedTuple):  # Jumanji observes a NamedTuple of arrays, its mask among them
    context: jax.Array  # float32 [2], one-hot
    action_mask: jax.Array  # bool [4]


class TimeStep(NamedTuple):
    step_type: jax.Array
    reward: jax.Array
    discount: jax.Array
    observation: Obs


class DiscreteSpec(NamedTuple):  # Jumanji's specs.DiscreteArray, as far as read
    num_values: int
    shape: tuple = ()
    dtype: Any = jnp.int32


class MaskedBandit:
    """Jumanji's API; one-step episodes: a context drawn at reset, the reward ``REWARD[c, a]``
    (an illegal action pays it too: only the mask keeps a policy from it)."""

    time_limit = 10
    observation_spec = None  # read from reset's observation
    action_spec = DiscreteSpec(4)

    def reset(self, key):
        c = jax.random.randint(key, (), 0, 2)
        return c, self._timestep(c, 0, 0.0, 1.0)

    def step(self, c, action):
        return c, self._timestep(c, 2, jnp.asarray(REWARD)[c, action], 0.0)

    def _timestep(self, c, step_type, reward, discount):
        obs = Obs(jax.nn.one_hot(c, 2), jnp.asarray(LEGAL)[c])
        return TimeStep(jnp.int32(step_type), jnp.float32(reward), jnp.float32(discount), obs)


@pytest.fixture
def bandit() -> EnvSpec:
    return env_spec(register_env(MaskedBandit()))


def legal_of(obs: np.ndarray) -> np.ndarray:
    """The probe's flattened observation's mask, read back by hand (its last 4 entries)."""
    return np.asarray(obs)[..., 2:] > 0.5


def test_a_structured_observation_is_flattened_with_the_mask_last(bandit):
    assert bandit.obs_shape == (6,) and bandit.discrete and bandit.action_dim == 4
    assert bandit.action_mask and bandit.actor_obs == bandit.critic_obs == (0, 2)
    env = make_env(bandit.name, 8)
    obs, _ = jax.jit(env.reset)(jax.random.key(0))
    ctx = np.argmax(np.asarray(obs)[:, :2], -1)
    np.testing.assert_array_equal(np.asarray(obs)[:, :2], np.eye(2)[ctx])
    np.testing.assert_array_equal(legal_of(obs), LEGAL[ctx])
    np.testing.assert_array_equal(np.asarray(masks.legal(bandit, obs)), LEGAL[ctx])


def test_masked_log_probs_are_a_distribution_over_the_legal_actions():
    logits = np.asarray(jax.random.normal(jax.random.key(0), (5, 4))) * 3.0
    ok = np.array([[1, 1, 0, 0], [0, 0, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 1]], bool)
    policy = ppo_policy.Categorical(None)  # the network is not used: *_out methods

    @jax.jit
    def scored(logits, ok):
        each = lambda a: policy.log_prob_entropy_out(logits, jnp.full((5,), a), ok=ok)
        logp = jnp.stack([each(a)[0] for a in range(4)], -1)
        # the surrogate's gradient reaches the legal logits only, and is finite
        grad = jax.grad(
            lambda x: policy.log_prob_entropy_out(x, jnp.argmax(ok, -1), ok=ok)[0].sum()
        )
        return logp, each(0)[1], grad(logits)

    logp, entropy, grad = map(np.asarray, scored(logits, ok))
    p = np.exp(logp)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
    assert (p[~ok] == 0.0).all() and np.isfinite(grad).all() and (grad[~ok] == 0.0).all()
    for row in range(5):  # by hand: the softmax over the legal logits alone, its entropy
        legal = logits[row][ok[row]]
        q = np.exp(legal - legal.max()) / np.exp(legal - legal.max()).sum()
        np.testing.assert_allclose(p[row][ok[row]], q, rtol=1e-5)
        np.testing.assert_allclose(entropy[row], -(q * np.log(q)).sum(), rtol=1e-5, atol=1e-7)
    # no mask: as before
    plain, _ = policy.log_prob_entropy_out(jnp.asarray(logits), jnp.zeros(5, int))
    np.testing.assert_allclose(plain, jax.nn.log_softmax(logits)[:, 0], rtol=1e-6)


def _algo(name: str, spec: EnvSpec, iterations: int = 16, **cfg):
    """``name`` on ``spec``: rollouts of 64 envs x 16 steps, its learning rate annealed over
    ``iterations`` of them."""
    steps = iterations * 64 * 16
    run = resolve(
        RunConfig(algo=name, num_envs=64, rollout_steps=16, batch_size=256, total_steps=steps)
    )
    if name == "pqn":
        return pqn.make(pqn.PQNConfig(hidden=(16,), **cfg), spec, run)
    return ppo.make(ppo.PPOConfig(hidden=(16,), **cfg), spec, run)


def _contexts(n: int = 10240) -> tuple[np.ndarray, np.ndarray]:
    """``n`` probe observations (random contexts, as the env flattens them) and contexts."""
    ctx = np.asarray(jax.random.randint(jax.random.key(7), (n,), 0, 2))
    return np.concatenate([np.eye(2)[ctx], LEGAL[ctx]], -1).astype(np.float32), ctx


def _acting(algo):
    """A jitted ``actor -> (sampled, greedy)`` actions of ``algo`` on the 10,240
    :func:`_contexts` (one program for both, the actor an argument)."""
    obs, _ = _contexts()
    carry = algo.initial_carry(len(obs))
    act = lambda actor, deterministic: algo.act(
        actor, carry, obs, jax.random.key(1), deterministic
    )[0]
    both = jax.jit(lambda actor: (act(actor, False), act(actor, True)))
    return lambda actor: tuple(map(np.asarray, both(actor)))


# the output layer's bias (its kernel zeroed: the logits or Q-values are the bias): the
# illegal action 0 far above the others; among the legal ones, 1 > 2 and 3 > 2
BIAS = np.array([50.0, 1.0, 0.0, 2.0], np.float32)


def _favour_illegal(params):
    """The parameters (a seed axis or not) with the output layer's (the one with 4
    outputs) kernel 0 and bias :data:`BIAS`: unmasked, action 0 would be every greedy choice and nearly every sample."""

    def set_head(path, x):
        name = jax.tree_util.keystr(path[-1:])
        if x.shape[-1:] == (4,) and "kernel" in name:
            return jnp.zeros_like(x)
        if x.shape[-1:] == (4,) and "bias" in name:
            return jnp.broadcast_to(jnp.asarray(BIAS), x.shape)
        return x

    return jax.tree_util.tree_map_with_path(set_head, params)


@pytest.mark.parametrize(
    ("name", "cfg"),
    [("ppo", {}), ("ppo", {"memory": "gru", "memory_size": 8}), ("pqn", {})],
    ids=["ppo", "ppo-gru", "pqn"],
)
def test_no_illegal_action_is_sampled_and_greedy_is_the_best_legal(bandit, name, cfg):
    """10k actions on random contexts, the network favouring the illegal action 0: none
    sampled (PPO: with the softmax's odds over the legal logits; PQN at its start,
    epsilon 1: uniform over the legal ones; then epsilon 0: greedy); the greedy action
    (the evaluation's and ``predict``'s) is the best legal one, 1 and 3. (The rollouts
    act through this ``act``; test_a_ppo_run_evaluates_the_best_legal_action steps the env.)"""
    algo = _algo(name, bandit, **cfg)
    actor = jax.jit(algo.init)(jax.random.key(0)).actor
    actor = actor._replace(params=_favour_illegal(actor.params))
    acting = _acting(algo)
    sampled, greedy = acting(actor)
    _, ctx = _contexts()
    assert LEGAL[ctx, sampled].all() and LEGAL[ctx, greedy].all()  # 0 illegal of 10,240
    p_first = (sampled[ctx == 0] == 1).mean(), (sampled[ctx == 1] == 2).mean()
    if name == "pqn":  # uniform over the two legal actions of each context
        np.testing.assert_allclose(p_first, [0.5, 0.5], atol=0.03)
    else:  # softmax over the legal logits: e^1 / (e^1 + e^0), e^0 / (e^0 + e^2)
        np.testing.assert_allclose(p_first, [1 / (1 + np.exp(-1)), 1 / (1 + np.exp(2))], atol=0.03)
    np.testing.assert_array_equal(greedy, np.asarray(BEST_LEGAL)[ctx])
    if name == "pqn":  # epsilon 0: greedy
        sampled, _ = acting(actor._replace(eps_start=jnp.float32(0.0)))
        np.testing.assert_array_equal(sampled, np.asarray(BEST_LEGAL)[ctx])


def test_random_warm_up_actions_are_legal(bandit):
    env = make_env(bandit.name, 64)
    obs, ctx = _contexts()
    action, _ = jax.jit(random_policy(env))((), jnp.asarray(obs), jax.random.key(0))
    action = np.asarray(action)
    assert LEGAL[ctx, action].all() and set(np.unique(action)) == {1, 2, 3}


def test_the_random_legal_draw_is_uniform_over_the_legal_actions():
    ok = jnp.asarray([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    ok = masks.legal(EnvSpec("probe", (4,), True, 4, action_mask=True), ok.astype(jnp.float32))
    draws = np.asarray(masks.random_legal(jax.random.key(0), jnp.tile(ok, (4000, 1)), (12000,), 4))
    draws = draws.reshape(4000, 3)
    assert set(np.unique(draws[:, 0])) == {1, 2} and abs((draws[:, 0] == 1).mean() - 0.5) < 0.03
    assert abs(np.bincount(draws[:, 1], minlength=4) / 4000 - 0.25).max() < 0.03
    assert set(np.unique(draws[:, 2])) == {0, 1, 2, 3}  # none legal: all legal


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "pqn"])
def test_the_best_legal_action_is_learned_though_an_illegal_one_pays_more(bandit, name):
    """The phases on rollouts their own ``act`` collects (one-step episodes): the greedy
    action becomes the best legal one of each context, though action 0 pays 10."""
    algo = _algo(name, bandit, iterations=60, lr=3e-3)
    state = jax.jit(algo.init)(jax.random.key(0))
    obs_all, ctx_all = _contexts(1024)
    obs_all, ctx_all = jnp.asarray(obs_all).reshape(16, 64, 6), jnp.asarray(ctx_all).reshape(16, 64)
    reward_table = jnp.asarray(REWARD)

    @jax.jit
    def iteration(state, key):
        k_act, k_actor, k_critic = jax.random.split(key, 3)
        act = lambda o, k: algo.act(state.actor, (), o, k, False)[0]
        action = jax.vmap(act)(obs_all, jax.random.split(k_act, 16))
        reward = reward_table[ctx_all, action]
        done = jnp.ones((16, 64), bool)
        traj = Transition(obs_all, action, reward, done, jnp.zeros_like(done), obs_all)
        view = algo.critic_view(state.critic)
        actor, _ = algo.actor_phase(state.actor, view, traj, k_actor)
        critic, _ = algo.critic_phase(state.critic, algo.actor_view(state.actor), traj, k_critic)
        return state._replace(actor=actor, critic=critic), jnp.mean(reward)

    for i in range(60):
        state, mean_reward = iteration(state, jax.random.key(i))
    assert float(mean_reward) <= 1.0  # never an illegal action's pay
    obs = jnp.asarray(np.concatenate([np.eye(2), LEGAL], -1), jnp.float32)
    greedy, _ = algo.act(state.actor, (), obs, jax.random.key(0), True)
    np.testing.assert_array_equal(np.asarray(greedy), BEST_LEGAL)


def test_a_loaded_agent_predicts_legal_actions_from_the_record_alone(tmp_path, bandit):
    """``jaxspreeze.load(run)`` without the env builds the policy from the run's record
    (the mask's columns restored with it) and ``predict`` picks legal actions only."""
    cfg = RunConfig().replace(algo="ppo", env=bandit.name, logdir=str(tmp_path), run_name="run")
    run_dir = rundir.create(cfg).path
    jaxenv.save_record(run_dir, bandit.name)
    algo = RunPlan.saved(cfg).make_algorithm()
    actor = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(0), 1)).actor
    save_policy(run_dir, actor._replace(params=_favour_illegal(actor.params)))
    jaxenv._ENVS.clear()  # a later process: the object is not here
    agent = jaxspreeze.load(run_dir)
    assert agent.spec.action_mask and agent.spec.actor_obs == (0, 2)
    obs, ctx = _contexts(512)
    np.testing.assert_array_equal(agent.predict(obs), np.asarray(BEST_LEGAL)[ctx])


@pytest.mark.slow
def test_a_ppo_run_evaluates_the_best_legal_action(tmp_path):
    """A whole run (rollouts, evaluation, the saved policy): the final greedy evaluation
    returns exactly the best legal reward, 1 (an illegal action would pay 5 or 10)."""
    cfg = RunConfig().replace(
        algo="ppo",
        total_steps=8192,
        num_envs=16,
        rollout_steps=16,
        batch_size=64,
        chunk_iterations=8,
        eval_episodes=16,
        logdir=str(tmp_path),
        sinks=("jsonl",),
        ppo={"hidden": (16,), "lr": 3e-3},
    )
    ran = jaxspreeze.train(cfg, env=MaskedBandit(), quiet=True)
    assert ran.summary["final_eval_return"] == pytest.approx(1.0)
    agent = jaxspreeze.load(ran.run_dir, env=MaskedBandit())
    obs = np.concatenate([np.eye(2), LEGAL], -1).astype(np.float32)
    np.testing.assert_array_equal(agent.predict(obs), BEST_LEGAL)


class WrongMask(MaskedBandit):
    action_spec = DiscreteSpec(3)  # a mask of 4 for 3 actions


def test_a_mask_that_does_not_fit_the_actions_is_one_config_error():
    with pytest.raises(ConfigError) as e:
        register_env(WrongMask())
    assert e.value.field == "env" and "action_mask has shape (4,)" in str(e.value)
