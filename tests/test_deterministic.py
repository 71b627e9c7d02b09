"""DDPG and TD3 on one deterministic-policy module (``algos/deterministic.py``): the pieces
TD3 adds, each on its own, and DDPG as TD3's machinery with none of them."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import networks
from jaxspreeze.algos import base, ddpg, deterministic, td3
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.setup.config import RunConfig

PROBE = EnvSpec("probe", (2,), False, 1, (-2.0,), (2.0,), 10)


def test_configs_keep_their_fields_and_defaults():
    """DDPG's eight hyperparameters are the shared ones; TD3 has the same and its five own."""
    shared = {
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "gamma": 0.99,
        "tau": 0.005,
        "exploration_noise": 0.1,
        "hidden": (256, 256),
        "torso": "auto",
        "normalize_obs": False,
    }
    assert dataclasses.asdict(ddpg.DDPGConfig()) == shared
    own = {
        "policy_delay": 2,
        "target_noise": 0.2,
        "target_noise_clip": 0.5,
        "actor_q": "first",
        "delay_targets": True,
    }
    assert dataclasses.asdict(td3.TD3Config()) == {**shared, **own}


@pytest.mark.parametrize(
    ("spec", "cfg", "field", "message"),
    [
        (ddpg.SPEC, ddpg.DDPGConfig(actor_lr=0.0, gamma=2.0), "ddpg.actor_lr", "must be > 0, got 0.0"),
        (ddpg.SPEC, ddpg.DDPGConfig(tau=1.5), "ddpg.tau", "must be in [0, 1], got 1.5"),
        (ddpg.SPEC, ddpg.DDPGConfig(exploration_noise=-1), "ddpg.exploration_noise", "must be >= 0, got -1"),
        (ddpg.SPEC, ddpg.DDPGConfig(hidden=()), "ddpg.hidden", "must be positive layer widths, got ()"),
        (td3.SPEC, td3.TD3Config(policy_delay=0, gamma=2.0), "td3.policy_delay", "must be > 0, got 0"),
        (td3.SPEC, td3.TD3Config(target_noise_clip=-0.5), "td3.target_noise_clip", "must be >= 0, got -0.5"),
        (td3.SPEC, td3.TD3Config(policy_delay=1.5), "td3.policy_delay", "must be an integer, got 1.5"),
        (td3.SPEC, td3.TD3Config(actor_q="max"), "td3.actor_q", "must be one of first, min, got 'max'"),
        (td3.SPEC, td3.TD3Config(delay_targets="no"), "td3.delay_targets", "must be true or false, got 'no'"),
    ],
)  # fmt: skip
def test_validation_names_the_first_bad_field(spec, cfg, field, message):
    """The checks run in their order (lr, then gamma and tau, then noises, then widths)."""
    with pytest.raises(ConfigError) as err:
        spec.validate(cfg, f"{spec.name}.", None)
    assert err.value.field == field and message in str(err.value)


def test_target_policy_smoothing_clips_the_noise_and_the_action():
    """Noise of std 10 is clipped to +-0.5 around the action, the action to [-1, 1]."""
    key = jax.random.key(0)
    smoothing = deterministic.Smoothing(std=10.0, clip=0.5)
    out = deterministic.smoothed(jnp.zeros((1000, 2)), key, smoothing)
    assert float(jnp.abs(out).max()) == 0.5 and float(jnp.mean(jnp.abs(out) == 0.5)) > 0.9
    out = deterministic.smoothed(jnp.full((1000, 2), 0.9), key, smoothing)
    assert float(out.max()) == 1.0 and float(out.min()) == pytest.approx(0.4)
    still = deterministic.smoothed(jnp.full((3, 1), 0.3), key, deterministic.Smoothing(0.0, 0.5))
    np.testing.assert_array_equal(still, np.float32(0.3))


def test_delayed_polyak_moves_the_target_on_every_delay_th_update():
    """delay 2, tau 0.5, target 0 and online 1: updates 2 and 4 move it halfway, 1 and 3 not."""
    steps = jnp.arange(1, 5)
    moved, due = jax.vmap(
        lambda s: deterministic.delayed_polyak({"w": 0.0}, {"w": 1.0}, 0.5, s, 2)
    )(steps)
    np.testing.assert_array_equal(due, [False, True, False, True])
    np.testing.assert_array_equal(moved["w"], [0.0, 0.5, 0.0, 0.5])


def test_delayed_sides_carry_update_counters_and_plain_ones_do_not():
    """TD3's state is DDPG's (same leaves at the same paths) plus one counter per side and
    the critic's target policy smoothing leaves."""
    run = RunConfig(grad_steps=4, batch_size=8)
    plain = ddpg.make(ddpg.DDPGConfig(hidden=(8,)), PROBE, run).init(jax.random.key(0))
    delayed = td3.make(td3.TD3Config(hidden=(8,)), PROBE, run).init(jax.random.key(0))
    assert isinstance(plain.actor, deterministic.DDPGActor)
    assert isinstance(delayed.actor, deterministic.TD3Actor)
    paths = lambda tree: {
        jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree)
    }
    extra = paths(delayed) - paths(plain)
    assert extra == {
        ".actor.steps", ".critic.steps", ".critic.target_noise", ".critic.target_noise_clip"
    }  # fmt: skip
    assert int(delayed.actor.steps) == int(delayed.critic.steps) == 0


def test_ddpg_is_td3_machinery_without_its_additions():
    """One critic, zero smoothing noise and a policy delay of 1 on TD3's path (counters,
    smoothing, delayed targets) train the same parameters as DDPG's path."""
    cfg = ddpg.DDPGConfig(hidden=(16,), gamma=0.5, tau=0.1)
    run = RunConfig(grad_steps=4, batch_size=16)
    plain = ddpg.make(cfg, PROBE, run)
    td3_like = deterministic.Variant("td3-as-ddpg", num_qs=1, smoothing=True, policy_delay=1)
    no_noise = td3.TD3Config(**dataclasses.asdict(cfg), target_noise=0.0, target_noise_clip=0.0)
    general = deterministic.make(no_noise, PROBE, run, td3_like)
    assert general.actor_steps_per_iteration == plain.actor_steps_per_iteration == 4
    n = 64
    k = jax.random.split(jax.random.key(0), 4)
    obs, next_obs = jax.random.normal(k[0], (n, 2)), jax.random.normal(k[1], (n, 2))
    action = jax.random.uniform(k[2], (n, 1), minval=-2.0, maxval=2.0)
    ends = jax.random.uniform(k[3], (n,))
    tr = Transition(obs, action, jnp.sin(obs[:, 0]), ends < 0.1, ends > 0.9, next_obs)
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], tr), n), tr)

    def iterations(algo):
        def body(s, key):
            k1, k2 = jax.random.split(key)
            critic, _ = algo.critic_phase(s.critic, algo.actor_view(s.actor), buffer, k1)
            actor, _ = algo.actor_phase(s.actor, algo.critic_view(s.critic), buffer, k2)
            return base.AgentState(actor, critic), None

        state = algo.init(jax.random.key(1))
        return jax.jit(lambda s: jax.lax.scan(body, s, jax.random.split(jax.random.key(2), 3)))(
            state
        )[0]

    a, b = iterations(plain), iterations(general)
    for side in ("actor", "critic"):
        for field in ("params", "target_params"):
            for x, y in zip(
                jax.tree.leaves(getattr(getattr(a, side), field)),
                jax.tree.leaves(getattr(getattr(b, side), field)),
                strict=True,
            ):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert int(b.critic.steps) == 12 and int(b.actor.steps) == 12


def _one_obs_buffer(n: int = 32) -> replay.ReplayState:
    """A buffer whose every transition starts at the same observation (any batch's obs)."""
    obs = jnp.tile(jnp.array([[0.3, -0.7]]), (n, 1))
    action = jnp.linspace(-2.0, 2.0, n)[:, None]
    zeros = jnp.zeros((n,))
    tr = Transition(obs, action, zeros + 1.0, zeros > 1, zeros > 1, obs)
    return replay.add(replay.init(jax.tree.map(lambda x: x[0], tr), n), tr)


@pytest.mark.parametrize("actor_q", ["first", "min"])
def test_the_actor_ascends_q1_or_the_twins_smaller_value(actor_q):
    """actor_q first: the actor's loss is -Q1(s, pi(s)); min: -min(Q1, Q2)(s, pi(s)), the
    critics as handed to the actor phase."""
    cfg = td3.TD3Config(hidden=(16,), actor_q=actor_q)
    algo = td3.make(cfg, PROBE, RunConfig(grad_steps=2, batch_size=8))
    state = algo.init(jax.random.key(3))
    _, metrics = algo.actor_phase(
        state.actor, algo.critic_view(state.critic), _one_obs_buffer(), jax.random.key(4)
    )
    obs = jnp.array([[0.3, -0.7]])
    pi = networks.DeterministicActor((16,), 1).apply(state.actor.params, obs) * 2.0
    q = networks.QEnsemble((16,), num_qs=2).apply(state.critic.params, obs, pi)[:, 0]
    assert float(q[0]) != pytest.approx(float(q[1]))  # the twins differ at the start
    want = -float(q.min() if actor_q == "min" else q[0])
    assert float(metrics["actor_loss"]) == pytest.approx(want, rel=1e-5)


def test_undelayed_targets_move_the_critics_every_update_and_the_actors_by_the_compound():
    """tau 0.5, policy_delay 2, 4 critic updates and 2 actor updates per phase. Delayed (the
    default): the critic's target moves on 2 of the 4 (target_updates 0.5) and the actor's
    by 0.5 at each actor update; delay_targets False: the critic's after all 4 and the
    actor's by 1 - (1 - 0.5)^2 = 0.75 (two critic updates' worth) at each of its updates."""
    run = RunConfig(grad_steps=4, batch_size=8)
    buffer = _one_obs_buffer()
    for delayed, moved, updates in ((True, 0.5, 0.5), (False, 0.75, 1.0)):
        # actor_lr 0: the online actor stays where it is put (0), so its target after two
        # updates is exactly (1 - moved)^2 of where it started
        cfg = td3.TD3Config(hidden=(8,), tau=0.5, delay_targets=delayed, actor_lr=0.0)
        algo = td3.make(cfg, PROBE, run)
        state = algo.init(jax.random.key(0))
        _, cm = algo.critic_phase(
            state.critic, algo.actor_view(state.actor), buffer, jax.random.key(1)
        )
        assert float(cm["target_updates"]) == updates
        actor = state.actor._replace(params=jax.tree.map(jnp.zeros_like, state.actor.params))
        after, _ = algo.actor_phase(
            actor, algo.critic_view(state.critic), buffer, jax.random.key(2)
        )
        assert int(after.steps) == 2
        for old, new in zip(
            jax.tree.leaves(state.actor.target_params),
            jax.tree.leaves(after.target_params),
            strict=True,
        ):
            np.testing.assert_allclose(new, (1 - moved) ** 2 * old, rtol=1e-6, atol=1e-7)
