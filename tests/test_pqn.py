"""PQN: its Q(lambda) targets, epsilon schedule and acting, a probe it must learn, and its
place in the machinery (resume, sweeps, the policy, placements, refusals)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze import algos
from jaxspreeze.algos import pqn
from jaxspreeze.algos.dqn_config import DQNConfig
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Placement, Transition
from jaxspreeze.envs import env_spec
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.config import RunConfig, load, resolve, to_dict
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint

CARTPOLE = "gymnax/CartPole-v1"


def _targets(reward, next_q, term=None, trunc=None, gamma=0.5, lam=0.5):
    """Q(lambda) targets of one env's ``[T]`` lists, as a ``[T]`` numpy array."""
    col = lambda x, dtype=jnp.float32: jnp.asarray(x, dtype)[:, None]
    zeros = [0] * len(reward)
    out = pqn.q_lambda_targets(
        col(reward),
        col(next_q),
        col(term or zeros, bool),
        col(trunc or zeros, bool),
        gamma,
        lam,
    )
    return np.asarray(out)[:, 0]


# ------------------------------------------------------------------ Q(lambda) targets
def test_q_lambda_targets_by_hand():
    """gamma 0.5, lambda 0.5, rewards 1..4, max Q(next) 10..40: G_3 = 4 + 0.5 * 40 = 24
    (the rollout's end bootstraps), G_2 = 3 + 0.5 (30 + 0.5 (24 - 30)) = 16.5, ..."""
    r, q = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]
    np.testing.assert_allclose(_targets(r, q), [6.28125, 11.125, 16.5, 24.0])
    # a termination at t=1: G_1 = r_1 alone, and the trace stops there
    np.testing.assert_allclose(_targets(r, q, term=[0, 1, 0, 0]), [4.0, 2.0, 16.5, 24.0])
    # a truncation at t=1: G_1 = r_1 + gamma Q(final obs) = 2 + 10; the trace stops there
    np.testing.assert_allclose(_targets(r, q, trunc=[0, 1, 0, 0]), [6.5, 12.0, 16.5, 24.0])
    # a termination at the last step: no bootstrap there
    np.testing.assert_allclose(_targets(r, q, term=[0, 0, 0, 1])[3], 4.0)


def test_lambda_zero_is_one_step_q_learning_and_one_is_monte_carlo():
    rng = np.random.default_rng(0)
    r, q = rng.normal(size=6).tolist(), rng.normal(size=6).tolist()
    term, trunc = [0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 1, 0]
    gamma = 0.9
    one_step = [r[t] + gamma * (1 - term[t]) * q[t] for t in range(6)]
    np.testing.assert_allclose(
        _targets(r, q, term, trunc, gamma, 0.0), one_step, rtol=1e-6, atol=1e-6
    )
    # lambda 1: the discounted rewards to the episode's end; a termination adds nothing,
    # a truncation and the rollout's end add gamma * Q(next obs) there
    mc = [0.0] * 6
    mc[2] = r[2]
    mc[1] = r[1] + gamma * mc[2]
    mc[0] = r[0] + gamma * mc[1]
    mc[4] = r[4] + gamma * q[4]
    mc[3] = r[3] + gamma * mc[4]
    mc[5] = r[5] + gamma * q[5]
    np.testing.assert_allclose(_targets(r, q, term, trunc, gamma, 1.0), mc, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ epsilon and acting
def test_epsilon_falls_linearly_then_stays():
    eps = lambda step: float(pqn.epsilon(1.0, 0.05, 0.5, jnp.asarray(step), 100))
    assert eps(0) == pytest.approx(1.0)
    assert eps(25) == pytest.approx(0.525)
    assert eps(50) == pytest.approx(0.05)
    assert eps(90) == pytest.approx(0.05)
    # the learner's epsilon reads the optimiser's steps: eps_start before the first update,
    # eps_end once the decay's updates are done
    algo = _tiny_algo(eps_decay=0.5)
    state = algo.init(jax.random.key(0))
    assert state.critic == ()  # one network: the whole state is the actor side
    phase = jax.jit(algo.actor_phase)  # one compile for the five phases below
    actor, metrics = phase(state.actor, (), _rollout(), jax.random.key(1))
    assert float(metrics["epsilon"]) == pytest.approx(1.0)
    # 5 iterations of 4 x 8 in the run (total_steps 160), 2 epochs x 2 minibatches each:
    # 20 updates, the decay over the first 10
    for done, expected in ((4, 0.62), (8, 0.24)):
        actor, metrics = phase(actor, (), _rollout(), jax.random.key(done))
        assert float(metrics["epsilon"]) == pytest.approx(expected)
        assert 1.0 - 0.95 * done / 10 == pytest.approx(expected)
    _, metrics = phase(actor, (), _rollout(), jax.random.key(9))  # 12 done
    assert float(metrics["epsilon"]) == pytest.approx(0.05)


def _tiny_algo(**cfg):
    """PQN on CartPole's spec: 5 iterations of 4 envs x 8 steps, 2 epochs of 2 x 16."""
    run = RunConfig(algo="pqn", num_envs=4, rollout_steps=8, batch_size=16, total_steps=160)
    config = pqn.PQNConfig(hidden=(16,), epochs=2, **cfg)
    return pqn.make(config, env_spec(CARTPOLE), resolve(run))


def _rollout(T=8, N=4):
    key = jax.random.key(3)
    return Transition(
        jax.random.normal(key, (T, N, 4)),
        jax.random.randint(key, (T, N), 0, 2),
        jnp.ones((T, N)),
        jnp.zeros((T, N), bool),
        jnp.zeros((T, N), bool),
        jax.random.normal(jax.random.fold_in(key, 1), (T, N, 4)),
    )


def test_greedy_acting_is_the_argmax_and_epsilon_one_is_uniform():
    algo = _tiny_algo()
    actor = algo.init(jax.random.key(0)).actor
    obs = jax.random.normal(jax.random.key(1), (256, 4))
    q = pqn.q_network(pqn.PQNConfig(hidden=(16,)), env_spec(CARTPOLE)).apply(actor.params, obs)
    greedy, _ = algo.act(actor, (), obs, jax.random.key(2), True)
    np.testing.assert_array_equal(np.asarray(greedy), np.argmax(np.asarray(q), -1))
    assert len(set(np.asarray(greedy).tolist())) == 2  # both actions are someone's argmax
    # epsilon 0 acts greedily; epsilon 1 uniformly (about half of each action)
    zero = actor._replace(eps_start=jnp.float32(0.0))
    acted, _ = algo.act(zero, (), obs, jax.random.key(2), False)
    np.testing.assert_array_equal(np.asarray(acted), np.asarray(greedy))
    big = jnp.zeros((4096, 4))
    acted, _ = algo.act(actor, (), big, jax.random.key(2), False)  # eps_start 1
    assert 0.45 < float(jnp.mean(acted)) < 0.55


# ------------------------------------------------------------------ a probe it must learn
def test_a_contextual_bandit_is_learned():
    """One-step episodes: the observation is a one-hot context of 3, the reward 1 for the
    action equal to the context (else 0). PQN's phase on rollouts its own act collects
    must learn the greedy action = the context and Q(s, best) near the scaled reward."""
    spec = EnvSpec("probe/bandit", (3,), True, 3)
    run = RunConfig(algo="pqn", num_envs=16, rollout_steps=4, batch_size=16, total_steps=3840)
    config = pqn.PQNConfig(hidden=(32,), lr=3e-3)
    algo = pqn.make(config, spec, resolve(run))  # 60 iterations
    actor = algo.init(jax.random.key(0)).actor
    eye = jnp.eye(3)

    @jax.jit
    def iteration(actor, key):
        k_ctx, k_act, k_learn = jax.random.split(key, 3)
        ctx = jax.random.randint(k_ctx, (4, 16), 0, 3)
        obs = eye[ctx]
        action, _ = jax.vmap(lambda o, k: algo.act(actor, (), o, k, False))(
            obs, jax.random.split(k_act, 4)
        )
        reward = (action == ctx).astype(jnp.float32)
        done = jnp.ones((4, 16), bool)
        traj = Transition(obs, action, reward, done, jnp.zeros_like(done), obs)
        return algo.actor_phase(actor, (), traj, k_learn)

    for i in range(60):
        actor, metrics = iteration(actor, jax.random.key(i))
    assert bool(metrics["finite"])
    greedy, _ = algo.act(actor, (), eye, jax.random.key(0), True)
    np.testing.assert_array_equal(np.asarray(greedy), [0, 1, 2])
    q = np.asarray(pqn.q_network(config, spec).apply(actor.params, eye))
    np.testing.assert_allclose(np.diag(q), 0.1, atol=0.03)  # reward_scaling 0.1


# ------------------------------------------------------------------ runs
def _tiny(tmp_path, **changes) -> RunConfig:
    """8 iterations of 4 envs x 8 steps in chunks of 2, minibatches of 16."""
    base = dict(
        algo="pqn",
        env=CARTPOLE,
        total_steps=256,
        num_envs=4,
        rollout_steps=8,
        batch_size=16,
        chunk_iterations=2,
        eval_episodes=2,
        logdir=str(tmp_path),
        sinks=("jsonl",),
        pqn={"hidden": (16,), "epochs": 2},
    )
    return RunConfig().replace(**{**base, **changes})


@pytest.mark.slow  # resume goes through PPO's tested path (the default run stays under 10 minutes)
def test_resume_is_bitwise_and_the_policy_acts_greedily(tmp_path):
    """A copy of the run cut back to its checkpoint at 128 steps resumes to the same state,
    bitwise (epsilon and the learning rate follow the optimiser's step count)."""
    cfg = _tiny(tmp_path, run_name="full", checkpoint_every=128, keep_checkpoints=4)
    full = train(cfg, quiet=True)
    cut = tmp_path / "cut"
    shutil.copytree(full.run_dir, cut)
    for path in checkpoint.list_checkpoints(cut):
        if checkpoint.read_manifest(path)["env_steps"] > 128:
            shutil.rmtree(path)
    resumed = train(cfg.replace(run_name="cut"), quiet=True, resume=cut)
    assert resumed.summary["resumed_from"] is not None
    leaves = lambda result: jax.tree.leaves(result.state.agent)
    for a, b in zip(leaves(resumed), leaves(full), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    # epsilon fell over the run (eps_decay 0.25 of 8 iterations: end from the 3rd on)
    chunks = [json.loads(x) for x in (full.run_dir / "metrics.jsonl").open()]
    eps = [r["epsilon"] for r in chunks if r.get("kind") == "chunk"]
    assert eps[0] > eps[-1] == pytest.approx(0.05)
    # the saved policy predicts the argmax of its Q-network
    agent = jaxspreeze.load(full.run_dir)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    action = np.asarray(agent.predict(obs))
    planned = plan(cfg, on_devices=False)
    params = jax.tree.map(lambda x: x[0], full.state.agent.actor.params)
    q = pqn.q_network(planned.cfg.pqn, planned.env_spec).apply(params, obs)
    np.testing.assert_array_equal(action.reshape(-1), np.argmax(np.asarray(q), -1))


@pytest.mark.slow
def test_a_sweep_over_the_learning_rate_runs(tmp_path):
    cfg = _tiny(tmp_path, run_name="sweep", total_steps=64)
    result = jaxspreeze.sweep(cfg, grid={"lr": [1e-3, 3e-3], "eps_end": [0.1]}, quiet=True)
    actor = result.state.agent.actor
    np.testing.assert_allclose(np.asarray(actor.lr), [1e-3, 3e-3], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(actor.eps_end), [0.1, 0.1], rtol=1e-6)
    assert len(result.summary["members"]) == 2
    with pytest.raises(ConfigError) as err:  # a member value its validate refuses
        plan(cfg.replace(population=("eps_decay=0.0",)), on_devices=False)
    assert err.value.field == "pqn.eps_decay"


def test_a_host_env_trains_through_the_rollout_schedule(tmp_path):
    """gymnasium's CartPole: the workers act epsilon-greedily with the parameters one
    version behind (PPO's HostRollout), and the learner's phase reads their rollout."""
    pytest.importorskip("gymnasium")
    cfg = _tiny(tmp_path, run_name="host", env="gymnasium/CartPole-v1", total_steps=128)
    result = train(cfg, quiet=True)
    assert result.summary["env_steps"] == 128
    assert np.isfinite(result.summary["final_eval_return"])
    chunks = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").open()]
    assert [r["policy_lag_versions"] for r in chunks if r.get("kind") == "chunk"][-1] == 2


@pytest.mark.slow
def test_data_parallel_over_two_fake_devices(tmp_path):
    """``--placement data`` over two (fake) CPU devices: each shards its envs and
    minibatches, the optimiser averages the gradients."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2"}
    flags = ["--algo", "pqn", "--env", CARTPOLE, "--placement", "data", "--total-steps", "512"]
    flags += ["--num-envs", "8", "--rollout-steps", "8", "--batch-size", "16", "--pqn.hidden", "16"]
    flags += ["--eval-episodes", "2", "--sinks", "jsonl", "--logdir", str(tmp_path)]
    cmd = [sys.executable, "-m", "jaxspreeze", "train", *flags, "--run-name", "dp"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "dp" / "summary.json").read_text())
    assert summary["topology"]["placement_kind"] == "data"
    assert summary["topology"]["data_parallel_devices"] == 2 and summary["env_steps"] == 512


@pytest.mark.slow
def test_pqn_learns_cartpole_with_its_defaults(tmp_path):
    result = train(
        RunConfig(algo="pqn", env=CARTPOLE, logdir=str(tmp_path), sinks=("jsonl",)), quiet=True
    )
    assert result.summary["final_eval_return"] > 400


# ------------------------------------------------------------------ the chunk's layout
def test_the_layernorm_layout_rule_names_one_seed_on_a_cpu():
    """fused.unbatched: one slot, a LayerNorm network, XLA's CPU backend; nothing else."""
    from jaxspreeze.schedules.fused import unbatched

    ln = _tiny_algo()
    assert ln.layer_norm and unbatched(ln, 1, "cpu")
    assert not unbatched(ln, 2, "cpu") and not unbatched(ln, 1, "gpu")
    assert not unbatched(_tiny_algo(layer_norm=False), 1, "cpu")
    spec = algos.get("dqn")
    run = resolve(RunConfig(algo="dqn", total_steps=1000))
    for layer_norm in (False, True):
        dqn = spec.make(DQNConfig(layer_norm=layer_norm), env_spec(CARTPOLE), run)
        assert unbatched(dqn, 1, "cpu") is layer_norm
    # the fast recipes' critic with its LayerNorms (1.3x squeezed: seed_axis_cpu.md)
    pendulum = env_spec("gymnax/Pendulum-v1")
    for name in ("fasttd3", "fastsac"):
        spec = algos.get(name)
        run = resolve(RunConfig(algo=name, env="gymnax/Pendulum-v1", total_steps=1000))
        for layer_norm in (False, True):
            recipe = spec.make(spec.config_cls(critic_layer_norm=layer_norm), pendulum, run)
            assert unbatched(recipe, 1, "cpu") is layer_norm


def test_the_unbatched_chunk_computes_the_vmapped_one(tmp_path):
    """One seed of PQN on a CPU: the chunk scans the seed's iteration without the axis and
    returns what the vmapped chunk does, in the same shapes ([1, ...] states, [K, 1]
    metrics), to float rounding (two programs; XLA orders their sums apart)."""
    from jaxspreeze import schedules
    from jaxspreeze.setup import devices

    cfg = resolve(_tiny(tmp_path))
    s = schedules.make(plan(cfg, devices.single()))
    state = s.init()

    def vmapped(st):
        step = lambda c, _: jax.vmap(s.per_seed)(c)
        return jax.lax.scan(step, st, None, length=s.iterations_per_chunk)

    got = jax.jit(s.fused_chunk)(state)
    want = jax.jit(vmapped)(state)
    for fn, kernel in ((s.fused_chunk, (4, 16)), (vmapped, (1, 4, 16))):  # the first layer's
        eqns = jax.make_jaxpr(fn)(state).jaxpr.eqns
        carry = [v.aval.shape for e in eqns if e.primitive.name == "scan" for v in e.invars]
        assert kernel in carry, carry
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):  # the same draws, bitwise
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        if jnp.issubdtype(a.dtype, jnp.floating):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------ placements, refusals
def test_split_placements_are_refused_and_auto_keeps_one_device():
    for placement in ("split", "split-data"):
        with pytest.raises(ConfigError) as err:
            plan(RunConfig(algo="pqn", env=CARTPOLE, placement=placement), on_devices=False)
        assert err.value.field == "placement" and f"{placement} places" in str(err.value)
    assert not algos.get("pqn").splits and algos.get("ppo").splits
    # auto on two devices would split: PQN's plan keeps it on the actor's device
    planned = plan(RunConfig(algo="pqn", env=CARTPOLE), on_devices=False)
    a, b = object(), object()
    placed = planned.placed(Placement(a, b, a))
    assert placed.placement.actor is a and not placed.placement.split
    assert placed.schedule == "fused"


def test_pqn_refuses_continuous_actions_and_picks_the_conv_torso_for_minatar():
    with pytest.raises(ConfigError) as err:
        plan(RunConfig(algo="pqn", env="gymnax/Pendulum-v1"), on_devices=False)
    assert err.value.field == "algo" and "pqn cannot train" in str(err.value)
    assert "discrete action space" in str(err.value)
    minatar = plan(RunConfig(algo="pqn", env="gymnax/Breakout-MinAtar"), on_devices=False)
    assert minatar.cfg.pqn.torso == "minatar"
    assert plan(RunConfig(algo="pqn", env=CARTPOLE), on_devices=False).cfg.pqn.torso == "mlp"


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg"])
def test_the_off_policy_refusal_names_the_algorithm_and_the_flag(name):
    with pytest.raises(ConfigError) as err:
        plan(RunConfig(algo=name, env=CARTPOLE), on_devices=False)
    assert err.value.field == "algo"
    message = str(err.value)
    assert f"{name} cannot train {CARTPOLE}" in message and "--algo pqn" in message


def test_bad_pqn_fields_are_refused_by_name():
    for section, field in (
        ({"lr": 0.0}, "pqn.lr"),
        ({"q_lambda": 1.5}, "pqn.q_lambda"),
        ({"eps_end": -0.1}, "pqn.eps_end"),
        ({"epochs": 0}, "pqn.epochs"),
        ({"optimizer": "sgd"}, "pqn.optimizer"),
    ):
        with pytest.raises(ConfigError) as err:
            plan(RunConfig(algo="pqn", env=CARTPOLE).replace(pqn=section), on_devices=False)
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        plan(RunConfig(algo="pqn", env=CARTPOLE, batch_size=300), on_devices=False)
    assert err.value.field == "batch_size"


# ------------------------------------------------------------------ saved configs
def test_a_config_saved_before_the_shared_epsilon_fields_and_memory_loads_the_same(tmp_path):
    """A config.json as PQN and DQN runs wrote it before their epsilon fields were shared
    (``epsilon_config.EpsilonGreedy``) and before ``--pqn.memory``: the tables in their old
    order, no memory fields. It loads to the config it trained with: each algorithm's own
    epsilon defaults, what it set, and a feed-forward PQN."""
    data = to_dict(RunConfig(algo="pqn", env=CARTPOLE))
    pqn_keys = ("lr", "gamma", "q_lambda", "eps_start", "eps_end", "eps_decay", "epochs",
                "max_grad_norm", "optimizer", "anneal_lr", "reward_scaling", "hidden",
                "layer_norm", "torso")  # fmt: skip
    dqn_keys = ("lr", "gamma", "tau", "target_update_every", "double", "n_step", "eps_start",
                "eps_end", "eps_decay", "loss", "max_grad_norm", "hidden", "layer_norm",
                "torso")  # fmt: skip
    old_pqn = {k: data["pqn"][k] for k in pqn_keys} | {"eps_end": 0.1}
    old_dqn = {k: data["dqn"][k] for k in dqn_keys} | {"eps_start": 0.9}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, "pqn": old_pqn, "dqn": old_dqn}))
    loaded = load(path)
    assert loaded.pqn == pqn.PQNConfig(eps_end=0.1) and loaded.pqn.memory == "none"
    assert loaded.pqn.eps_decay == 0.25 and loaded.dqn.eps_decay == 0.5
    assert loaded.dqn == DQNConfig(eps_start=0.9)
    saved = to_dict(loaded)
    assert set(saved["pqn"]) == set(pqn_keys) | {"memory", "memory_size", "last_action"}
    assert set(saved["dqn"]) == set(dqn_keys)
    with pytest.raises(ConfigError) as err:  # the shared check names each algorithm's field
        plan(RunConfig(algo="dqn", env=CARTPOLE).replace(dqn={"eps_decay": 0.0}), on_devices=False)
    assert err.value.field == "dqn.eps_decay" and "a fraction of the run" in str(err.value)
