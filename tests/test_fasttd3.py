"""FastTD3 (``algos/fasttd3.py``): the categorical critic's projection and loss, clipped
double Q on distributions, per-env exploration noise, and runs end to end (train(), the
CLI with no flag but a tiny budget, determinism; learning under ``-m slow``)."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos, networks
from jaxspreeze.algos import fasttd3
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.setup.config import RunConfig

PROBE = EnvSpec("probe", (3,), False, 1, (-2.0,), (2.0,), 10)
P = jnp.array([[0.1, 0.2, 0.3, 0.25, 0.15]])  # a distribution on the atoms -2 -1 0 1 2


def _project(reward: float, discount: float, probs=P, v_min=-2.0, v_max=2.0) -> np.ndarray:
    out = fasttd3.project(probs, jnp.array([reward]), jnp.array([discount]), v_min, v_max)
    return np.asarray(out[0])


# --- the categorical critic ----------------------------------------------------------------


def test_support_is_evenly_spaced_on_the_value_range():
    np.testing.assert_array_equal(fasttd3.support(-2.0, 2.0, 5), [-2, -1, 0, 1, 2])
    atoms = fasttd3.support(-1000.0, 1000.0, 101)
    assert atoms.shape == (101,) and float(atoms[0]) == -1000 and float(atoms[-1]) == 1000
    np.testing.assert_allclose(np.diff(atoms), 20.0, rtol=1e-6)


@pytest.mark.parametrize(
    ("reward", "discount", "expected"),
    [
        # shifted by exactly one atom: each atom's mass moves one atom up; the top atom's
        # shifted value (3) is clipped to v_max and joins the mass already there
        (1.0, 1.0, [0.0, 0.1, 0.2, 0.3, 0.4]),
        # half an atom: every mass splits half and half between its two neighbours
        (0.5, 1.0, [0.05, 0.15, 0.25, 0.275, 0.275]),
        # discount 0.5 shrinks the support towards 0 (-1, -0.5, 0, 0.5, 1)
        (0.0, 0.5, [0.0, 0.2, 0.525, 0.275, 0.0]),
        # a terminal transition (discount 0): all mass at the reward, 0.25 between 0 and 1
        (0.25, 0.0, [0.0, 0.0, 0.75, 0.25, 0.0]),
        # a reward below v_min: every atom clipped to v_min
        (-5.0, 0.5, [1.0, 0.0, 0.0, 0.0, 0.0]),
        # above v_max (terminal): all at v_max
        (7.0, 0.0, [0.0, 0.0, 0.0, 0.0, 1.0]),
    ],
)  # fmt: skip
def test_projection_against_hand_computed_examples(reward, discount, expected):
    """Atoms -2..2 (one apart), P = (0.1, 0.2, 0.3, 0.25, 0.15): the projection of
    ``reward + discount * Z`` by hand; the mass stays 1."""
    out = _project(reward, discount)
    np.testing.assert_allclose(out, expected, atol=1e-6)
    assert out.sum() == pytest.approx(1.0, abs=1e-6)
    assert (out >= 0).all()


def test_projection_keeps_mass_and_shifts_by_one_atom_on_the_default_support():
    """101 atoms on [-1000, 1000] (20 apart): reward 20 moves every atom one up exactly
    (the top one stays at v_max); random rewards and discounts keep the mass."""
    k = jax.random.key(0)
    probs = jax.nn.softmax(jax.random.normal(k, (64, 101)), -1)
    out = fasttd3.project(probs, jnp.full(64, 20.0), jnp.ones(64), -1000.0, 1000.0)
    np.testing.assert_allclose(out[:, 1:-1], probs[:, :-2], atol=1e-6)
    np.testing.assert_allclose(out[:, 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(out[:, -1], probs[:, -2] + probs[:, -1], atol=1e-6)
    reward = 500 * jax.random.normal(jax.random.key(1), (64,))
    discount = jax.random.uniform(jax.random.key(2), (64,))
    out = fasttd3.project(probs, reward, discount, -1000.0, 1000.0)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)
    # the projected mean is the clipped shifted mean where nothing was clipped
    atoms = fasttd3.support(-1000.0, 1000.0, 101)
    shifted = jnp.clip(reward[:, None] + discount[:, None] * atoms, -1000, 1000)
    np.testing.assert_allclose(
        fasttd3.mean_value(out, atoms), (probs * shifted).sum(-1), rtol=1e-4, atol=1e-2
    )


def test_clipped_double_q_takes_the_lower_mean_distribution_per_sample():
    """Sample 0: critic 0's mean is lower; sample 1: critic 1's; a tie takes critic 0."""
    atoms = jnp.array([-1.0, 0.0, 1.0])
    low, high = jnp.array([0.6, 0.3, 0.1]), jnp.array([0.1, 0.3, 0.6])
    mid = jnp.array([0.2, 0.6, 0.2])
    probs = jnp.stack(
        [jnp.stack([low, high, mid]), jnp.stack([high, low, jnp.array([0.0, 1.0, 0.0])])]
    )  # [Q=2, B=3, K=3]; sample 2: two means of 0 (a tie)
    out = fasttd3.lower_mean(probs, atoms)
    np.testing.assert_array_equal(out, jnp.stack([low, low, mid]))


def test_cross_entropy_is_summed_over_critics_and_least_at_the_target():
    target = jnp.array([[0.0, 0.25, 0.75]])
    logits = jnp.stack([jnp.log(target + 1e-12), jnp.zeros((1, 3))])
    expected = -(0.25 * np.log(0.25) + 0.75 * np.log(0.75)) + np.log(3.0)
    assert float(fasttd3.cross_entropy(logits, target)) == pytest.approx(expected, rel=1e-5)


# --- per-env exploration noise -------------------------------------------------------------


def test_noise_scales_differ_across_envs_and_lie_in_range():
    scales = np.asarray(fasttd3.noise_scales(jnp.uint32(7), 256, 0.001, 0.4))
    assert scales.shape == (256, 1)
    assert scales.min() >= 0.001 and scales.max() <= 0.4
    assert len(np.unique(scales)) == 256  # every env its own
    assert scales.max() - scales.min() > 0.3  # spread over the range
    again = np.asarray(fasttd3.noise_scales(jnp.uint32(7), 256, 0.001, 0.4))
    np.testing.assert_array_equal(scales, again)  # the same at every step
    other = np.asarray(fasttd3.noise_scales(jnp.uint32(8), 256, 0.001, 0.4))
    assert not np.array_equal(scales, other)


def test_act_explores_each_env_with_its_own_scale():
    """Over many steps each env's action noise has the std of its own scale (in the
    actions' [-1, 1] units: half the action range here); deterministic acting has none."""
    run = RunConfig(algo="fasttd3", grad_steps=2, batch_size=8)
    # raw observations: the actor side is FastTD3's own (normalisation: test_offpolicy_obsnorm)
    cfg = fasttd3.FastTD3Config(actor_hidden=(8,), critic_hidden=(8,), normalize_obs=False)
    algo = fasttd3.make(cfg, PROBE, run)
    actor = algo.init(jax.random.key(0)).actor
    obs = jnp.zeros((6, 3))
    keys = jax.random.split(jax.random.key(1), 4000)
    acts = jax.vmap(lambda k: algo.act(actor, (), obs, k, False)[0])(keys)[..., 0]  # [S, N]
    mean = algo.act(actor, (), obs, keys[0], True)[0][:, 0]
    scales = fasttd3.noise_scales(actor.noise_seed, 6, cfg.noise_min, cfg.noise_max)[:, 0]
    np.testing.assert_allclose(np.std(acts, 0) / 2.0, scales, rtol=0.1, atol=2e-3)
    np.testing.assert_allclose(np.mean(acts, 0), mean, atol=0.05)
    np.testing.assert_array_equal(
        algo.act(actor, (), obs, keys[1], True)[0], algo.act(actor, (), obs, keys[2], True)[0]
    )
    seeds = {int(algo.init(jax.random.key(s)).actor.noise_seed) for s in range(4)}
    assert len(seeds) == 4  # each seed its own scales


# --- registry and config --------------------------------------------------------------------


def test_registered_with_its_run_level_defaults():
    spec = algos.get("fasttd3")
    assert spec is fasttd3.SPEC and "fasttd3" in algos.NAMES and not spec.on_policy
    d = spec.defaults
    assert d["grad_steps"] == 2 and d["rollout_steps"] == 1  # 2 updates per vectorised env step
    # FastTD3's replay ratio (2 x 32,768 / 1,024 = 64), at sizes a 2-core CPU runs in minutes
    assert d["grad_steps"] * d["batch_size"] / (d["num_envs"] * d["rollout_steps"]) == 64
    cfg = fasttd3.FastTD3Config()
    assert (cfg.num_atoms, cfg.tau, cfg.weight_decay, cfg.noise_min, cfg.noise_max) == (
        101,
        0.1,
        0.1,
        0.001,
        0.4,
    )
    assert cfg.critic_hidden[0] > cfg.actor_hidden[0]  # the critic is wider
    assert spec.supports(PROBE) is None
    assert "continuous" in spec.supports(dataclasses.replace(PROBE, discrete=True))


@pytest.mark.parametrize(
    ("cfg", "field", "message"),
    [
        (fasttd3.FastTD3Config(num_atoms=1), "fasttd3.num_atoms", "at least 2"),
        (fasttd3.FastTD3Config(num_atoms=2.5), "fasttd3.num_atoms", "must be an integer"),
        (fasttd3.FastTD3Config(v_min=5.0, v_max=5.0), "fasttd3.v_min", "must be < fasttd3.v_max"),
        (fasttd3.FastTD3Config(noise_min=0.5), "fasttd3.noise_min", "must be <= fasttd3.noise_max"),
        (fasttd3.FastTD3Config(noise_max=-1.0), "fasttd3.noise_max", "must be >= 0"),
        (fasttd3.FastTD3Config(weight_decay=-0.1), "fasttd3.weight_decay", "must be >= 0"),
        (fasttd3.FastTD3Config(critic_hidden=()), "fasttd3.critic_hidden", "positive layer widths"),
        (fasttd3.FastTD3Config(tau=2.0), "fasttd3.tau", "must be in [0, 1]"),
    ],
)  # fmt: skip
def test_validation_names_the_bad_field(cfg, field, message):
    with pytest.raises(ConfigError) as err:
        fasttd3.validate(cfg, "fasttd3.", None)
    assert err.value.field == field and message in str(err.value)


def test_grad_steps_must_be_a_multiple_of_the_policy_delay():
    with pytest.raises(ConfigError) as err:
        fasttd3.validate(fasttd3.FastTD3Config(), "fasttd3.", RunConfig(grad_steps=3))
    assert err.value.field == "grad_steps"


def test_one_update_moves_both_sides_and_reports_finite_metrics():
    """The critic phase fits the categorical critics (AdamW), the actor phase ascends them."""
    run = RunConfig(algo="fasttd3", grad_steps=2, batch_size=16)
    cfg = fasttd3.FastTD3Config(actor_hidden=(16,), critic_hidden=(32,), normalize_obs=False)
    algo = fasttd3.make(cfg, PROBE, run)
    state = algo.init(jax.random.key(0))
    logits = jax.eval_shape(
        lambda: networks.DistributionalQEnsemble((32,), 101).apply(
            state.critic.params, jnp.zeros((5, 3)), jnp.zeros((5, 1))
        )
    )
    assert logits.shape == (2, 5, 101)
    k = jax.random.split(jax.random.key(1), 3)
    n = 64
    data = Transition(
        obs=jax.random.normal(k[0], (n, 3)),
        action=jax.random.uniform(k[1], (n, 1), minval=-2, maxval=2),
        reward=jax.random.normal(k[2], (n,)),
        terminated=jnp.zeros(n, bool).at[::7].set(True),
        truncated=jnp.zeros(n, bool),
        next_obs=jax.random.normal(k[0], (n, 3)) * 0.5,
    )
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], data), n), data)
    critic, cm = algo.critic_phase(state.critic, algo.actor_view(state.actor), buffer, k[1])
    actor, am = algo.actor_phase(state.actor, algo.critic_view(critic), buffer, k[2])
    assert bool(cm["finite"]) and bool(am["finite"])
    assert int(critic.steps) == 2 and int(actor.steps) == 1
    assert float(cm["target_updates"]) == 0.5  # the target moved on the 2nd update only
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), critic.params, state.critic.params)
    assert all(jax.tree.leaves(moved))
    assert not np.array_equal(
        jax.tree.leaves(actor.params)[0], jax.tree.leaves(state.actor.params)[0]
    )
    assert int(actor.noise_seed) == int(state.actor.noise_seed)  # the scales persist


# --- end to end -----------------------------------------------------------------------------


@pytest.fixture
def tiny_fasttd3(tiny_config):
    """A FastTD3 run small enough to compile and train in seconds."""
    return tiny_config(
        algo="fasttd3",
        fasttd3={"actor_hidden": (16, 16), "critic_hidden": (32, 32), "num_atoms": 11},
    )


def _metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # fasttd3's default run is test_defaults'; compile-once is SAC's and PPO's there
def test_tiny_run_end_to_end_compiles_the_chunk_once(tiny_fasttd3):
    from jaxspreeze.core.compiles import TRACE, CompileLog
    from jaxspreeze.run.trainer import train

    with CompileLog() as log:
        result = train(tiny_fasttd3, quiet=True)
    traces = [name for event, name, _, _ in log.spans if event == TRACE]
    assert sum("chunk" in name for name in traces) == 1, traces
    rows = [r for r in _metrics(result.run_dir) if "critic_loss" in r]
    assert len(rows) >= 2  # several chunks ran on the one compiled program
    for row in rows:
        for key in ("critic_loss", "actor_loss", "q_mean", "target_outside"):
            assert np.isfinite(row[key]), row
    assert np.isfinite(result.summary["final_eval_return"])


@pytest.mark.slow  # same seed, same result: SAC's whole-run check is in the default run
def test_same_seed_same_params(tiny_fasttd3):
    from jaxspreeze.run.trainer import train

    a = train(tiny_fasttd3.replace(run_name="a"), quiet=True, save=False)
    b = train(tiny_fasttd3.replace(run_name="b"), quiet=True, save=False)
    for x, y in zip(jax.tree.leaves(a.state.agent), jax.tree.leaves(b.state.agent), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    c = train(tiny_fasttd3.replace(run_name="c", seed=1), quiet=True, save=False)
    assert not np.array_equal(
        jax.tree.leaves(a.state.agent.critic.params)[0],
        jax.tree.leaves(c.state.agent.critic.params)[0],
    )


@pytest.mark.slow  # test_defaults trains fasttd3 with its defaults in the default run
def test_cli_algo_fasttd3_runs_on_the_default_env(tmp_path, capsys):
    """``jaxspreeze train --algo fasttd3`` with only a tiny budget (and where to write)."""
    from jaxspreeze.cli import main

    code = main(["train", "--algo", "fasttd3", "--total-steps", "1200", "--logdir", str(tmp_path)])
    assert code == 0
    (run_dir,) = tmp_path.iterdir()
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["algo"] == "fasttd3" and cfg["env"] == "gymnax/Pendulum-v1"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert np.isfinite(summary["final_eval_return"])


@pytest.mark.slow
def test_fasttd3_learns_pendulum_with_its_defaults(tmp_path):
    """The default run (no flag but where to write) beats a random policy (about -1200)
    by far: better than -400."""
    from jaxspreeze.run.trainer import train

    result = train(RunConfig(algo="fasttd3", logdir=str(tmp_path), sinks=("jsonl",)), quiet=True)
    assert result.summary["final_eval_return"] > -400, result.summary


@pytest.mark.slow  # every algorithm's split shares its schedule; SAC's two-device run is in the default run
def test_split_equals_the_single_device_run():
    """Two fake CPU devices: the distributional critic on the critic device, the actor
    (and its noise seed) on the actor device; bitwise the single-device run, each chunk
    program traced once."""
    from test_split import PROGRAMS, run_worker

    f = run_worker("equal", "fasttd3", timeout=900)["fasttd3"]
    assert f["state"]["bitwise"], f["state"]
    assert f["metrics"]["max_abs_diff"] <= 1e-4, f["metrics"]
    assert f["metric_keys_equal"]
    for when in ("init", "warm", "end"):
        w = f["where_split"][when]
        assert w["actor"] == [0] and w["critic"] == [1] and w["buffer"] == [1], (when, w)
    for placement, names in PROGRAMS.items():
        for name in names:
            assert f[f"traces_{placement}"].get(name) == 1, (placement, name)
