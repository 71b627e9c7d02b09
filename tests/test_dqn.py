"""DQN: its target update, double-DQN and n-step targets, epsilon-greedy acting (with
legal-action masks), a probe it must learn, and its place in the machinery (resume, the
policy, sweeps, host envs, placements, refusals)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze import algos
from jaxspreeze.algos import dqn
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.envs import env_spec
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

CARTPOLE = "gymnax/CartPole-v1"
HERE = Path(__file__).parent


def _tiny_algo(spec=None, **cfg):
    """DQN on CartPole's spec (or ``spec``): 3 gradient steps of 16 per iteration of 4
    envs, 10 iterations after a warm-up of 16 steps (30 gradient steps in the run)."""
    run = RunConfig(
        algo="dqn", num_envs=4, grad_steps=3, batch_size=16, learning_starts=16, total_steps=56
    )
    config = dqn.DQNConfig(**{"hidden": (16,), **cfg})
    return dqn.make(config, spec or env_spec(CARTPOLE), resolve(run)), config


def _buffer(n=64, obs_dim=4, actions=2, seed=0):
    """A replay buffer of ``n`` random transitions."""
    key = jax.random.key(seed)
    k = jax.random.split(key, 4)
    items = Transition(
        jax.random.normal(k[0], (n, obs_dim)),
        jax.random.randint(k[1], (n,), 0, actions),
        jax.random.normal(k[2], (n,)),
        jax.random.uniform(k[3], (n,)) < 0.1,
        jnp.zeros((n,), bool),
        jax.random.normal(jax.random.fold_in(key, 1), (n, obs_dim)),
    )
    example = jax.tree.map(lambda x: x[0], items)
    return replay.add(replay.init(example, n), items)


# ------------------------------------------------------------------ the target network
def test_the_target_network_is_copied_every_n_steps_or_averaged():
    target, online = {"w": jnp.zeros(3)}, {"w": jnp.full(3, 4.0)}
    # hard: tau 1 every 3 steps: unchanged at steps 1 and 2, a copy at step 3
    for steps, expected in ((1, 0.0), (2, 0.0), (3, 4.0), (6, 4.0)):
        moved, due = dqn.update_target(target, online, jnp.float32(1.0), jnp.int32(steps), 3)
        np.testing.assert_array_equal(np.asarray(moved["w"]), expected)
        assert bool(due) == (steps % 3 == 0)
    # Polyak: tau 0.25 every step: a quarter of the way
    moved, _ = dqn.update_target(target, online, jnp.float32(0.25), jnp.int32(1), 1)
    np.testing.assert_allclose(np.asarray(moved["w"]), 1.0)
    # in the critic phase: 3 steps per iteration, tau 1 every 3: the target is the
    # online network after the 3rd step, bitwise, and no longer the initial one
    algo, _ = _tiny_algo(tau=1.0, target_update_every=3)
    critic = algo.init(jax.random.key(0)).critic
    init = critic.params
    critic, metrics = jax.jit(algo.critic_phase)(critic, (), _buffer(), jax.random.key(1))
    assert int(critic.steps) == 3
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, critic.params, critic.target_params)))
    assert not any(jax.tree.leaves(jax.tree.map(np.array_equal, init, critic.target_params)))
    assert float(metrics["target_updates"]) == pytest.approx(1 / 3)


# ------------------------------------------------------------------ targets by hand
def _linear(params, obs):
    """A hand-made "network": ``Q(s, .) = s @ params``."""
    return obs @ params


def test_double_dqn_takes_the_online_argmax_and_the_target_value():
    # two next states, three actions; the online net prefers action 2 in the first, 0 in
    # the second; the target net's values differ
    online = jnp.asarray([[1.0, 2.0, 3.0], [5.0, 1.0, 0.0]])
    target = jnp.asarray([[10.0, 30.0, 20.0], [7.0, 9.0, 8.0]])
    np.testing.assert_allclose(dqn.next_value(online, target, True), [20.0, 7.0])
    np.testing.assert_allclose(dqn.next_value(online, target, False), [30.0, 9.0])
    # legal actions: the argmax and the max over the legal ones only
    ok = jnp.asarray([[True, True, False], [False, True, True]])
    np.testing.assert_allclose(dqn.next_value(online, target, True, ok), [30.0, 9.0])
    np.testing.assert_allclose(dqn.next_value(online, target, False, ok), [30.0, 9.0])
    # one-step targets through q_targets: r + gamma (1 - terminated) V(s')
    eye = jnp.eye(3)
    data = Transition(
        eye[:2], jnp.zeros(2, jnp.int32), jnp.asarray([1.0, 2.0]), jnp.asarray([False, True]),
        jnp.zeros(2, bool), eye[:2],
    )  # fmt: skip
    # s' = e_0, e_1 read rows 0 and 1 of the [3, 3] "parameters"
    p_online = jnp.concatenate([online, jnp.zeros((1, 3))])
    p_target = jnp.concatenate([target, jnp.zeros((1, 3))])
    spec = EnvSpec("probe/linear", (3,), True, 3)
    _, y = dqn.q_targets(_linear, p_online, p_target, data, jnp.float32(0.5), 1, True, spec)
    np.testing.assert_allclose(np.asarray(y), [1.0 + 0.5 * 20.0, 2.0])  # terminated: no bootstrap


def test_n_step_targets_by_hand():
    """Runs of 3 transitions, gamma 0.5, Q_target(s') = 8 for every s' (a constant net):
    no episode end: 1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 8 = 3.75; terminated at the 2nd step:
    1 + 0.5 * 2 = 2; truncated at the 2nd: 2 + 0.25 * 8 = 4 (bootstrapped from its final
    observation); terminated at the 1st: 1."""
    const = lambda params, obs: jnp.full((obs.shape[0], 2), 8.0)
    rewards = jnp.tile(jnp.asarray([1.0, 2.0, 3.0]), (4, 1))
    term = jnp.asarray([[0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]], bool)
    trunc = jnp.asarray([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], bool)
    obs = jnp.arange(4 * 3, dtype=jnp.float32).reshape(4, 3, 1)
    runs = Transition(obs, jnp.zeros((4, 3), jnp.int32), rewards, term, trunc, obs + 100)
    spec = EnvSpec("probe/const", (1,), True, 2)
    batch, y = dqn.q_targets(const, None, None, runs, jnp.float32(0.5), 3, True, spec)
    np.testing.assert_allclose(np.asarray(y), [3.75, 2.0, 4.0, 1.0])
    # the batch's first observations and the kept steps' next observations
    np.testing.assert_array_equal(np.asarray(batch.obs)[:, 0], [0, 3, 6, 9])
    np.testing.assert_array_equal(np.asarray(batch.next_obs)[:, 0], [102, 104, 107, 109])


# ------------------------------------------------------------------ epsilon and acting
def test_epsilon_follows_the_critics_steps_copied_with_its_network():
    """30 gradient steps in the run, eps_decay 0.5: epsilon falls from 1 to 0.05 over the
    first 15. The actor phase copies the critic's parameters and step count; the epsilon
    it reports is the one the iteration acted with (before the copy)."""
    algo, _ = _tiny_algo(eps_decay=0.5)
    state = algo.init(jax.random.key(0))
    phase = jax.jit(algo.actor_phase)
    view = algo.critic_view(state.critic)
    for steps, acted_with in ((6, 1.0), (15, 1.0 - 0.95 * 6 / 15), (30, 0.05)):
        view = view._replace(steps=jnp.int32(steps))
        actor, metrics = phase(state.actor, view, None, jax.random.key(1))
        assert int(actor.updates) == steps
        assert float(metrics["epsilon"]) == pytest.approx(acted_with)
        state = state._replace(actor=actor)
    # the copy is the critic's network, bitwise
    for a, b in zip(
        jax.tree.leaves(actor.params), jax.tree.leaves(state.critic.params), strict=True
    ):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_greedy_is_the_argmax_epsilon_zero_greedy_epsilon_one_uniform():
    algo, config = _tiny_algo()
    actor = algo.init(jax.random.key(0)).actor
    obs = jax.random.normal(jax.random.key(1), (256, 4))
    q = dqn.q_network(config, env_spec(CARTPOLE)).apply(actor.params, obs)
    greedy, _ = algo.act(actor, (), obs, jax.random.key(2), True)
    np.testing.assert_array_equal(np.asarray(greedy), np.argmax(np.asarray(q), -1))
    assert len(set(np.asarray(greedy).tolist())) == 2
    zero = actor._replace(eps_start=jnp.float32(0.0))
    acted, _ = algo.act(zero, (), obs, jax.random.key(3), False)
    np.testing.assert_array_equal(np.asarray(acted), np.asarray(greedy))
    acted, _ = algo.act(actor, (), jnp.zeros((4096, 4)), jax.random.key(2), False)  # eps 1
    assert 0.45 < float(jnp.mean(acted)) < 0.55


def test_masked_observations_act_and_bootstrap_among_legal_actions():
    """A spec with legal-action masks: 4 actions, the mask in the observation's last 4
    entries (the network reads the first 3). Greedy and random actions are legal; the
    target's argmax and max run over legal next actions."""
    cols = (0, 3)  # the columns the network reads: the features, not the mask
    spec = EnvSpec("probe/masked", (7,), True, 4, actor_obs=cols, critic_obs=cols, action_mask=True)
    algo, config = _tiny_algo(spec)
    actor = algo.init(jax.random.key(0)).actor
    feats = jax.random.normal(jax.random.key(1), (512, 3))
    legal = jax.random.uniform(jax.random.key(2), (512, 4)) < 0.5
    legal = legal.at[:, 3].set(True)  # at least one legal action per row
    obs = jnp.concatenate([feats, legal.astype(jnp.float32)], -1)
    q = np.asarray(dqn.q_network(config, spec).apply(actor.params, obs))
    greedy, _ = algo.act(actor, (), obs, jax.random.key(3), True)
    expected = np.argmax(np.where(np.asarray(legal), q, -np.inf), -1)
    np.testing.assert_array_equal(np.asarray(greedy), expected)
    ok = np.asarray(legal)
    explore, _ = algo.act(actor, (), obs, jax.random.key(4), False)  # epsilon 1: random
    assert ok[np.arange(512), np.asarray(explore)].all()
    assert len(set(np.asarray(explore).tolist())) == 4
    # the critic's targets: the same numbers with the mask as next_value's ok
    data = Transition(obs, explore, jnp.ones(512), jnp.zeros(512, bool), jnp.zeros(512, bool), obs)
    state = algo.init(jax.random.key(0)).critic
    apply = dqn.q_network(config, spec).apply
    _, y = dqn.q_targets(apply, state.params, state.target_params, data, 0.5, 1, False, spec)
    np.testing.assert_allclose(
        np.asarray(y), 1.0 + 0.5 * np.where(ok, q, -np.inf).max(-1), rtol=1e-5
    )


# ------------------------------------------------------------------ a probe it must learn
def test_a_contextual_bandit_is_learned():
    """One-step episodes: a one-hot context of 3, reward 1 for the action equal to it
    (else 0), collected by DQN's own epsilon-greedy act into its replay buffer. The greedy
    action becomes the context, Q(s, best) near 1 and Q(s, other) near 0."""
    spec = EnvSpec("probe/bandit", (3,), True, 3)
    run = RunConfig(
        algo="dqn", num_envs=16, grad_steps=4, batch_size=32, learning_starts=0, total_steps=1600
    )
    config = dqn.DQNConfig(hidden=(32,), lr=3e-3, target_update_every=5, n_step=1)
    algo = dqn.make(config, spec, resolve(run))  # 100 iterations, 400 gradient steps
    agent = algo.init(jax.random.key(0))
    buffer = replay.init(replay.example_transition(spec), 1024)
    eye = jnp.eye(3)

    @jax.jit
    def iteration(agent, buffer, key):
        k_ctx, k_act, k_critic = jax.random.split(key, 3)
        ctx = jax.random.randint(k_ctx, (16,), 0, 3)
        action, _ = algo.act(agent.actor, (), eye[ctx], k_act, False)
        reward = (action == ctx).astype(jnp.float32)
        done = jnp.ones(16, bool)
        buffer = replay.add(buffer, Transition(eye[ctx], action, reward, done, ~done, eye[ctx]))
        critic, metrics = algo.critic_phase(agent.critic, (), buffer, k_critic)
        actor, _ = algo.actor_phase(agent.actor, algo.critic_view(agent.critic), None, key)
        return agent._replace(actor=actor, critic=critic), buffer, metrics

    for i in range(100):
        agent, buffer, metrics = iteration(agent, buffer, jax.random.key(i))
    assert bool(metrics["finite"] > 0.5)
    greedy, _ = algo.act(agent.actor, (), eye, jax.random.key(0), True)
    np.testing.assert_array_equal(np.asarray(greedy), [0, 1, 2])
    q = np.asarray(dqn.q_network(config, spec).apply(agent.critic.params, eye))
    np.testing.assert_allclose(np.diag(q), 1.0, atol=0.1)
    np.testing.assert_allclose(q[~np.eye(3, dtype=bool)], 0.0, atol=0.1)


# ------------------------------------------------------------------ runs
def _tiny(tmp_path, **changes) -> RunConfig:
    """A warm-up of 32 steps, then 12 iterations of 4 envs x 1 step in chunks of 4, 2
    gradient steps of 16 each, 2-step returns."""
    base = dict(
        algo="dqn",
        env=CARTPOLE,
        total_steps=80,
        num_envs=4,
        grad_steps=2,
        batch_size=16,
        buffer_size=256,
        learning_starts=32,
        chunk_iterations=4,
        eval_episodes=2,
        logdir=str(tmp_path),
        sinks=("jsonl",),
        dqn={"hidden": (16,), "n_step": 2, "target_update_every": 3},
    )
    return RunConfig().replace(**{**base, **changes})


def test_resume_is_bitwise_and_the_policy_acts_greedily(tmp_path):
    """A copy of the run cut back to its checkpoint at 48 steps resumes to the same state,
    bitwise (epsilon follows the critic's step count, the target its own)."""
    cfg = _tiny(tmp_path, run_name="full", checkpoint_every=16, keep_checkpoints=4)
    full = train(cfg, quiet=True)
    cut = tmp_path / "cut"
    shutil.copytree(full.run_dir, cut)
    for path in checkpoint.list_checkpoints(cut):
        if checkpoint.read_manifest(path)["env_steps"] > 48:
            shutil.rmtree(path)
    resumed = train(cfg.replace(run_name="cut"), quiet=True, resume=cut)
    assert resumed.summary["resumed_from"] is not None
    leaves = lambda result: jax.tree.leaves((result.state.agent, result.state.buffer))
    for a, b in zip(leaves(resumed), leaves(full), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert int(full.state.agent.critic.steps[0]) == 24
    chunks = [json.loads(x) for x in (full.run_dir / "metrics.jsonl").open()]
    eps = [r["epsilon"] for r in chunks if r.get("kind") == "chunk"]
    assert eps[0] > eps[-1]
    # the saved policy predicts the argmax of its Q-network (the actor side's copy)
    agent = jaxspreeze.load(full.run_dir)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    action = np.asarray(agent.predict(obs))
    planned = plan(cfg, on_devices=False)
    params = jax.tree.map(lambda x: x[0], full.state.agent.actor.params)
    q = dqn.q_network(planned.cfg.dqn, planned.env_spec).apply(params, obs)
    np.testing.assert_array_equal(action.reshape(-1), np.argmax(np.asarray(q), -1))


@pytest.mark.slow
def test_a_sweep_over_the_learning_rate_runs(tmp_path):
    cfg = _tiny(tmp_path, run_name="sweep", total_steps=48)
    result = jaxspreeze.sweep(cfg, grid={"lr": [1e-3, 3e-3], "tau": [0.5]}, quiet=True)
    critic = result.state.agent.critic
    np.testing.assert_allclose(np.asarray(critic.tau), [0.5, 0.5])
    lr = [float(x) for x in np.asarray(critic.opt_state[1].hyperparams["learning_rate"])]
    np.testing.assert_allclose(lr, [1e-3, 3e-3], rtol=1e-6)
    assert len(result.summary["members"]) == 2
    with pytest.raises(ConfigError) as err:  # a member value its validate refuses
        plan(cfg.replace(population=("tau=0.0",)), on_devices=False)
    assert err.value.field == "dqn.tau"


@pytest.mark.slow
def test_a_host_env_trains_through_the_sampling_workers(tmp_path):
    """gymnasium's CartPole: the workers act epsilon-greedily with the published actor
    side, the learner's critic phase reads the device buffer they fill."""
    pytest.importorskip("gymnasium")
    cfg = _tiny(tmp_path, run_name="host", env="gymnasium/CartPole-v1", host_workers=1)
    result = train(cfg, quiet=True)
    assert result.summary["env_steps"] == 80
    assert np.isfinite(result.summary["final_eval_return"])
    assert int(result.state.agent.critic.steps[0]) == 24


@pytest.mark.slow
def test_dqn_learns_cartpole_with_its_defaults(tmp_path):
    result = train(
        RunConfig(algo="dqn", env=CARTPOLE, logdir=str(tmp_path), sinks=("jsonl",)), quiet=True
    )
    assert result.summary["final_eval_return"] > 400


# ------------------------------------------------------------------ placements
@pytest.mark.slow
def test_split_equals_the_single_device_run():
    """Two fake CPU devices: the Q-network, its target and the buffer on the critic
    device, the acting copy on the actor device; bitwise the single-device run."""
    from fake_devices import run_worker

    found = run_worker(HERE / "dqn_worker.py", "split", devices=2, timeout=900)
    assert found["state"]["bitwise"], found["state"]
    assert found["metrics"]["max_abs_diff"] <= 1e-5, found["metrics"]
    for when in ("init", "warm", "end"):
        w = found["where_split"][when]
        assert w["actor"] == [0] and w["critic"] == [1] and w["buffer"] == [1], (when, w)
    assert found["epsilon"][0][0][0] > found["epsilon"][-1][-1][0]


@pytest.mark.slow
def test_data_parallel_equals_the_same_shards_on_one_device():
    from fake_devices import run_worker

    found = run_worker(HERE / "dqn_worker.py", "dp", devices=2, timeout=900)
    assert found["schedule"] == "DataParallel" and found["devices"] == 2
    assert found["replicas_agree"] == [True, True]
    assert found["agent_max_abs_diff"] < 1e-4, found
    assert found["critic_steps"] == [12, 12]


# ------------------------------------------------------------------ refusals
def test_dqn_refuses_continuous_actions_and_picks_the_conv_torso_for_minatar():
    with pytest.raises(ConfigError) as err:
        plan(RunConfig(algo="dqn", env="gymnax/Pendulum-v1"), on_devices=False)
    assert err.value.field == "algo" and "dqn cannot train" in str(err.value)
    assert "discrete action space" in str(err.value)
    minatar = plan(RunConfig(algo="dqn", env="gymnax/Breakout-MinAtar"), on_devices=False)
    assert minatar.cfg.dqn.torso == "minatar"
    assert algos.get("dqn").splits and not algos.get("dqn").on_policy


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg"])
def test_the_off_policy_refusal_names_dqn_too(name):
    with pytest.raises(ConfigError) as err:
        plan(RunConfig(algo=name, env=CARTPOLE), on_devices=False)
    assert err.value.field == "algo"
    message = str(err.value)
    assert f"{name} cannot train {CARTPOLE}" in message and "--algo dqn" in message


def test_bad_dqn_fields_are_refused_by_name():
    for section, field in (
        ({"lr": 0.0}, "dqn.lr"),
        ({"tau": 0.0}, "dqn.tau"),
        ({"tau": 1.5}, "dqn.tau"),
        ({"eps_decay": 0.0}, "dqn.eps_decay"),
        ({"eps_end": -0.1}, "dqn.eps_end"),
        ({"target_update_every": 0}, "dqn.target_update_every"),
        ({"loss": "l1"}, "dqn.loss"),
        ({"n_step": 0}, "dqn.n_step"),
    ):
        with pytest.raises(ConfigError) as err:
            plan(RunConfig(algo="dqn", env=CARTPOLE).replace(dqn=section), on_devices=False)
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:  # 8 envs x (5 - 1) steps before learning
        plan(
            RunConfig(algo="dqn", env=CARTPOLE, learning_starts=16).replace(dqn={"n_step": 5}),
            on_devices=False,
        )
    assert err.value.field == "learning_starts"
