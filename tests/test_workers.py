"""The sampling worker pool: versions, policy lag, the throttle, and stopping cleanly."""

from __future__ import annotations

import importlib.util
import threading

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.host.hostenvs import make_host_env
from jaxspreeze.host.workers import (
    ParamSlot,
    Throttle,
    WorkerError,
    WorkerPool,
    WorkerStalledError,
)

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None


class _Counter(gym.Env):
    """obs = [steps so far]; reward = the action; can fail at a given step, or hang."""

    observation_space = gym.spaces.Box(0, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, fail_at=None, hang=None):
        self.t, self.fail_at, self.hang = 0, fail_at, hang

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError(f"boom at step {self.t}")
        if self.hang is not None:  # hangs in its first step
            self.hang.wait()
        return np.array([self.t], np.float32), float(action[0]), False, False, {}


def _counter(max_steps=3, **kwargs):
    return lambda: gym.wrappers.TimeLimit(_Counter(**kwargs), max_steps)


def _policy(params, obs, key):
    """Acts the parameter value: the action a row holds tells which version acted."""
    return jnp.broadcast_to(params["a"], (obs.shape[0], 1))


def _params(version):
    return {"a": jnp.float32(version / 100)}


def _slot():
    slot = ParamSlot()
    slot.publish(_params(0), 0)
    return slot


def _worker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("jaxspreeze-worker")]


def _check_chains(batches):
    """Each env's rows follow each other in time, across blocks; version labels are right."""
    by_worker = {}
    for b in batches:
        tr = b.transition
        np.testing.assert_allclose(tr.action[..., 0], b.version / 100, rtol=1e-6)
        prev = by_worker.get(b.worker)
        obs = tr.obs if prev is None else np.concatenate([prev[0], tr.obs])
        nxt = tr.next_obs if prev is None else np.concatenate([prev[1], tr.next_obs])
        done = tr.terminated | tr.truncated
        done = done if prev is None else np.concatenate([prev[2], done])
        cont = ~done[:-1]
        np.testing.assert_array_equal(nxt[:-1][cont], obs[1:][cont])
        by_worker[b.worker] = (obs, nxt, done)


def test_blocks_arrive_with_versions_and_exact_env_steps():
    slot = _slot()
    pool = WorkerPool(_counter(), _policy, slot, num_workers=2, envs_per_worker=3, rollout_steps=4)
    with pool:
        batches = []
        for v in range(1, 9):
            b = pool.get(timeout=60)
            assert b.transition.obs.shape == (4, 3, 1) and b.version.shape == (4, 3)
            assert b.env_steps == 12 and b.version.max() <= slot.version
            assert b.policy_lag == slot.version - b.version.min() >= 0
            batches.append(b)
            slot.publish(_params(v), v)
        stats = pool.stats()
    assert pool.close() == [] and not _worker_threads()
    assert stats["env_steps"] == pool.delivered == sum(b.env_steps for b in batches) == 96
    _check_chains(batches)
    assert {b.worker for b in batches} == {0, 1}
    # 3-step episodes (TimeLimit): every finished episode has length 3 and its return
    lengths = np.concatenate([b.episode_lengths for b in batches])
    assert len(lengths) > 0 and (lengths == 3).all()
    tr = np.stack([b.transition.truncated for b in batches])
    assert not np.stack([b.transition.terminated for b in batches]).any()
    assert tr.sum() >= len(lengths)


@pytest.mark.parametrize("max_lag", [0, 1])
def test_lockstep_policy_lag_is_bounded(max_lag):
    slot = _slot()
    pool = WorkerPool(
        _counter(),
        _policy,
        slot,
        num_workers=2,
        envs_per_worker=2,
        rollout_steps=3,
        max_lag=max_lag,
    )
    seen = []
    with pool:
        for r in range(6):
            blocks = pool.get_round(timeout=60)
            assert [b.worker for b in blocks] == [0, 1]
            for b in blocks:
                # documented: lag <= max_lag; block r acted with versions >= r - max_lag
                assert 0 <= b.policy_lag <= max_lag
                assert b.version.min() >= r - max_lag
                seen.append(b.policy_lag)
            slot.publish(_params(r + 1), r + 1)
    assert pool.close() == [] and not _worker_threads()
    if max_lag == 0:
        assert seen == [0] * 12  # synchronous: each block acted with the newest version


def test_throttle_rules():
    t = Throttle(2.0, max_ahead=10, warmup=5)
    assert t.workers_may() and not t.learner_may(4)
    t.add_env_steps(7)
    assert t.learner_may(4) and not t.learner_may(5)
    t.add_env_steps(8)  # 15 = warmup + 0 / ratio + max_ahead: the workers wait
    assert not t.workers_may() and not t.wait_workers(0.0)
    t.add_units(2)  # one env step's worth of learner work releases them
    assert t.workers_may()
    assert t.replay_ratio() == pytest.approx(2 / 10)
    with pytest.raises(ValueError, match="max_ahead"):
        t.learner_may(21)  # more than max_ahead's worth: both sides would wait forever


def test_throttle_holds_the_replay_ratio_with_workers():
    ratio, units, max_ahead, warmup = 2.0, 16, 16, 8
    W, N, T, Q = 2, 2, 2, 2
    throttle = Throttle(ratio, max_ahead=max_ahead, warmup=warmup)
    pool = WorkerPool(
        _counter(max_steps=5),
        _policy,
        _slot(),
        num_workers=W,
        envs_per_worker=N,
        rollout_steps=T,
        queue_size=Q,
        throttle=throttle,
    )
    slack = (W + Q) * T * N + W * N  # blocks in flight and one step per worker
    with pool:
        for _ in range(40):
            while not throttle.learner_may(units):
                pool.get(timeout=60)
            pool.poll()
            throttle.add_units(units)
            assert throttle.units <= ratio * (throttle.env_steps - warmup)  # never ahead
            assert throttle.env_steps <= warmup + throttle.units / ratio + max_ahead + slack
    assert pool.close() == []
    assert 0.85 * ratio <= throttle.replay_ratio() <= ratio
    assert pool.stats()["replay_ratio"] == throttle.replay_ratio()


def test_next_step_reset_rows_never_reach_the_learner():
    """A next-step-autoreset vector env (like envpool): reset rows dropped, steps exact."""
    vecs = [
        gym.vector.SyncVectorEnv(
            # episodes of 3 and 4 steps: the envs' reset rows fall apart, their rows drift
            [_counter(max_steps=3), _counter(max_steps=4)],
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        )
        for _ in range(2)
    ]
    envs = [make_host_env(v, 2) for v in vecs]
    with WorkerPool(envs, _policy, _slot(), rollout_steps=5) as pool:
        batches = [pool.get(timeout=60) for _ in range(6)]
    assert pool.close() == [] and not _worker_threads()
    assert all(v.closed for v in vecs)
    _check_chains(batches)
    obs = np.stack([b.transition.obs for b in batches])
    nxt = np.stack([b.transition.next_obs for b in batches])
    # a real step of the counter goes from t to t + 1 (a reset row would go from 3 to 0)
    np.testing.assert_array_equal(nxt, obs + 1)
    assert set(np.unique(obs[..., 0, 0])) == {0.0, 1.0, 2.0}
    assert set(np.unique(obs[..., 1, 0])) == {0.0, 1.0, 2.0, 3.0}
    assert pool.delivered == 6 * 5 * 2
    assert set(np.concatenate([b.episode_lengths for b in batches])) == {3, 4}
    with pytest.raises(TypeError, match="HostEnv"):
        WorkerPool([object()], _policy, _slot())


def test_aligned_lockstep_blocks_keep_the_lag_rule_exact_despite_reset_rows():
    """Next-step resets make a worker's envs drift apart; aligned blocks (the on-policy
    schedule's) drop the rows an env took past its block, so block r acts with exactly
    version max(r - 1, 0) when the learner publishes version r once it holds block r
    (max_lag=1, HostRollout's pipeline)."""
    vec = gym.vector.SyncVectorEnv(
        [_counter(max_steps=3), _counter(max_steps=4)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    slot = _slot()
    pool = WorkerPool(
        [make_host_env(vec, 2)], _policy, slot, rollout_steps=5, max_lag=1, aligned=True
    )
    dropped = 0
    with pool:
        for r in range(8):
            (b,) = pool.get_round(timeout=60)
            assert (b.version == max(r - 1, 0)).all(), (r, b.version)
            tr = b.transition
            np.testing.assert_array_equal(tr.next_obs, tr.obs + 1)  # no reset row
            dropped += b.rows_dropped
            if r:
                slot.publish(_params(r), r)
    assert pool.close() == [] and not _worker_threads()
    assert dropped > 0  # the 4-step env ran ahead of the 3-step one and was cut back


def test_a_learner_that_never_counts_its_work_times_out_naming_the_throttle():
    throttle = Throttle(1.0, max_ahead=8)
    pool = WorkerPool(
        _counter(), _policy, _slot(), envs_per_worker=2, rollout_steps=2, throttle=throttle
    )
    with pool, pytest.raises(TimeoutError, match="throttle holds every worker"):
        for _ in range(20):  # no add_units: the workers stop after max_ahead env steps
            pool.get(timeout=1.0)
    assert pool.close() == [] and not _worker_threads()
    # max_ahead, plus at most the queued blocks and the one being filled (4 steps each)
    assert 8 <= throttle.env_steps <= 8 + (2 + 1) * 4


def test_env_exception_names_env_and_worker_and_ends_cleanly():
    pool = WorkerPool(_counter(max_steps=50, fail_at=5), _policy, _slot(), envs_per_worker=2)
    pool.start()
    with pytest.raises(WorkerError, match=r"worker 0 \(gymnasium/_Counter\).*boom at step 5") as e:
        for _ in range(10):
            pool.get(timeout=60)
    assert e.value.worker == 0 and e.value.env_name == "gymnasium/_Counter"
    assert isinstance(e.value.__cause__, RuntimeError)
    assert pool.close() == [] and not _worker_threads()
    assert all(env.vec.closed for env in pool.envs)


class _BadReset(_Counter):
    def reset(self, *, seed=None, options=None):
        if self.fail_at == 0 or self.t:  # at the first reset, or at an episode's end
            raise ValueError("no reset today")
        return super().reset(seed=seed, options=options)


@pytest.mark.parametrize("fail_at", [0, None])
def test_a_reset_failure_is_called_a_reset_failure(fail_at):
    """The first reset (answered at the worker's first recv) and an auto-reset inside a
    step are named as resets, not as steps."""
    env = lambda: gym.wrappers.TimeLimit(_BadReset(fail_at=fail_at), 3)
    pool = WorkerPool(env, _policy, _slot(), envs_per_worker=2)
    pool.start()
    with pytest.raises(WorkerError, match=r"worker 0 \(gymnasium/_BadReset\) failed while "
                       r"resetting the env: ValueError: no reset today"):  # fmt: skip
        for _ in range(10):
            pool.get(timeout=60)
    assert pool.close() == [] and not _worker_threads()


def test_stalled_worker_is_detected_and_reported():
    release = threading.Event()
    pool = WorkerPool(
        # 5 s: the policy's first call compiles, and on a loaded machine that alone can take
        # a second or two; the stall must be the env's, "while stepping"
        _counter(max_steps=50, hang=release),
        _policy,
        _slot(),
        envs_per_worker=1,
        stall_timeout=5.0,
    )
    pool.start()
    try:
        with pytest.raises(WorkerStalledError, match=r"worker 0 .* has not answered .*stepping"):
            for _ in range(10):
                pool.get(timeout=60)
        assert pool.close(timeout=0.1) == ["jaxspreeze-worker-0"]  # stuck inside the env
        assert not pool.envs[0].vec.closed  # never closed under the thread using it
    finally:
        release.set()
    assert pool.close(timeout=30) == [] and not _worker_threads()
    assert pool.envs[0].vec.closed


def test_stop_while_the_queue_is_full():
    pool = WorkerPool(_counter(), _policy, _slot(), num_workers=2, envs_per_worker=1, queue_size=1)
    pool.start()
    pool.get(timeout=60)  # running; nobody consumes from here on: the workers block on put
    assert pool.close() == [] and not _worker_threads()
    assert all(env.vec.closed for env in pool.envs)
    with pytest.raises(RuntimeError, match="closed"):
        pool.start()


def test_policy_extras_and_bad_policies():
    def with_logp(params, obs, key):
        a = _policy(params, obs, key)
        return a, {"logp": -a[:, 0], "value": jnp.zeros((obs.shape[0], 2))}

    with WorkerPool(_counter(), with_logp, _slot(), envs_per_worker=2, rollout_steps=3) as pool:
        b = pool.get(timeout=60)
    assert b.extras["logp"].shape == (3, 2) and b.extras["value"].shape == (3, 2, 2)
    np.testing.assert_allclose(b.extras["logp"], -b.transition.action[..., 0])
    assert not _worker_threads()
    no_extras = lambda p, o, k: (_policy(p, o, k), {})
    with WorkerPool(_counter(), no_extras, _slot(), envs_per_worker=2, rollout_steps=3) as pool:
        assert pool.get(timeout=60).extras == {}

    bad = WorkerPool(_counter(), lambda p, o, k: jnp.zeros((o.shape[0], 3)), _slot())
    with pytest.raises(ValueError, match=r"shape \(8, 3\).*expected \(8, 1\)"):
        bad.start()
    bad.close()
    empty = WorkerPool(_counter(), _policy, ParamSlot())
    with pytest.raises(ValueError, match="publish"):
        empty.start()
    empty.close()


@pytest.mark.skipif(not HAS_ENVPOOL, reason='needs pip install "jaxspreeze[envpool]"')
def test_envpool_async_workers_drop_reset_rows():
    pool = WorkerPool(
        "envpool/Pendulum-v1",
        lambda p, o, k: jnp.broadcast_to(p["a"], (o.shape[0], 1)),
        _slot(),
        num_workers=2,
        envs_per_worker=4,
        rollout_steps=6,
        env_kwargs={"batch_size": 2, "max_episode_steps": 5, "num_threads": 1},
    )
    with pool:
        batches = [pool.get(timeout=60) for _ in range(8)]
    assert pool.close() == [] and not _worker_threads()
    _check_chains(batches)
    tr = np.stack([b.transition.truncated for b in batches])
    # 5-step episodes: 6 rows per env per block, every row a real step (reset rows dropped)
    assert tr.sum() > 0 and pool.delivered == 8 * 6 * 4
    lengths = np.concatenate([b.episode_lengths for b in batches])
    assert (lengths == 5).all()
