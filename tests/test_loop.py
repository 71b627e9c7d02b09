"""The fused one-device chunk: compiles once, follows the staleness rule, counts the lag."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxspreeze import devices, replay
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.config import ConfigError, RunConfig
from jaxspreeze.loop import Loop, chunking

CFG = RunConfig(
    algo="sac",
    num_envs=4,
    grad_steps=2,
    batch_size=16,
    buffer_size=512,
    learning_starts=64,
    chunk_iterations=1,
    total_steps=64 + 3 * 4,
    sac=SACConfig(hidden=(16, 16)),
)


@pytest.fixture(scope="module")
def run():
    """Three chunks of one iteration; the state before and after the first one."""
    loop = Loop(CFG, devices.single())
    state = loop.warmup(loop.init())
    before = jax.device_get(state)
    states, metrics = [], []
    for _ in range(loop.num_chunks):
        state, m = loop.chunk(state)
        states.append(jax.device_get(state))
        metrics.append(jax.device_get(m))
    return loop, before, states, metrics


def test_chunk_traces_once_across_chunks(run):
    loop, _, states, _ = run
    assert loop.num_chunks == 3 and len(states) == 3
    assert loop.trace_count == 1


def test_each_side_sees_the_other_from_the_start_of_the_iteration(run):
    """Pins the staleness rule: recompute iteration 1 by hand for seed 0."""
    loop, before, states, _ = run
    algo = loop.algo
    one = jax.tree.map(lambda x: x[0], before)

    @jax.jit
    def by_hand(s):
        _, _, _, _, c, _ = loop._collect(
            s.agent.actor, s.env, s.key, s.env_steps, s.iteration, s.actor_updates
        )
        buffer = replay.add_rollout(s.buffer, c.traj)
        # the rule: both phases see the other side's parameters from before the iteration
        critic, _ = algo.critic_phase(
            s.agent.critic, algo.actor_view(s.agent.actor), buffer, c.critic_key
        )
        actor, _ = algo.actor_phase(
            s.agent.actor, algo.critic_view(s.agent.critic), buffer, c.actor_key
        )
        # a different rule (critic after the actor) would give another critic
        critic_late, _ = algo.critic_phase(
            s.agent.critic, algo.actor_view(actor), buffer, c.critic_key
        )
        return actor, critic, critic_late

    actor, critic, critic_late = jax.device_get(by_hand(one))
    got = jax.tree.map(lambda x: x[0], states[0].agent)
    close = lambda a, b: all(
        np.allclose(x, y, rtol=1e-5, atol=1e-6)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )
    assert close(got.actor, actor)
    assert close(got.critic, critic)
    assert not close(got.critic, critic_late)


def test_policy_lag_and_counters(run):
    loop, before, states, metrics = run
    lag = loop.algo.actor_steps_per_iteration
    assert lag == CFG.grad_steps == loop.policy_lag
    for m in metrics:
        np.testing.assert_array_equal(m["policy_lag"], [[lag]])
    assert int(before.actor_updates[0]) == 0
    for i, s in enumerate(states, start=1):
        assert int(s.iteration[0]) == i
        assert int(s.actor_updates[0]) == i * lag
        assert int(s.env_steps[0]) == CFG.warmup_steps + i * CFG.steps_per_iteration


def test_warmup_fills_the_buffer(run):
    _, before, _, _ = run
    assert int(before.buffer.size[0]) == CFG.warmup_steps
    assert int(before.env_steps[0]) == CFG.warmup_steps
    assert before.obs_buffer is None  # single device: no obs-only copy


def test_metrics_are_k_by_seeds(run):
    _, _, _, metrics = run
    for k in ("critic_loss", "actor_loss", "critic_finite", "actor_finite", "env_steps"):
        assert np.shape(metrics[0][k]) == (1, 1), k
    assert metrics[0]["critic_finite"].all() and metrics[0]["actor_finite"].all()


def test_auto_is_single_on_one_device():
    assert len(jax.devices()) == 1
    assert not devices.resolve("auto").split
    assert not devices.resolve("single").split


def test_split_on_one_device_fails_clearly():
    with pytest.raises(ConfigError, match="split needs 2 devices") as e:
        devices.resolve("split")
    assert e.value.field == "placement"
    with pytest.raises(ConfigError, match="choose auto, single or split"):
        devices.resolve("both")  # type: ignore[arg-type]


@pytest.mark.parametrize(("iters", "k"), [(1, 250), (10, 3), (250, 250), (251, 250)])
def test_chunking_covers_the_run(iters, k):
    cfg = RunConfig(total_steps=iters * 8 + 1000, chunk_iterations=k)
    per_chunk, chunks = chunking(cfg)
    assert per_chunk <= k
    assert iters <= per_chunk * chunks < iters + chunks
