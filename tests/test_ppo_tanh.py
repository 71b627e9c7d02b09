"""PPO's tanh-squashed Gaussian policy (``--ppo.policy tanh``), reward scaling and the
observation statistics: the squashed density against numpy and against sampling, actions
in bounds, a tiny run that compiles its chunk once, and the statistics across a
checkpoint, a resume, the saved policy and the evaluation (``algos/ppo_policy.py``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_checkpoint import bitwise_equal, host_leaves, tiny_cfg

from jaxspreeze import networks, schedules
from jaxspreeze.algos import common, ppo, ppo_losses, ppo_policy
from jaxspreeze.core.compiles import BACKEND, CompileLog
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.envs import env_spec, make_env
from jaxspreeze.score import tasks as score_tasks
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.config import from_dict
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint


def _np_tanh_logp(mean, std, t) -> float:
    """log density of t = tanh(u), u ~ N(mean, std) diagonal, in float64 numpy."""
    mean, std, t = (np.asarray(x, np.float64) for x in (mean, std, t))
    u = np.arctanh(t)
    logn = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    return float(np.sum(logn - np.log(1.0 - t**2)))


# ---------------------------------------------------------------- the density
def test_tanh_log_prob_against_a_hand_computation():
    """1-D: u = atanh(0.6) = 0.6931, N(u; 0.3, 0.5) / (1 - 0.36); a 2-D action sums its
    dimensions; near the bound (t = 0.999) the stable form agrees with float64 numpy; on
    the bound it is finite (the clip at TANH_BOUND)."""
    u = math.atanh(0.6)
    by_hand = (
        -0.5 * ((u - 0.3) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    ) - math.log(1 - 0.36)
    got = ppo_policy.tanh_gaussian_log_prob(
        jnp.array([[0.3]]), jnp.array([[0.5]]), jnp.array([[0.6]])
    )
    np.testing.assert_allclose(got, [by_hand], rtol=1e-6)
    assert abs(by_hand - _np_tanh_logp([0.3], [0.5], [0.6])) < 1e-12
    mean, std, t = np.array([[0.3, -1.0]]), np.array([[0.5, 2.0]]), np.array([[0.6, -0.999]])
    got = ppo_policy.tanh_gaussian_log_prob(*(jnp.asarray(x, jnp.float32) for x in (mean, std, t)))
    np.testing.assert_allclose(got, [_np_tanh_logp(mean, std, t)], rtol=1e-4)
    # a state-independent std [A] broadcasts like a state-dependent one [B, A]
    flat = ppo_policy.tanh_gaussian_log_prob(
        jnp.asarray(mean), jnp.array([0.5, 2.0]), jnp.asarray(t)
    )
    np.testing.assert_allclose(flat, got, rtol=1e-6)
    edge = ppo_policy.tanh_gaussian_log_prob(jnp.zeros((1, 1)), jnp.ones((1, 1)), jnp.ones((1, 1)))
    u_edge = math.atanh(np.float32(ppo_policy.TANH_BOUND))
    assert np.isfinite(edge).all() and 6.5 < u_edge < 8.0
    # the log-det's stable form: log(1 - tanh(u)^2), and finite where tanh saturates
    us = np.linspace(-5, 5, 41)
    np.testing.assert_allclose(
        ppo_policy.tanh_log_det(jnp.asarray(us)), np.log(1 - np.tanh(us) ** 2), rtol=1e-4, atol=1e-5
    )
    far = float(ppo_policy.tanh_log_det(jnp.float32(30.0)))
    assert far == pytest.approx(2 * (math.log(2) - 30.0), rel=1e-6)


def test_tanh_density_matches_sampling():
    """A histogram of 400k squashed samples (fixed seed) has, in every bin, the mass the
    density gives it (integrated on a fine grid); the density integrates to 1; the
    sample-based entropy estimate averages to -E[log pi] of the same distribution."""
    mean, std, n = 0.4, 0.8, 400_000
    eps = jax.random.normal(jax.random.key(0), (n, 1))
    t = np.asarray(jnp.tanh(mean + std * eps))[:, 0]
    edges = np.linspace(-0.98, 0.98, 29)
    counts, _ = np.histogram(t, edges)
    fine = np.linspace(-0.98, 0.98, 28 * 200 + 1)
    dens = np.exp(
        ppo_policy.tanh_gaussian_log_prob(
            jnp.full((fine.size, 1), mean),
            jnp.full((fine.size, 1), std),
            jnp.asarray(fine)[:, None],
        )
    )
    dens = np.asarray(dens, np.float64)
    mass = np.array(
        [
            np.trapezoid(dens[i * 200 : i * 200 + 201], fine[i * 200 : i * 200 + 201])
            for i in range(28)
        ]
    )
    np.testing.assert_allclose(counts / n, mass, rtol=0.05, atol=2e-4)
    inside = np.mean(np.abs(t) < 0.98)
    assert np.trapezoid(dens, fine) == pytest.approx(inside, abs=2e-3)
    # entropy: H[N] + log-det at the sample, averaged, against -mean(log pi(t))
    m, s = jnp.full((n, 1), mean), jnp.full((n, 1), std)
    estimate = float(ppo_policy.tanh_gaussian_entropy(m, s, eps).mean())
    direct = -float(ppo_policy.tanh_gaussian_log_prob(m, s, jnp.tanh(mean + std * eps)).mean())
    assert estimate == pytest.approx(direct, abs=2e-3)
    gaussian = 0.5 * (1 + math.log(2 * math.pi)) + math.log(std)
    assert estimate < gaussian - 0.1  # the squash lowers the entropy
    assert float(ppo_policy.tanh_gaussian_entropy(m[:1], s[:1], None)[0]) == pytest.approx(gaussian)


# ---------------------------------------------------------------- the policy
ASYM = EnvSpec("asym", (3,), False, 2, (0.0, -3.0), (1.0, 1.0))


@pytest.mark.parametrize("tanh_std", ["state", "scalar"])
def test_tanh_actions_stay_in_bounds_and_deterministic_is_tanh_of_the_mean(tanh_std):
    """Sampled and deterministic actions lie in [low, high] even with saturating
    parameters; the deterministic one is tanh(mean) scaled; the std is at least min_std;
    log pi of the policy's own samples is finite."""
    pol = ppo_policy.for_env(ASYM, (8,), "tanh", tanh_std, 1e-3)
    assert isinstance(pol, ppo_policy.TanhGaussian) and pol.net.state_std == (tanh_std == "state")
    params = pol.net.init(jax.random.key(0), jnp.zeros((1, 3)))
    raw_shape = (2,) if tanh_std == "scalar" else (64, 2)
    obs = jax.random.normal(jax.random.key(1), (64, 3))
    assert pol.net.apply(params, obs)[1].shape == raw_shape
    wide = jax.tree.map(lambda p: p * 50.0 + 3.0, params)  # saturates the squash
    low, high = np.array(ASYM.action_low), np.array(ASYM.action_high)
    for p in (params, wide):
        mean, std = pol.mean_std(p, obs)
        assert float(jnp.min(std)) >= 1e-3
        det = pol.sample(p, obs, jax.random.key(2), True)
        np.testing.assert_allclose(det, jnp.tanh(mean) * pol.scale + pol.bias, rtol=1e-6)
        for a in (det, pol.sample(p, obs, jax.random.key(3), False)):
            assert a.shape == (64, 2)
            assert (np.asarray(a) >= low).all() and (np.asarray(a) <= high).all()
            logp, ent = pol.log_prob_entropy(
                p, obs, a, jax.random.normal(jax.random.key(4), a.shape)
            )
            assert np.isfinite(logp).all() and np.isfinite(ent).all()
    assert np.abs(np.asarray(pol.sample(wide, obs, jax.random.key(2), True)) - high).min() < 1e-3


def test_the_policy_field_selects_the_parameterisation_and_is_checked():
    """clipped (the default outside brax) keeps the state-independent Gaussian, tanh (brax's
    default) the squashed one; discrete actions stay categorical; bad values are
    ConfigErrors naming the field; the new fields that change the parameters are shape
    fields."""
    pendulum = EnvSpec("pendulum", (3,), False, 1, (-2.0,), (2.0,))
    cartpole = EnvSpec("cartpole", (4,), True, 2, (), ())
    assert ppo.PPOConfig().policy is None and ppo.PPOConfig().reward_scaling == 1.0
    assert (
        ppo.FIELD_DEFAULTS["policy"] == "clipped"
        and ppo.FAMILY_DEFAULTS["brax"]["policy"] == "tanh"
    )
    assert isinstance(ppo_policy.for_env(pendulum, (8,)), ppo_policy.ClippedGaussian)
    assert isinstance(ppo_policy.for_env(pendulum, (8,), "tanh"), ppo_policy.TanhGaussian)
    assert isinstance(ppo_policy.for_env(cartpole, (8,), "tanh"), ppo_policy.Categorical)
    with pytest.raises(ValueError, match="unknown PPO policy"):
        ppo_policy.for_env(pendulum, (8,), "beta")
    for change, name in (
        ({"policy": "beta"}, "ppo.policy"),
        ({"tanh_std": "learned"}, "ppo.tanh_std"),
        ({"min_std": 0.0}, "ppo.min_std"),
        ({"reward_scaling": 0.0}, "ppo.reward_scaling"),
    ):
        with pytest.raises(ConfigError) as e:
            ppo.validate(ppo.PPOConfig(**change), "ppo.", None)
        assert e.value.field == name
    ppo.validate(ppo.PPOConfig(policy="tanh", tanh_std="scalar", reward_scaling=0.1), "ppo.", None)


PRESETS = score_tasks.PRESETS  # the package's presets (package data)


@pytest.mark.parametrize(
    "preset, policy",
    [
        ("ppo_brax_halfcheetah", "tanh"),  # clipped: 33 at 200k env steps, tanh: 3,151
        ("ppo_reacher", "clipped"),  # tanh: -78 at 300k env steps, clipped: -33
        ("ppo_cheetah_run", "clipped"),  # tanh: 7 at 49k env steps, clipped: 28
        ("ppo_inverted_pendulum", "clipped"),  # the preset's measured choice (tanh: a tie)
        ("ppo_cartpole_balance", "clipped"),
    ],
)
def test_the_brax_presets_pick_the_policy_that_learned(preset, policy):
    """The measured choice of each preset (experiments/results/ppo_halfcheetah_cpu.md):
    brax/halfcheetah learns only with the tanh policy; reacher and CheetahRun did better
    with the clipped Gaussian at their budgets."""
    assert config.load(PRESETS / f"{preset}.toml").ppo.policy == policy


def test_reward_scaling_scales_the_rewards_of_the_advantages():
    """The advantages and value targets are GAE of ``reward * reward_scaling``; 1.0 leaves
    them exactly as the plain rewards give them."""
    spec = EnvSpec("pendulum", (3,), False, 1, (-2.0,), (2.0,))
    k = jax.random.split(jax.random.key(5), 3)
    obs = jax.random.normal(k[0], (8, 4, 3))
    traj = Transition(
        obs, jnp.zeros((8, 4, 1)), jax.random.normal(k[1], (8, 4)), jnp.zeros((8, 4), bool),
        jax.random.uniform(k[2], (8, 4)) > 0.9, obs + 1.0,
    )  # fmt: skip
    stats = common.stats_init((3,))
    got = {}
    for scaling in (1.0, 0.1):
        learner_algo = ppo.PPOConfig(hidden=(8,), reward_scaling=scaling)
        value_net = networks.ValueNet((8,))
        learner = ppo.Learner(
            learner_algo, ppo_policy.for_env(spec, (8,)), value_net, None, (3,), 8, 1
        )
        params = value_net.init(jax.random.key(0), jnp.zeros((1, 3)))
        view = ppo.CriticView(params, 0.99, 0.95, jnp.float32(scaling))  # the critic's leaves
        got[scaling] = learner.advantages(view, stats, traj)
        want = ppo_losses.advantages(
            value_net, params, 0.99, 0.95, traj._replace(reward=traj.reward * scaling)
        )
        for g, w in zip(got[scaling], want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert not np.allclose(got[1.0][0], got[0.1][0])


# ---------------------------------------------------------------- end to end
def test_tiny_tanh_ppo_trains_on_pendulum_and_compiles_its_chunk_once(tmp_path):
    """policy=tanh with normalize_obs on gymnax/Pendulum-v1 through the trainer: finite,
    the steps counted, the chunk compiled once for its 3 chunks, and the saved policy
    carries the run's final observation statistics (bitwise), which moved from their start."""
    from jaxspreeze.agent.policy import load_policy
    from jaxspreeze.run.trainer import train

    cfg = from_dict(
        {
            "algo": "ppo", "env": "gymnax/Pendulum-v1", "total_steps": 384, "num_envs": 4,
            "rollout_steps": 16, "batch_size": 32, "chunk_iterations": 2, "eval_episodes": 2,
            "logdir": str(tmp_path), "run_name": "tanh", "sinks": ["jsonl"],
            "ppo": {"hidden": [16], "epochs": 2, "policy": "tanh", "normalize_obs": True,
                    "reward_scaling": 0.1},
        }
    )  # fmt: skip
    with CompileLog() as log:
        result = train(cfg, quiet=True)
    summary = result.summary
    assert summary["env_steps"] == 384 and np.isfinite(summary["final_eval_return"])
    chunk_compiles = [n for e, n, _, _ in log.spans if e == BACKEND and "chunk" in n]
    assert len(chunk_compiles) == 1, chunk_compiles
    stats = result.state.agent.actor.obs_stats
    assert float(stats.count[0]) == pytest.approx(384 + 1e-4, rel=1e-6)
    saved = load_policy(tmp_path / "tanh")
    assert bitwise_equal(saved.actor.obs_stats, jax.device_get(stats))
    assert "raw_std" not in str(jax.tree_util.tree_structure(saved.actor.params))  # state std


@pytest.mark.slow  # PPO's state round-trips bitwise in test_checkpoint in the default run
def test_obs_statistics_resume_bitwise_and_the_evaluation_reads_them_frozen(tmp_path):
    """PPO (tanh, normalize_obs): chunk A, checkpoint, chunk B; a fresh schedule restores
    the checkpoint (the statistics come back bitwise) and its chunk B equals the
    uninterrupted one bitwise. The evaluation acts with the statistics it is given and
    leaves them as they were: acting on raw observations with the restored statistics
    equals the policy of the normalised ones, and other statistics act differently."""
    from jaxspreeze.agent.evaluate import make_evaluate

    cfg = tiny_cfg(
        algo="ppo", batch_size=2, num_envs=2, rollout_steps=2, learning_starts=0,
        ppo=ppo.PPOConfig(hidden=(8,), epochs=2, policy="tanh", normalize_obs=True),
    )  # fmt: skip
    schedule = schedules.make(plan(cfg, devices.single()))
    state_a, _ = schedule.chunk(schedule.init())
    path = checkpoint.save(tmp_path, state_a, env_steps=8, chunk=0, config=cfg)
    stats_a = host_leaves(state_a.agent.actor.obs_stats)
    assert float(np.asarray(state_a.agent.actor.obs_stats.count)[0]) > 1.0  # they moved
    state_b, metrics_b = schedule.chunk(state_a)
    fresh = schedules.make(plan(cfg, devices.single()))
    restored, _ = checkpoint.restore(path, fresh.init())
    assert host_leaves(restored.agent.actor.obs_stats) == stats_a
    frozen = jax.device_get(restored.agent.actor)
    again_b, again_metrics = fresh.chunk(restored)
    assert bitwise_equal(again_b, state_b)
    assert bitwise_equal(jax.device_get(again_metrics), jax.device_get(metrics_b))

    # the evaluation of seed 0's actor: actions from the frozen statistics
    algo = ppo.make(cfg.ppo, env_spec(cfg.env), cfg)
    actor = jax.tree.map(lambda x: jnp.asarray(x[0]), frozen)
    obs = jax.random.normal(jax.random.key(1), (5, 3)) * 4.0 + 2.0
    pol = ppo_policy.for_env(env_spec(cfg.env), (8,), "tanh")
    by_hand = pol.sample(actor.params, common.normalize(actor.obs_stats, obs), None, True)
    np.testing.assert_array_equal(algo.act(actor, (), obs, jax.random.key(0), True)[0], by_hand)
    fresh_stats = actor._replace(obs_stats=common.stats_init((3,)))
    assert not np.allclose(algo.act(fresh_stats, (), obs, jax.random.key(0), True)[0], by_hand)
    evaluate = jax.jit(make_evaluate(algo, make_env(cfg.env, 2, cfg.obs_keys), max_steps=20))
    before = host_leaves(actor.obs_stats)
    r1, r2 = evaluate(actor, jax.random.key(2)), evaluate(actor, jax.random.key(2))
    assert host_leaves(actor.obs_stats) == before
    assert bitwise_equal(r1, r2)
    r_other = evaluate(fresh_stats, jax.random.key(2))
    assert not bitwise_equal(r1, r_other)
