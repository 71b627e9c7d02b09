"""FastSAC (``algos/fastsac.py``): SAC's actor and temperature on FastTD3's categorical twin
critic; registered with FastTD3's run-level shape; runs end to end from the CLI with its
defaults (a tiny budget), compiles its chunk once, and the split's pieces equal the fused
iteration (in process, one device; bitwise on two fake devices under ``-m slow``).

The categorical critic's maths (projection, lower mean, cross-entropy) is tested for
FastTD3 (tests/test_fasttd3.py); n-step returns in tests/test_nstep.py."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos
from jaxspreeze.algos import fastsac, fasttd3, sac
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.setup.config import RunConfig, resolve

PROBE = EnvSpec("probe", (3,), False, 1, (-2.0,), (2.0,), 10)
SMALL = {"actor_hidden": (16, 16), "critic_hidden": (32, 32), "num_atoms": 11}


def test_registered_with_fasttd3s_run_level_shape():
    spec = algos.get("fastsac")
    assert spec is fastsac.SPEC and not spec.on_policy and spec.label == "FastSAC"
    assert dict(spec.defaults) == dict(fasttd3.DEFAULTS)  # replay ratio 64, CPU-sized
    cfg = fastsac.FastSACConfig()
    assert (cfg.num_atoms, cfg.tau, cfg.weight_decay, cfg.n_step) == (101, 0.1, 0.1, 1)
    assert cfg.critic_hidden[0] > cfg.actor_hidden[0]  # the critic is wider
    assert spec.supports(PROBE) is None
    assert "continuous" in spec.supports(dataclasses.replace(PROBE, discrete=True))


@pytest.mark.parametrize(
    ("cfg", "field", "message"),
    [
        (fastsac.FastSACConfig(num_atoms=1), "fastsac.num_atoms", "at least 2"),
        (fastsac.FastSACConfig(v_min=5.0, v_max=5.0), "fastsac.v_min", "must be < fastsac.v_max"),
        (fastsac.FastSACConfig(init_alpha=0.0), "fastsac.init_alpha", "must be > 0"),
        (fastsac.FastSACConfig(weight_decay=-0.1), "fastsac.weight_decay", "must be >= 0"),
        (fastsac.FastSACConfig(n_step=0), "fastsac.n_step", "at least 1"),
        (fastsac.FastSACConfig(actor_hidden=()), "fastsac.actor_hidden", "positive layer widths"),
        (fastsac.FastSACConfig(gamma=1.5), "fastsac.gamma", "must be in [0, 1]"),
    ],
)  # fmt: skip
def test_validation_names_the_bad_field(cfg, field, message):
    with pytest.raises(ConfigError) as err:
        fastsac.validate(cfg, "fastsac.", None)
    assert err.value.field == field and message in str(err.value)


def _buffer(n: int = 64) -> replay.ReplayState:
    k = jax.random.split(jax.random.key(1), 3)
    data = Transition(
        obs=jax.random.normal(k[0], (n, 3)),
        action=jax.random.uniform(k[1], (n, 1), minval=-2, maxval=2),
        reward=jax.random.normal(k[2], (n,)),
        terminated=jnp.zeros(n, bool).at[::7].set(True),
        truncated=jnp.zeros(n, bool).at[3::11].set(True),
        next_obs=jax.random.normal(k[0], (n, 3)) * 0.5,
    )
    return replay.add(replay.init(jax.tree.map(lambda x: x[0], data), n), data)


@pytest.mark.parametrize("n_step", [pytest.param(1, marks=pytest.mark.slow), 3])  # 1: -m slow
def test_one_update_moves_both_sides_and_the_temperature(n_step):
    """The critic phase fits the categorical critics; the actor phase is SAC's (its
    temperature moves and it reports SAC's metrics)."""
    run = resolve(RunConfig(algo="fastsac", num_envs=4, grad_steps=2, batch_size=16))
    cfg = fastsac.FastSACConfig(n_step=n_step, normalize_obs=False, **SMALL)  # SAC's own actor side
    algo = fastsac.make(cfg, PROBE, run)
    state = algo.init(jax.random.key(0))
    assert isinstance(state.actor, sac.SACActor)
    assert float(jnp.exp(state.actor.log_alpha)) == pytest.approx(cfg.init_alpha)
    buffer, k = _buffer(), jax.random.split(jax.random.key(2))
    critic, cm = algo.critic_phase(state.critic, algo.actor_view(state.actor), buffer, k[0])
    actor, am = algo.actor_phase(state.actor, algo.critic_view(critic), buffer, k[1])
    assert bool(cm["finite"]) and bool(am["finite"])
    assert {"critic_loss", "q_mean", "target_outside"} <= set(cm)
    assert {"actor_loss", "entropy", "alpha"} <= set(am)
    assert int(critic.steps) == 2
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), critic.params, state.critic.params)
    assert all(jax.tree.leaves(moved))
    target_moved = jax.tree.map(
        lambda a, b: bool(jnp.any(a != b)), critic.target_params, state.critic.target_params
    )
    assert all(jax.tree.leaves(target_moved))  # tau at every update
    assert float(actor.log_alpha) != float(state.actor.log_alpha)
    # deterministic acting is the squashed mean, in the bounds; sampling explores
    obs = jnp.zeros((5, 3))
    mean = algo.act(actor, (), obs, k[0], True)[0]
    np.testing.assert_array_equal(mean, algo.act(actor, (), obs, k[1], True)[0])
    sampled = [algo.act(actor, (), obs, k[i], False)[0] for i in (0, 1)]
    assert not np.array_equal(*sampled)
    assert float(jnp.abs(mean).max()) <= 2.0


@pytest.mark.slow
def test_split_pieces_equal_the_fused_iteration():
    """The split's per-seed pieces (actor phase on the observation-only buffer, critic
    phase with 2-step runs on the full buffer, observations normalised: the default) give
    the fused iteration bitwise, on one device (the two-device run is ``test_split_equals_the_single_device_run``)."""
    from jaxspreeze.envs import make_env
    from jaxspreeze.schedules.iteration import Iteration

    run = resolve(RunConfig(algo="fastsac", num_envs=4, grad_steps=2, batch_size=16))
    cfg = fastsac.FastSACConfig(n_step=2, **SMALL)
    env = make_env("gymnax/Pendulum-v1", 4)
    algo = fastsac.make(cfg, env.spec, run)
    fused = Iteration(algo, env, 1, 256, 32, obs_buffer=False)
    split = Iteration(algo, env, 1, 256, 32, obs_buffer=True)

    @jax.jit
    def by_pieces(s):  # the split schedule's order: collect, critic side, actor side
        critic_view = algo.critic_view(s.agent.critic)
        env_c, key, env_steps, iteration, c, _ = split.collect(
            s.agent.actor, s.env, s.key, s.env_steps, s.iteration, s.actor_updates
        )
        critic, buffer, _ = split.critic_side(
            s.agent.critic, s.buffer, c.traj, c.actor_view, c.critic_key
        )
        obs_buffer = split.store_obs(s.obs_buffer, c.traj.obs)
        actor, actor_updates, _ = split.actor_side(  # then the observation statistics
            s.agent.actor, obs_buffer, critic_view, c.actor_key, s.actor_updates, c.acted,
            c.traj.obs,
        )
        agent = s.agent._replace(actor=actor, critic=critic)
        return s._replace(
            agent=agent, env=env_c, buffer=buffer, obs_buffer=obs_buffer, key=key,
            env_steps=env_steps, iteration=iteration, actor_updates=actor_updates,
        )  # fmt: skip

    key = jax.random.key(3)
    a = jax.jit(fused.warmup)(fused.init(key))
    b = jax.jit(split.warmup)(split.init(key))
    step = jax.jit(fused.__call__)
    for _ in range(3):
        a, _ = step(a)
        b = by_pieces(b)
        for x, y in zip(jax.tree.leaves(a.agent), jax.tree.leaves(b.agent), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(b.agent.critic.steps) == 6


# --- end to end -----------------------------------------------------------------------------


@pytest.fixture
def tiny_fastsac(tiny_config):
    """A FastSAC run small enough to compile and train in seconds."""
    return tiny_config(algo="fastsac", fastsac={**SMALL, "n_step": 3})


@pytest.mark.slow  # fastsac's default run is test_defaults'; its split pieces are checked below
def test_tiny_run_end_to_end_compiles_the_chunk_once(tiny_fastsac):
    from jaxspreeze.core.compiles import TRACE, CompileLog
    from jaxspreeze.run.trainer import train

    with CompileLog() as log:
        result = train(tiny_fastsac, quiet=True)
    traces = [name for event, name, _, _ in log.spans if event == TRACE]
    assert sum("chunk" in name for name in traces) == 1, traces
    rows = [
        json.loads(line)
        for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()
        if "critic_loss" in line
    ]
    assert len(rows) >= 2  # several chunks ran on the one compiled program
    for row in rows:
        for key in ("critic_loss", "actor_loss", "q_mean", "alpha", "entropy"):
            assert np.isfinite(row[key]), row
    assert np.isfinite(result.summary["final_eval_return"])


@pytest.mark.slow  # test_defaults trains fastsac with its defaults in the default run
def test_cli_algo_fastsac_runs_on_the_default_env_with_its_defaults(tmp_path):
    """``jaxspreeze train --algo fastsac`` with only a tiny budget (and where to write)."""
    from jaxspreeze.cli import main

    code = main(["train", "--algo", "fastsac", "--total-steps", "1200", "--logdir", str(tmp_path)])
    assert code == 0
    (run_dir,) = tmp_path.iterdir()
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["algo"] == "fastsac" and cfg["env"] == "gymnax/Pendulum-v1"
    assert cfg["fastsac"]["critic_hidden"] == list(fastsac.FastSACConfig().critic_hidden)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert np.isfinite(summary["final_eval_return"])


@pytest.mark.slow
def test_fastsac_learns_pendulum_with_its_defaults(tmp_path):
    """The default run (no flag but where to write) beats a random policy (about -1200)
    by far: better than -400."""
    from jaxspreeze.run.trainer import train

    result = train(RunConfig(algo="fastsac", logdir=str(tmp_path), sinks=("jsonl",)), quiet=True)
    assert result.summary["final_eval_return"] > -400, result.summary


@pytest.mark.slow
def test_split_equals_the_single_device_run():
    """Two fake CPU devices, 2-step returns: the categorical critic and its buffer on the
    critic device, SAC's actor and temperature on the actor device; bitwise the
    single-device run, each chunk program traced once."""
    from test_split import PROGRAMS, run_worker

    f = run_worker("equal", "fastsac", timeout=900)["fastsac"]
    assert f["state"]["bitwise"], f["state"]
    assert f["metrics"]["max_abs_diff"] <= 1e-4, f["metrics"]
    assert f["metric_keys_equal"]
    for when in ("init", "warm", "end"):
        w = f["where_split"][when]
        assert w["actor"] == [0] and w["critic"] == [1] and w["buffer"] == [1], (when, w)
    for placement, names in PROGRAMS.items():
        for name in names:
            assert f[f"traces_{placement}"].get(name) == 1, (placement, name)
