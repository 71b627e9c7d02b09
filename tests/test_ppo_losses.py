"""PPO's losses, densities, advantages and minibatch epochs, each on its own against numbers
computed by hand or by a direct formula (``algos/ppo_losses.py``, ``algos/ppo_policy.py``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import networks
from jaxspreeze.algos import common, ppo_losses, ppo_policy
from jaxspreeze.core.types import EnvSpec, Transition

# ratios r = [0.5, 0.9, 1.5] against advantages A = [1, -1, 2], clip_eps 0.2:
# clip(r) = [0.8, 0.9, 1.2]; r A = [0.5, -0.9, 3.0]; clip(r) A = [0.8, -0.9, 2.4];
# the pessimistic min = [0.5, -0.9, 2.4], mean 2.0 / 3
RATIO = np.array([0.5, 0.9, 1.5])
ADV = jnp.array([1.0, -1.0, 2.0])
OLD_LOGP = jnp.array([-1.0, -2.0, -0.5])
LOGP = OLD_LOGP + jnp.log(jnp.asarray(RATIO, jnp.float32))
ENTROPY = jnp.array([1.0, 2.0, 3.0])


def _log_ndtr(x: float) -> float:
    """log Phi(x), the standard normal CDF, by the error function."""
    return math.log(0.5 * (1.0 + math.erf(x / math.sqrt(2.0))))


def test_policy_loss_against_a_hand_computation():
    """The clipped surrogate, its entropy bonus, approximate KL and clipped fraction."""
    loss, info = ppo_losses.policy_loss(LOGP, OLD_LOGP, ADV, ENTROPY, 0.2, 0.1)
    np.testing.assert_allclose(loss, -2.0 / 3 - 0.1 * 2.0, rtol=1e-6)
    np.testing.assert_allclose(info.entropy, 2.0, rtol=1e-6)
    kl = np.mean((RATIO - 1.0) - np.log(RATIO))  # [0.1931, 0.0054, 0.0945]
    np.testing.assert_allclose(info.approx_kl, kl, rtol=1e-5)
    np.testing.assert_allclose(info.clip_frac, 2.0 / 3, rtol=1e-6)  # 0.5 and 1.5 lie outside


def test_policy_loss_gradient_stops_where_the_clip_binds():
    """d loss / d logp_i = -r_i A_i / B where the unclipped term is the min, and 0 where the
    clipped one is (r = 1.5 > 1.2 with A > 0: no incentive to move further)."""
    grad = jax.grad(lambda lp: ppo_losses.policy_loss(lp, OLD_LOGP, ADV, ENTROPY, 0.2, 0.0)[0])
    expected = -RATIO * np.asarray(ADV) / 3.0
    expected[2] = 0.0
    np.testing.assert_allclose(grad(LOGP), expected, rtol=1e-5, atol=1e-7)


def test_a_runaway_log_ratio_gives_a_finite_loss_and_no_gradient():
    """A saturated tanh action's log-probability can move by millions in one step (its
    density far in the tail of a narrow Gaussian): exp of that is inf, and inf * A < 0 made
    the loss -inf and the parameters NaN (PPO on brax/inverted_pendulum with the tanh
    policy). The tanh policy's log-ratio bound keeps the loss finite, the sample gives no
    gradient, the other samples keep theirs; without a bound (the other policies) the
    loss is the formula's, bit for bit."""
    bound = ppo_policy.MAX_LOG_RATIO
    assert ppo_policy.TanhGaussian.max_log_ratio == bound
    assert ppo_policy.ClippedGaussian.max_log_ratio is None is ppo_policy.Categorical.max_log_ratio
    logp = LOGP.at[1].set(OLD_LOGP[1] + 1e6)  # A = -1: the unclipped, unbounded term
    loss, info = ppo_losses.policy_loss(logp, OLD_LOGP, ADV, ENTROPY, 0.2, 0.0, bound)
    assert np.isfinite(float(loss)) and np.isfinite(float(info.approx_kl))
    assert not np.isfinite(float(ppo_losses.policy_loss(logp, OLD_LOGP, ADV, ENTROPY, 0.2, 0.0)[0]))
    grad = jax.grad(
        lambda lp: ppo_losses.policy_loss(lp, OLD_LOGP, ADV, ENTROPY, 0.2, 0.0, bound)[0]
    )
    g = np.asarray(grad(logp))
    assert np.all(np.isfinite(g)) and g[1] == 0.0
    np.testing.assert_allclose(g[0], -RATIO[0] * 1.0 / 3.0, rtol=1e-5)
    ratio = jnp.exp(LOGP - OLD_LOGP)
    surrogate = jnp.minimum(ratio * ADV, jnp.clip(ratio, 0.8, 1.2) * ADV).mean()
    unbounded = ppo_losses.policy_loss(LOGP, OLD_LOGP, ADV, ENTROPY, 0.2, 0.1)[0]
    assert float(unbounded) == float(-surrogate - 0.1 * ENTROPY.mean())


def test_value_loss_and_advantage_normalisation():
    """``vf_coef * 0.5 * mean((V - R)^2)``; normalised advantages have mean 0 and std 1."""
    v, returns = jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 2.0, 5.0])
    np.testing.assert_allclose(ppo_losses.value_loss(v, returns, 0.5), 0.25 * 5.0 / 3, rtol=1e-6)
    adv = ppo_losses.normalized(jnp.array([1.0, 2.0, 3.0, 10.0]))
    np.testing.assert_allclose([adv.mean(), adv.std()], [0.0, 1.0], atol=1e-5)


def test_clipped_gaussian_log_prob_against_the_direct_formula():
    """Inside the bounds the Gaussian density; on a bound the mass of the clipped tail."""
    mean = jnp.array([[0.2, -0.3], [0.0, 0.5]])
    log_std = jnp.array([-0.5, 0.3])
    u = jnp.array([[0.7, -0.1], [1.0, -1.0]])  # row 1: both components on a bound
    logp = ppo_policy.clipped_gaussian_log_prob(mean, log_std, u)
    std = np.exp(np.asarray(log_std))
    z = (np.asarray(u) - np.asarray(mean)) / std
    inside = -0.5 * z[0] ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(logp[0], inside.sum(), rtol=1e-5)
    # u = 1: P(sample >= 1) = Phi(-z); u = -1: P(sample <= -1) = Phi(z)
    np.testing.assert_allclose(logp[1], _log_ndtr(-z[1, 0]) + _log_ndtr(z[1, 1]), rtol=1e-5)


def test_gaussian_and_categorical_entropies_and_log_probs():
    """Gaussian entropy ``sum(log std + 0.5 log(2 pi e))`` per row; a categorical's log-prob
    and entropy from its softmax."""
    log_std = jnp.array([-0.5, 0.3])
    h = ppo_policy.gaussian_entropy(log_std, (3,))
    np.testing.assert_allclose(
        h, [np.sum(np.asarray(log_std) + 0.5 * np.log(2 * np.pi * np.e))] * 3, rtol=1e-6
    )
    logits = jnp.array([[0.0, 1.0, 2.0], [3.0, 0.0, -1.0]])
    logp, entropy = ppo_policy.categorical_log_prob_entropy(logits, jnp.array([2, 1]))
    p = np.exp(np.asarray(logits)) / np.exp(np.asarray(logits)).sum(-1, keepdims=True)
    np.testing.assert_allclose(logp, np.log([p[0, 2], p[1, 1]]), rtol=1e-5)
    np.testing.assert_allclose(entropy, -(p * np.log(p)).sum(-1), rtol=1e-5)


@pytest.mark.parametrize("discrete", [True, False])
def test_policy_distribution_follows_the_action_space(discrete):
    """``for_env``: a categorical for discrete actions, a clipped Gaussian scaled to the
    bounds for continuous ones; sampled actions are legal and scored by ``log_prob_entropy``."""
    spec = EnvSpec(
        "x", (3,), discrete, 2, () if discrete else (-2.0, 0.0), () if discrete else (2.0, 1.0)
    )
    policy = ppo_policy.for_env(spec, (8,))
    assert isinstance(policy, ppo_policy.Categorical if discrete else ppo_policy.ClippedGaussian)
    obs = jax.random.normal(jax.random.key(0), (5, 3))
    params = policy.net.init(jax.random.key(1), obs)
    action = policy.sample(params, obs, jax.random.key(2), False)
    logp, entropy = policy.log_prob_entropy(params, obs, action)
    assert logp.shape == entropy.shape == (5,) and bool(jnp.all(jnp.isfinite(logp)))
    if discrete:
        assert action.dtype == jnp.int32 and bool(jnp.all((action >= 0) & (action < 2)))
    else:
        assert bool(jnp.all((action >= jnp.array([-2.0, 0.0])) & (action <= jnp.array([2.0, 1.0]))))


def test_advantages_are_gae_of_the_value_network():
    """``advantages`` = ``common.gae`` of V(obs) and V(next_obs), the network applied per step."""
    T, N = 5, 3
    k = jax.random.split(jax.random.key(0), 4)
    obs, next_obs = jax.random.normal(k[0], (T, N, 2)), jax.random.normal(k[1], (T, N, 2))
    ends = jax.random.uniform(k[2], (T, N))
    traj = Transition(
        obs, jnp.zeros((T, N)), jax.random.normal(k[3], (T, N)), ends < 0.2, ends > 0.8, next_obs
    )
    net = networks.ValueNet((8,))
    params = net.init(jax.random.key(1), obs[0])
    adv, returns = ppo_losses.advantages(net, params, 0.9, 0.8, traj)
    v = jnp.stack([net.apply(params, o) for o in obs])
    next_v = jnp.stack([net.apply(params, o) for o in next_obs])
    want = common.gae(traj.reward, v, next_v, traj.terminated, traj.truncated, 0.9, 0.8)
    np.testing.assert_allclose(adv, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(returns, want[1], rtol=1e-5, atol=1e-6)


def test_minibatch_epochs_visit_every_row_once_per_epoch():
    """Minibatches of 4 over 12 rows: one epoch sees every row exactly once (a shuffled
    partition), three epochs three times; ``finite`` is the all-steps flag."""

    def update(seen, rows):
        return seen.at[rows].add(1), {"finite": jnp.float32(1.0)}

    def run(epochs):
        start = jnp.zeros(12, jnp.int32)
        return common.minibatch_epochs(update, start, jnp.arange(12), jax.random.key(0), epochs, 4)

    seen, metrics = run(1)
    np.testing.assert_array_equal(seen, 1)
    seen, metrics = run(3)
    np.testing.assert_array_equal(seen, 3)
    assert bool(metrics["finite"])
