"""n-step returns: the fold (``algos.common.nstep``) against hand computations, the replay
read of consecutive transitions per env (``replay.sample_sequences``), and how FastTD3 and
FastSAC use them (``n_step`` 1 is the one-step batch itself)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.algos import common, fasttd3
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import Transition
from jaxspreeze.data import replay
from jaxspreeze.setup.config import RunConfig, resolve

G = 0.5  # gamma: powers are exact


def _seq(rewards, terminated, truncated) -> Transition:
    """One run ``[1, n]`` of one env's transitions; obs = step index, next_obs = index + 1
    (100 + index where the step ended an episode: its kept final observation)."""
    n = len(rewards)
    ended = np.logical_or(terminated, truncated)
    obs = np.arange(n, dtype=np.float32)[:, None]
    next_obs = np.where(ended[:, None], 100.0 + obs, obs + 1.0)
    return Transition(
        obs=jnp.asarray(obs)[None],
        action=jnp.asarray(-obs)[None],
        reward=jnp.asarray(rewards, jnp.float32)[None],
        terminated=jnp.asarray(terminated)[None],
        truncated=jnp.asarray(truncated)[None],
        next_obs=jnp.asarray(next_obs)[None],
    )


def _fold(rewards, terminated, truncated):
    batch, discount = common.nstep(_seq(rewards, terminated, truncated), G)
    return jax.tree.map(lambda x: np.asarray(x[0]), batch), float(discount[0])


def test_no_episode_end_sums_n_rewards_and_bootstraps_from_the_nth_next_obs():
    batch, discount = _fold([1.0, 2.0, 4.0], [False] * 3, [False] * 3)
    assert float(batch.reward) == 1 + 0.5 * 2 + 0.25 * 4  # 3.0
    assert discount == 0.125  # gamma ** 3
    assert batch.next_obs[0] == 3.0 and not batch.terminated and not batch.truncated
    assert batch.obs[0] == 0.0 and batch.action[0] == 0.0  # the first step's


def test_a_termination_cuts_the_return_and_does_not_bootstrap():
    """Episode ends (terminated) at step 1: r0 + g r1; step 2 belongs to the next episode."""
    batch, discount = _fold([1.0, 2.0, 4.0], [False, True, False], [False] * 3)
    assert float(batch.reward) == 1 + 0.5 * 2  # 2.0, the 4 cut
    assert discount == 0.0 and bool(batch.terminated)
    assert batch.next_obs[0] == 101.0  # the terminal observation (unused: discount 0)


def test_a_truncation_cuts_the_return_and_bootstraps_from_the_kept_final_obs():
    """Time limit at step 1: r0 + g r1 + g^2 V(final obs of step 1)."""
    batch, discount = _fold([1.0, 2.0, 4.0], [False] * 3, [False, True, False])
    assert float(batch.reward) == 2.0
    assert discount == 0.25  # gamma ** 2: bootstrap after two rewards
    assert batch.next_obs[0] == 101.0 and bool(batch.truncated) and not batch.terminated


def test_an_end_at_the_first_step_is_the_one_step_transition():
    batch, discount = _fold([3.0, 2.0, 4.0], [True, False, False], [False] * 3)
    assert float(batch.reward) == 3.0 and discount == 0.0 and batch.next_obs[0] == 100.0
    batch, discount = _fold([3.0, 2.0, 4.0], [False] * 3, [True, False, False])
    assert float(batch.reward) == 3.0 and discount == 0.5 and batch.next_obs[0] == 100.0


def test_n_one_is_the_one_step_target():
    """A run of length 1 folds to the transition itself and gamma (1 - terminated)."""
    batch, discount = _fold([3.0], [False], [False])
    assert float(batch.reward) == 3.0 and discount == 0.5
    batch, discount = _fold([3.0], [True], [False])
    assert discount == 0.0


def test_a_batch_is_folded_row_by_row_and_matches_a_python_loop():
    key = jax.random.key(0)
    k = jax.random.split(key, 4)
    b, n, gamma = 64, 4, 0.9
    seq = Transition(
        obs=jax.random.normal(k[0], (b, n, 2)),
        action=jax.random.normal(k[1], (b, n, 1)),
        reward=jax.random.normal(k[2], (b, n)),
        terminated=jax.random.uniform(k[3], (b, n)) < 0.15,
        truncated=jax.random.uniform(k[0], (b, n)) < 0.15,
        next_obs=jax.random.normal(k[1], (b, n, 2)),
    )
    batch, discount = common.nstep(seq, gamma)
    s = jax.tree.map(np.asarray, seq)
    for i in range(b):
        ret, scale, m = 0.0, 1.0, 0
        for t in range(n):
            ret += scale * s.reward[i, t]
            scale *= gamma
            m = t
            if s.terminated[i, t] or s.truncated[i, t]:
                break
        assert float(batch.reward[i]) == pytest.approx(ret, rel=1e-5, abs=1e-6)
        expected = 0.0 if s.terminated[i, m] else scale
        assert float(discount[i]) == pytest.approx(expected, rel=1e-5)
        np.testing.assert_array_equal(np.asarray(batch.next_obs[i]), s.next_obs[i, m])
        np.testing.assert_array_equal(np.asarray(batch.obs[i]), s.obs[i, 0])


# --- the replay read -----------------------------------------------------------------------


def _filled(num_envs: int, steps: int, capacity: int) -> replay.ReplayState:
    """A buffer of ``steps`` rollouts of ``num_envs`` envs, one step each (obs = 100 env +
    t), added like the iteration does (``add_rollout`` of ``[1, N]``)."""
    ex = replay.example_transition(fasttd3_spec())
    buf = replay.init(ex, capacity)
    for t in range(steps):
        obs = (100.0 * jnp.arange(num_envs) + t)[:, None] * jnp.ones((1, 3))
        item = Transition(
            obs, jnp.zeros((num_envs, 1)), obs[:, 0], jnp.zeros(num_envs, bool),
            jnp.zeros(num_envs, bool), obs + 1,
        )  # fmt: skip
        buf = replay.add_rollout(buf, jax.tree.map(lambda x: x[None], item))
    return buf


def fasttd3_spec():
    from jaxspreeze.core.types import EnvSpec

    return EnvSpec("probe", (3,), False, 1, (-1.0,), (1.0,), 10)


@pytest.mark.parametrize(("steps", "capacity"), [(6, 64), (40, 30)])  # part full; wrapped
def test_sequences_are_consecutive_steps_of_one_env(steps, capacity):
    """Every run is one env's steps t, t+1, t+2, all written; with a wrapped buffer the
    oldest are overwritten and never read."""
    n_envs, length = 3, 3
    buf = _filled(n_envs, steps, capacity)
    seq = replay.sample_sequences(buf, jax.random.key(1), 512, length, n_envs)
    obs = np.asarray(seq.obs[..., 0])  # [B, length]: 100 env + t
    env, t = obs // 100, obs % 100
    assert (env == env[:, :1]).all()  # one env per run
    np.testing.assert_array_equal(np.diff(t, axis=1), 1)  # consecutive steps
    assert t.max() == steps - 1  # reaches the newest
    oldest = steps - capacity // n_envs if capacity < n_envs * steps else 0
    assert t.min() >= oldest
    assert len(np.unique(t[:, 0])) == steps - length + 1 - oldest  # every start drawn
    assert len(np.unique(env)) == n_envs


def test_the_phase_reads_one_step_batches_with_n_step_one():
    run = RunConfig(num_envs=4)
    assert fasttd3.sampler(1, run) is replay.sample
    data = Transition(*(jnp.ones((5,)) for _ in range(6)))._replace(
        terminated=jnp.array([0, 1, 0, 0, 1], bool)
    )
    batch, discount = fasttd3.critic_batch(data, jnp.float32(0.9), 1)
    assert batch is data
    np.testing.assert_allclose(discount, [0.9, 0, 0.9, 0.9, 0])


@pytest.mark.parametrize(
    ("n_step", "changes", "field"),
    [
        (0, {}, "fasttd3.n_step"),
        (2.0, {}, "fasttd3.n_step"),
        (3, {"learning_starts": 7, "num_envs": 4}, "learning_starts"),  # needs 8
        (3, {"host_workers": 2}, "fasttd3.n_step"),
    ],
)
def test_n_step_checks(n_step, changes, field):
    cfg = fasttd3.FastTD3Config(n_step=n_step)
    run = resolve(RunConfig(algo="fasttd3", grad_steps=2, **changes))
    with pytest.raises(ConfigError) as err:
        fasttd3.validate(cfg, "fasttd3.", run)
    assert err.value.field == field
    fine = resolve(RunConfig(algo="fasttd3"))  # 8 envs, 1,000 random steps
    fasttd3.validate(fasttd3.FastTD3Config(n_step=3), "fasttd3.", fine)


@pytest.mark.slow  # the fold is checked by hand above; fastsac's 3-step update is in the default run
def test_fasttd3_n_step_runs_and_differs_from_one_step(tmp_path):
    """A tiny FastTD3 run with n_step 3 trains (finite) and learns other parameters."""
    from jaxspreeze.run.trainer import train

    base = RunConfig(
        algo="fasttd3",
        total_steps=320,
        num_envs=4,
        grad_steps=2,
        batch_size=16,
        buffer_size=512,
        learning_starts=64,
        chunk_iterations=16,
        eval_episodes=1,
        logdir=str(tmp_path),
        sinks=("jsonl",),
    )
    small = {"actor_hidden": (8,), "critic_hidden": (16,), "num_atoms": 11}
    one = train(base.replace(run_name="one", fasttd3=small), quiet=True, save=False)
    three = train(
        base.replace(run_name="three", fasttd3={**small, "n_step": 3}), quiet=True, save=False
    )
    a = jax.tree.leaves(one.state.agent.critic.params)[0]
    b = jax.tree.leaves(three.state.agent.critic.params)[0]
    assert np.isfinite(np.asarray(b)).all() and not np.array_equal(a, b)
