"""SAC on a one-state probe: the critic converges to the value the Bellman target implies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxspreeze.algos import sac
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.setup.config import RunConfig

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
    before = algo.act(state.actor, (), obs, jax.random.key(0), True)[0].mean()
    actor, m = jax.jit(algo.actor_phase)(state.actor, critic_params, buffer, jax.random.key(4))
    after = algo.act(actor, (), obs, jax.random.key(0), True)[0].mean()
    assert after > max(before, 0.95)  # pushed to the top of the action range
    # squashed against the bound, the entropy falls below its target (-action_dim): alpha rises
    assert float(m["entropy"]) < -1.0 and float(m["alpha"]) > 1.0
