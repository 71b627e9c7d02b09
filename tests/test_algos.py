"""TD3, DDPG, PPO (and SAC) through the shared Algorithm interface: targets, delays,
validation, the shared plumbing, and (slow) learning on Pendulum and CartPole."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos, networks
from jaxspreeze.algos import base, ddpg, ppo, sac, td3
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.envs import env_spec
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.config import RunConfig, fields_of, from_dict, resolve
from jaxspreeze.setup.plan import plan

PROBE = EnvSpec("probe", (2,), False, 1, (-1.0,), (1.0,), 10)
CARTPOLE = EnvSpec("cartpole", (4,), True, 2, (), (), 500)


def _probe_buffer(terminated: bool, n: int = 64) -> replay.ReplayState:
    """One state, reward 1, every step ends: terminated, or else truncated (time limit)."""
    obs = jnp.ones((n, 2))
    tr = Transition(
        obs,
        jax.random.uniform(jax.random.key(0), (n, 1), minval=-1, maxval=1),
        jnp.ones(n),
        jnp.full(n, terminated),
        jnp.full(n, not terminated),
        obs,
    )
    return replay.add(replay.init(jax.tree.map(lambda x: x[0], tr), n), tr)


PROBE_CONFIGS = {
    "sac": sac.SACConfig(hidden=(32,), gamma=0.5, tau=0.1, init_alpha=1e-8, critic_lr=3e-3),
    "td3": td3.TD3Config(hidden=(32,), gamma=0.5, tau=0.1, critic_lr=3e-3),
    "ddpg": ddpg.DDPGConfig(hidden=(32,), gamma=0.5, tau=0.1, critic_lr=3e-3),
}


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg"])
def test_critic_target_probe(name):
    """reward 1 forever, gamma 0.5: the Bellman target makes Q = 1 when every step
    terminates (bootstrap 0) and 1 / (1 - 0.5) = 2 when it is only truncated (bootstrap
    from next_obs). Both buffers train in one vmapped critic phase."""
    spec = algos.get(name)
    cfg = PROBE_CONFIGS[name]
    algo = spec.make(cfg, PROBE, RunConfig(grad_steps=600, batch_size=32))
    state = algo.init(jax.random.key(1))
    buffers = jax.tree.map(lambda *x: jnp.stack(x), _probe_buffer(True), _probe_buffer(False))
    phase = jax.jit(jax.vmap(algo.critic_phase, in_axes=(None, None, 0, None)))
    critic, metrics = phase(state.critic, algo.actor_view(state.actor), buffers, jax.random.key(2))
    num_qs = 1 if name == "ddpg" else 2
    q_net = networks.QEnsemble(cfg.hidden, num_qs=num_qs)
    data = buffers.data
    q = jax.vmap(q_net.apply)(critic.params, data.obs, data.action)
    assert q.shape == (2, num_qs, 64)
    np.testing.assert_allclose(q[0], 1.0, atol=0.1)
    np.testing.assert_allclose(q[1], 2.0, atol=0.1)
    assert bool(jnp.all(metrics["finite"]))


def test_td3_delays_actor_and_target_updates():
    """policy_delay 3: an iteration of G = 6 critic updates carries exactly 2 actor
    updates (and actor-target updates) and 2 critic-target updates, counted by the state's
    update counters and the critic's ``target_updates`` metric (its mean over the phase)."""
    cfg = td3.TD3Config(hidden=(16,), policy_delay=3)
    algo = td3.make(cfg, PROBE, RunConfig(grad_steps=6, batch_size=16))
    assert (algo.critic_steps_per_iteration, algo.actor_steps_per_iteration) == (6, 2)
    state = algo.init(jax.random.key(0))
    buffer = _probe_buffer(True)

    @jax.jit
    def iterations(state, key):
        def body(s, key):
            k1, k2 = jax.random.split(key)
            critic, cm = algo.critic_phase(s.critic, algo.actor_view(s.actor), buffer, k1)
            actor, _ = algo.actor_phase(s.actor, algo.critic_view(s.critic), buffer, k2)
            return base.AgentState(actor, critic), cm["target_updates"]

        return jax.lax.scan(body, state, jax.random.split(key, 5))

    final, target_updates = iterations(state, jax.random.key(1))
    assert int(final.critic.steps) == 5 * 6 and int(final.actor.steps) == 5 * 2
    np.testing.assert_allclose(np.asarray(target_updates) * 6, 2.0)  # per iteration
    moved = [
        not bool(jnp.array_equal(x, y))
        for x, y in zip(
            jax.tree.leaves(final.actor.target_params),
            jax.tree.leaves(state.actor.target_params),
            strict=True,
        )
    ]
    assert all(moved)


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg"])
def test_off_policy_refuses_discrete_actions(name):
    """SAC/TD3/DDPG on CartPole: a ConfigError on --algo that points to PPO."""
    with pytest.raises(ConfigError) as err:
        plan(RunConfig(algo=name, env="gymnax/CartPole-v1"), on_devices=False)
    assert err.value.field == "algo"
    assert "continuous action space" in str(err.value) and "ppo" in str(err.value)
    plan(RunConfig(algo="ppo", env="gymnax/CartPole-v1", num_envs=8, rollout_steps=32), on_devices=False)


def test_td3_grad_steps_must_be_a_multiple_of_policy_delay():
    """The error names grad_steps and the policy_delay it must be a multiple of."""
    cfg = from_dict({"algo": "td3", "grad_steps": 3, "td3": {"policy_delay": 2}})
    with pytest.raises(ConfigError) as err:
        plan(cfg, on_devices=False)
    assert err.value.field == "grad_steps" and "td3.policy_delay" in str(err.value)
    with pytest.raises(ConfigError) as err:
        plan(from_dict({"algo": "td3", "td3": {"policy_delay": 0}}), on_devices=False)
    assert err.value.field == "td3.policy_delay"


def _algo_source(module: object) -> str:
    """The source of an algorithm's module and of the ``algos`` modules it builds on, in
    turn (TD3 and DDPG keep their maths in ``deterministic.py``, the off-policy algorithms
    their replay plumbing in ``off_policy.py``)."""
    sources: dict[str, str] = {}
    todo = [module]
    while todo:
        mod = todo.pop()
        if mod.__name__ not in sources:
            sources[mod.__name__] = inspect.getsource(mod)
            todo += [
                m
                for m in vars(mod).values()
                if inspect.ismodule(m) and m.__name__.startswith("jaxspreeze.algos.")
            ]
    return "\n".join(sources.values())


def test_all_algorithms_share_loop_buffer_and_networks():
    """Every algorithm is an ``Algorithm`` built from the shared networks; none steps an
    env, builds a rollout or a buffer of its own, or defines its own network layers."""
    pendulum = env_spec("gymnax/Pendulum-v1")
    for name in algos.NAMES:
        spec = algos.get(name)
        run = resolve(RunConfig(algo=name, num_envs=8, rollout_steps=32, batch_size=64))
        algo = spec.make(getattr(run, name), pendulum, run)
        assert isinstance(algo, base.Algorithm) and algo.name == name
        assert algo.on_policy == spec.on_policy
        source = _algo_source(importlib.import_module(spec.maths))
        for forbidden in (
            "jaxspreeze.data.rollout",
            "import rollout",
            "jaxspreeze.envs",
            "make_env",
            "env.step(",  # (a recurrent cell's step is not an env's)
            "jaxspreeze.schedules.iteration",
            "jaxspreeze.schedules",
            "import flax",
            "nn.Dense",
        ):
            assert forbidden not in source, (name, forbidden)
        assert "networks." in source
        if not algo.on_policy:
            assert "base.replay_phase(" in source  # one replay-sampling plumbing for all
    assert ppo.make(ppo.PPOConfig(), CARTPOLE, resolve(RunConfig(algo="ppo"))).on_policy


def test_registry_lists_every_algorithm_once():
    """``algos/__init__.py`` is the list: one spec per algorithm module, its ``SPEC``;
    each spec's defaults give every run-level size and pass its own validation."""
    assert algos.NAMES == ("sac", "td3", "ddpg", "ppo", "fasttd3", "fastsac", "pqn", "dqn")
    assert [s.name for s in algos.all_specs()] == list(algos.NAMES)
    for name in algos.NAMES:
        spec = algos.get(name)
        assert spec is importlib.import_module(f"jaxspreeze.algos.{name}").SPEC
        assert set(spec.defaults) == set(base.RUN_SIZES)
        # its config and spec without JAX, its maths beside them
        assert spec.config_cls.__module__ == f"jaxspreeze.algos.{name}_config"
        assert spec.maths == f"jaxspreeze.algos.{name}"
        spec.validate(spec.config_cls(), f"{name}.", None)  # own fields only
        run = resolve(RunConfig(algo=name))
        spec.validate(getattr(run, name), f"{name}.", run)  # with its run-level checks
        assert spec.grad_step_multiple(spec.config_cls()) >= 1
        # the widths change the shapes (FastTD3: the actor's and the critic's own)
        shape = fields_of("shape", spec.config_cls)
        assert "hidden" in shape or {"actor_hidden", "critic_hidden"} <= set(shape)
    assert [s.name for s in algos.all_specs() if s.on_policy] == ["ppo", "pqn"]
    assert algos.get("td3").grad_step_multiple(td3.TD3Config(policy_delay=3)) == 3
    assert sorted(fields_of("shape", algos.get("ppo").config_cls)) == [
        "hidden",
        "memory",
        "memory_size",
        "normalize_obs",
        "policy",
        "tanh_std",
        "torso",
    ]
    assert fields_of("shape", algos.get("fasttd3").config_cls) == (
        "num_atoms",
        "actor_hidden",
        "critic_hidden",
        "torso",
        "critic_layer_norm",
        "normalize_obs",
    )
    assert fields_of("shape", algos.get("fastsac").config_cls) == (
        "num_atoms",
        "actor_hidden",
        "critic_hidden",
        "torso",
        "critic_layer_norm",
        "normalize_obs",
    )
    with pytest.raises(ValueError, match="defaults must give exactly"):
        base.AlgoSpec(
            "x", sac.SACConfig, False, {"num_envs": 1}, sac.supports, sac.validate, sac.make
        )


def test_no_code_outside_algos_compares_the_algorithm_name():
    """Outside ``jaxspreeze/algos`` nothing tests ``algo == "<name>"`` (or ``!=``, ``in``):
    code asks the spec (``algos.get(cfg.algo).on_policy``, ``.supports``, ...)."""
    root = Path(__file__).resolve().parents[1] / "jaxspreeze"
    names = "|".join(algos.NAMES)
    pattern = re.compile(rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    offenders = [
        f"{path.relative_to(root)}:{i}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if "algos" not in path.relative_to(root).parts
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == [], "\n".join(offenders)


def _synthetic_rollout(spec: EnvSpec, T: int = 16, N: int = 4) -> Transition:
    k = jax.random.split(jax.random.key(7), 4)
    obs = jax.random.normal(k[0], (T, N, *spec.obs_shape)) * 3.0 + 1.0
    if spec.discrete:
        action = jax.random.randint(k[1], (T, N), 0, spec.action_dim)
    else:
        action = jax.random.uniform(k[1], (T, N, spec.action_dim), minval=-2.0, maxval=2.0)
    ends = jax.random.uniform(k[2], (T, N))
    return Transition(obs, action, jax.random.normal(k[3], (T, N)), ends < 0.05, ends > 0.95, obs)


def test_ppo_phases_anneal_lr_normalise_obs_and_stay_finite():
    """Two iterations of PPO's phases on a synthetic CartPole rollout: the lr decays
    linearly in the optimiser step count to ``lr * (1 - steps / total)``, the observation
    statistics track the rollout, and both phases report ``finite``."""
    T, N, B, epochs = 16, 4, 16, 2
    cfg = ppo.PPOConfig(hidden=(16,), epochs=epochs, anneal_lr=True, normalize_obs=True)
    run = RunConfig(algo="ppo", num_envs=N, rollout_steps=T, batch_size=B, total_steps=2 * T * N)
    algo = ppo.make(cfg, CARTPOLE, run)
    per_phase = epochs * T * N // B
    assert algo.actor_steps_per_iteration == algo.critic_steps_per_iteration == per_phase
    traj = _synthetic_rollout(CARTPOLE, T, N)

    @jax.jit
    def iterations(state, key):
        def body(s, key):
            k1, k2 = jax.random.split(key)
            critic, cm = algo.critic_phase(s.critic, algo.actor_view(s.actor), traj, k1)
            actor, am = algo.actor_phase(s.actor, algo.critic_view(s.critic), traj, k2)
            return base.AgentState(actor, critic), (cm["finite"], am["finite"])

        return jax.lax.scan(body, state, jax.random.split(key, 2))

    final, finite = iterations(algo.init(jax.random.key(0)), jax.random.key(1))
    assert bool(jnp.all(jnp.stack(finite)))
    total = 2 * per_phase
    assert int(ppo.common.opt_step_count(final.critic.opt_state)) == total
    last_lr = float(final.actor.opt_state[1].hyperparams["learning_rate"])
    np.testing.assert_allclose(last_lr, cfg.lr * (1 - (total - 1) / total), rtol=1e-5)
    obs = np.asarray(traj.obs).reshape(-1, 4)
    np.testing.assert_allclose(final.actor.obs_stats.mean, obs.mean(0), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(final.actor.obs_stats.var, obs.var(0), rtol=1e-3, atol=1e-3)


def test_ppo_behaviour_log_probs_match_the_acting_actor():
    """``behaviour`` acts as ``act`` does and reports log pi(action): a BehaviourRollout
    carrying them (the host path) trains like the plain rollout of the same actor (the
    device path, which recomputes them from the actor that acted). Gaussian actions, some
    clipped to the bounds (discrete ones: the host CartPole tests)."""
    spec = EnvSpec("pendulum", (3,), False, 1, (-2.0,), (2.0,))
    T, N = 8, 4
    cfg = ppo.PPOConfig(hidden=(16,), epochs=2, normalize_obs=True)
    run = RunConfig(algo="ppo", num_envs=N, rollout_steps=T, batch_size=16, total_steps=T * N)
    algo = ppo.make(cfg, spec, run)
    state = jax.jit(algo.init)(jax.random.key(0))
    traj = jax.jit(_synthetic_rollout, static_argnums=(0, 1, 2))(spec, T, N)
    keys = jax.random.split(jax.random.key(3), T)
    behave = jax.jit(jax.vmap(lambda o, k: algo.behaviour(state.actor, (), o, k)[:2]))
    action, extras = behave(traj.obs, keys)
    act = jax.jit(jax.vmap(lambda o, k: algo.act(state.actor, (), o, k, False)[0]))(traj.obs, keys)
    np.testing.assert_array_equal(action, act)
    traj = traj._replace(action=action)
    phase = jax.jit(algo.actor_phase)
    view = algo.critic_view(state.critic)
    plain, m_plain = phase(state.actor, view, traj, jax.random.key(4))
    host, m_host = phase(state.actor, view, base.BehaviourRollout(traj, extras), jax.random.key(4))
    for x, y in zip(jax.tree.leaves(plain), jax.tree.leaves(host), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m_plain["actor_loss"], m_host["actor_loss"], rtol=1e-4, atol=1e-6)
    # an older behaviour policy changes the ratio: the phase uses the numbers given
    older = base.BehaviourRollout(traj, {"logp": extras["logp"] - 0.5})
    _, m_old = phase(state.actor, view, older, jax.random.key(4))
    assert float(m_old["clip_frac"]) > float(m_plain["clip_frac"])


def test_ppo_gaussian_actions_respect_bounds():
    """Continuous PPO: sampled and deterministic actions lie in the env's bounds."""
    spec = env_spec("gymnax/Pendulum-v1")
    algo = ppo.make(ppo.PPOConfig(hidden=(8,)), spec, resolve(RunConfig(algo="ppo")))
    actor = algo.init(jax.random.key(0)).actor
    actor = actor._replace(params=jax.tree.map(lambda p: p + 3.0, actor.params))  # wide
    obs = jax.random.normal(jax.random.key(1), (256, 3)) * 5
    for det in (False, True):
        a, _ = jax.jit(algo.act, static_argnums=4)(actor, (), obs, jax.random.key(2), det)
        assert a.shape == (256, 1) and float(jnp.abs(a).max()) <= 2.0


@pytest.mark.slow  # test_defaults trains PPO end to end in the default run
def test_ppo_trains_end_to_end_tiny(tmp_path):
    """A few PPO iterations on CartPole through the trainer: finite, steps counted."""
    cfg = from_dict(
        {
            "algo": "ppo",
            "env": "gymnax/CartPole-v1",
            "total_steps": 1024,
            "num_envs": 4,
            "rollout_steps": 32,
            "batch_size": 64,
            "chunk_iterations": 8,
            "eval_episodes": 2,
            "logdir": str(tmp_path),
            "run_name": "ppo",
            "sinks": ["jsonl"],
            "ppo": {"hidden": [16], "normalize_obs": True, "anneal_lr": True},
        }
    )
    result = train(cfg, quiet=True)
    assert result.summary["env_steps"] == 1024
    assert np.isfinite(result.summary["final_eval_return"])
    assert result.summary["policy_lag"] == cfg.ppo.epochs * 2


# ---------------------------------------------------------------- slow: learning
PENDULUM_THRESHOLD = -300.0


def _learn(tmp_path, algo: str, **overrides) -> dict:
    data = {
        "algo": algo,
        "logdir": str(tmp_path),
        "run_name": algo,
        "sinks": ["jsonl"],
        "eval_episodes": 8,
        "seed": 0,
        **overrides,
    }
    return train(from_dict(data), quiet=True).summary


OFF_POLICY_PENDULUM = {
    "total_steps": 8000,
    "num_envs": 8,
    "grad_steps": 8,
    "batch_size": 128,
    "buffer_size": 20000,
    "learning_starts": 1000,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["td3", "ddpg"])
def test_learns_pendulum(tmp_path, name):
    """TD3 and DDPG reach a mean eval return above -300 on Pendulum in 8k env steps
    (random policy: about -1200)."""
    summary = _learn(tmp_path, name, **OFF_POLICY_PENDULUM, **{name: {"hidden": [64, 64]}})
    assert summary["final_eval_return"] > PENDULUM_THRESHOLD, summary["final_eval_return"]


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path):
    """PPO reaches a mean eval return >= 400 on CartPole-v1 (max 500) in 100k env steps."""
    summary = _learn(
        tmp_path,
        "ppo",
        env="gymnax/CartPole-v1",
        total_steps=100_000,
        num_envs=16,
        rollout_steps=64,
        batch_size=256,
        chunk_iterations=20,
        ppo={"lr": 1e-3},
    )
    assert summary["final_eval_return"] >= 400, summary["final_eval_return"]


SPLIT_SCRIPT = """
import jax, numpy as np
from jaxspreeze.setup.config import from_dict
from jaxspreeze.run.trainer import train
states = []
for placement in ("single", "split"):
    cfg = from_dict({"algo": "ppo", "env": "gymnax/CartPole-v1", "total_steps": 1024,
        "num_envs": 4, "rollout_steps": 32, "batch_size": 64, "chunk_iterations": 4,
        "placement": placement, "eval_episodes": 2, "logdir": LOGDIR, "run_name": placement,
        "sinks": ["jsonl"], "ppo": {"hidden": [16], "normalize_obs": True, "anneal_lr": True}})
    states.append(train(cfg, quiet=True).state.agent)
for a, b in zip(*map(jax.tree.leaves, states), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
print("OK")
"""


@pytest.mark.slow
def test_ppo_split_placement_matches_single(tmp_path):
    """PPO with the value function and the policy on two (fake CPU) devices gives the
    single-device numbers (allclose: the two programs fuse differently)."""
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2", "JAX_PLATFORMS": "cpu"}
    script = f"LOGDIR = {str(tmp_path)!r}\n" + SPLIT_SCRIPT
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1200
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
