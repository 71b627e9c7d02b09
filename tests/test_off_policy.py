"""What SAC, TD3 and DDPG share (``algos/off_policy.py``) and SAC's temperature step, each on
its own against numbers computed by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze import networks
from jaxspreeze.algos import common, off_policy, sac
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay

SPEC = EnvSpec("probe", (3,), False, 2, (-1.0, -1.0), (1.0, 1.0), 10)


def _batch(n: int = 4) -> Transition:
    obs = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3) / 10
    return Transition(
        obs,
        jnp.full((n, 2), 0.5),
        jnp.array([1.0, 2.0, 3.0, 4.0])[:n],
        jnp.array([True, False, False, False])[:n],
        jnp.array([False, True, False, False])[:n],
        obs + 1.0,
    )


def test_bellman_target_bootstraps_unless_terminated_and_is_held_fixed():
    """r + gamma V' for a truncated or running step, r for a terminated one; no gradient."""
    batch, next_value = _batch(), jnp.array([10.0, 10.0, 20.0, 0.0])
    target = off_policy.bellman_target(batch, 0.5, next_value)
    np.testing.assert_allclose(target, [1.0, 2.0 + 5.0, 3.0 + 10.0, 4.0])
    grad = jax.grad(lambda v: off_policy.bellman_target(batch, 0.5, v).sum())(next_value)
    np.testing.assert_array_equal(grad, 0.0)


def test_fit_q_takes_one_step_on_half_the_squared_error_summed_over_the_ensemble():
    """The reported loss is ``0.5 * mean_B((Q - y)^2)`` summed over the twin critics at the
    parameters before the step; the step lowers it and the metrics are finite."""
    critic = networks.QEnsemble((8,), num_qs=2)
    actor = networks.DeterministicActor((8,), 2)
    _, params = off_policy.init_params(jax.random.key(0), actor, critic, SPEC)
    tx = common.adam(1e-2)
    batch, target = _batch(), jnp.array([1.0, -1.0, 0.5, 2.0])
    q = critic.apply(params, batch.obs, batch.action)
    assert q.shape == (2, 4)
    new, _, metrics = off_policy.fit_q(critic, tx, params, tx.init(params), batch, target)
    want = (0.5 * ((np.asarray(q) - np.asarray(target)) ** 2).mean(-1)).sum()
    np.testing.assert_allclose(metrics["critic_loss"], want, rtol=1e-5)
    np.testing.assert_allclose(metrics["q_mean"], np.asarray(q).mean(), rtol=1e-5, atol=1e-7)
    assert float(metrics["finite"]) == 1.0 and float(metrics["critic_grad_norm"]) > 0
    q_new = critic.apply(new, batch.obs, batch.action)
    assert float((0.5 * ((q_new - target) ** 2).mean(-1)).sum()) < float(want)


def test_init_params_splits_one_key_for_actor_and_critic():
    """The actor from the first half of ``split(key)``, the critic from the second."""
    actor, critic = networks.DeterministicActor((8,), 2), networks.QEnsemble((8,), num_qs=1)
    a, c = off_policy.init_params(jax.random.key(3), actor, critic, SPEC)
    k_actor, k_critic = jax.random.split(jax.random.key(3))
    obs, act = jnp.zeros((1, 3)), jnp.zeros((1, 2))
    want = (actor.init(k_actor, obs), critic.init(k_critic, obs, act))
    for x, y in zip(jax.tree.leaves((a, c)), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(x, y)


def test_replay_algorithm_samples_full_batches_for_the_critic_and_obs_for_the_actor():
    """The critic's update gets sampled transitions, the actor's only their observations;
    each phase runs its own number of steps."""
    seen = {}

    def update_critic(state, view, batch, key):
        seen["critic"] = batch
        return state + 1, {"finite": jnp.float32(1.0)}

    def update_actor(state, view, obs, key):
        seen["actor"] = obs
        return state + 1, {"finite": jnp.float32(1.0)}

    tr = _batch()
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], tr), 4), tr)
    algo = off_policy.replay_algorithm(
        "x",
        init=lambda key: None,
        act=lambda *a: None,
        actor_view=lambda a: a,
        critic_view=lambda c: c,
        update_critic=update_critic,
        update_actor=update_actor,
        critic_steps=4,
        actor_steps=2,
        batch_size=3,
    )
    assert not algo.on_policy and algo.name == "x"
    critic, _ = algo.critic_phase(jnp.int32(0), None, buffer, jax.random.key(0))
    actor, _ = algo.actor_phase(jnp.int32(0), None, buffer, jax.random.key(1))
    assert (int(critic), int(actor)) == (4, 2)
    assert isinstance(seen["critic"], Transition) and seen["critic"].obs.shape == (3, 3)
    assert seen["actor"].shape == (3, 3)


def test_sac_temperature_grows_below_the_target_entropy_and_shrinks_above():
    """Entropy (``-logp``) under the target raises log alpha; over it lowers it (Adam's
    first step moves by about the learning rate)."""
    tx = common.adam(0.1)
    log_alpha = jnp.float32(0.0)
    for logp, sign in ((jnp.full(8, 2.0), 1.0), (jnp.full(8, -3.0), -1.0)):
        new, _ = sac.update_temperature(tx, log_alpha, tx.init(log_alpha), logp, -1.0)
        np.testing.assert_allclose(new, sign * 0.1, rtol=1e-3)
