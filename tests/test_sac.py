"""SAC on a one-state probe: the critic converges to the value the Bellman target implies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import replay
from jaxspreeze.algos import sac
from jaxspreeze.config import RunConfig
from jaxspreeze.types import EnvSpec, Transition

SPEC = EnvSpec("probe", (2,), False, 1, (-1.0,), (1.0,), 10)


def _probe_buffer(terminated: bool, n: int = 64) -> replay.ReplayState:
    key = jax.random.key(0)
    obs = jnp.ones((n, 2))
    tr = Transition(
        obs,
        jax.random.uniform(key, (n, 1), minval=-1, maxval=1),
        jnp.ones(n),
        jnp.full(n, terminated),
        jnp.full(n, not terminated),  # the alternative ending: a time limit
        obs,
    )
    example = jax.tree.map(lambda x: x[0], tr)
    return replay.add(replay.init(example, n), tr)


@pytest.mark.parametrize(("terminated", "expected"), [(True, 1.0), (False, 2.0)])
def test_critic_learns_probe_value(terminated, expected):
    """reward 1 forever, gamma 0.5: Q = 1 when the step terminates, 1/(1-0.5) = 2 when it
    is only truncated (bootstrap from next_obs). A tiny alpha removes the entropy term."""
    cfg = sac.SACConfig(hidden=(32,), gamma=0.5, tau=0.1, init_alpha=1e-8, critic_lr=3e-3)
    run = RunConfig(grad_steps=600, batch_size=32)
    algo = sac.make(cfg, SPEC, run)
    state = algo.init(jax.random.key(1))
    buffer = _probe_buffer(terminated)
    view = algo.actor_view(state.actor)
    critic, metrics = jax.jit(algo.critic_phase)(state.critic, view, buffer, jax.random.key(2))
    q = sac.networks.QEnsemble((32,)).apply(critic.params, buffer.data.obs, buffer.data.action)
    assert q.shape == (2, 64)
    assert jnp.abs(q - expected).max() < 0.1, q
    assert metrics["finite"]


def test_actor_raises_q_and_alpha_tracks_entropy():
    """On a critic whose Q grows with the action, the actor's action goes to the bound, and
    the temperature moves to bring the entropy back towards its target."""
    cfg = sac.SACConfig(hidden=(16,), init_alpha=1.0, actor_lr=1e-2)
    run = RunConfig(grad_steps=200, batch_size=32)
    algo = sac.make(cfg, SPEC, run)
    state = algo.init(jax.random.key(3))
    # a critic that only looks at the action: Q(s, a) = 50 * relu(a) (set last-layer weights by hand)
    critic_params = jax.tree.map(jnp.zeros_like, state.critic.params)
    p = critic_params["params"]["VmapMLP_0"]
    p["Dense_0"]["kernel"] = p["Dense_0"]["kernel"].at[:, 2, 0].set(1.0)
    p["Dense_1"]["kernel"] = p["Dense_1"]["kernel"].at[:, 0, 0].set(50.0)
    buffer = _probe_buffer(True)
    obs = buffer.data.obs
    before = algo.act(state.actor, obs, jax.random.key(0), True).mean()
    actor, m = jax.jit(algo.actor_phase)(state.actor, critic_params, buffer, jax.random.key(4))
    after = algo.act(actor, obs, jax.random.key(0), True).mean()
    assert after > max(before, 0.95)  # pushed to the top of the action range
    # squashed against the bound, the entropy falls below its target (-action_dim): alpha rises
    assert float(m["entropy"]) < -1.0 and float(m["alpha"]) > 1.0


def test_the_std_forms_read_the_same_head():
    """``std``: clamped (CleanRL's) and softplus (brax's) are two readings of the same
    head, so the parameters are the same tree; softplus starts wider (0.69 vs 0.22)."""
    from jaxspreeze import networks

    obs = jax.random.normal(jax.random.key(1), (5, 3))
    clamped = networks.TanhGaussianActor((8,), 2)
    softplus = networks.TanhGaussianActor((8,), 2, std="softplus")
    params = clamped.init(jax.random.key(0), obs)
    assert jax.tree.structure(softplus.init(jax.random.key(0), obs)) == jax.tree.structure(params)
    mean_c, log_std_c = clamped.apply(params, obs)
    mean_s, log_std_s = softplus.apply(params, obs)
    np.testing.assert_array_equal(mean_c, mean_s)
    lo, hi = networks.LOG_STD_MIN, networks.LOG_STD_MAX
    raw = np.arctanh((np.asarray(log_std_c, np.float64) - lo) / (0.5 * (hi - lo)) - 1)
    expected = np.log(np.log1p(np.exp(raw)) + 1e-3)  # log(softplus(raw) + min_std)
    np.testing.assert_allclose(log_std_s, expected, rtol=1e-4, atol=1e-4)
    zero = jnp.zeros(2)
    assert float(jnp.exp(networks.clamped_log_std(zero))[0]) == pytest.approx(np.exp(-1.5))
    assert float(jnp.exp(networks.softplus_log_std(zero))[0]) == pytest.approx(np.log(2) + 1e-3)


def jaxspreeze_load_std(run_dir):
    import jaxspreeze

    return jaxspreeze.load(run_dir).cfg.sac.std


def test_sac_with_the_softplus_std_trains(tiny_config):
    """``--sac.std softplus`` runs end to end and acts otherwise than the default."""
    from jaxspreeze.trainer import train

    default = train(tiny_config(sac={"hidden": (32, 32)}, run_name="clamped"), quiet=True)
    soft = train(tiny_config(sac={"hidden": (32, 32), "std": "softplus"}, run_name="softplus"))
    assert np.isfinite(soft.summary["final_eval_return"])
    assert soft.summary["final_eval_return"] != default.summary["final_eval_return"]
    assert jaxspreeze_load_std(soft.run_dir) == "softplus"  # saved, and loaded back
