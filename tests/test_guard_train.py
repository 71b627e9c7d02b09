"""An injected NaN stops training with a message naming the step; the last good checkpoint stays."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import schedules
from jaxspreeze.core.errors import NonFiniteError
from jaxspreeze.run import guards
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint, rundir


def test_injected_nan_stops_and_keeps_last_good_checkpoint(tiny_cfg, monkeypatch):
    # tiny_cfg's chunk (50 iterations x 4 envs = 200 env steps: its compiled programs)
    cfg = tiny_cfg.replace(total_steps=1_400, checkpoint_every=200, keep_checkpoints=10)
    original = schedules.Fused.chunk  # one CPU device: the fused schedule
    calls = {"n": 0}

    def poisoned_chunk(self, state):
        calls["n"] += 1
        if calls["n"] == 4:  # before the 4th chunk: NaN in one critic weight
            critic = state.agent.critic
            params = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(jnp.nan), critic.params)
            state = state._replace(
                agent=state.agent._replace(critic=critic._replace(params=params))
            )
        return original(self, state)

    monkeypatch.setattr(schedules.Fused, "chunk", poisoned_chunk)
    with pytest.raises(NonFiniteError) as err:
        train(cfg, quiet=True)
    message = str(err.value)
    assert "non-finite" in message and "critic" in message and "env step" in message
    assert "env step 1000" in message  # the end of the 4th chunk (200 warm-up + 4 x 200)
    assert "The last good checkpoint," in message and "000000000800, is kept" in message
    # the checkpoints of the first 3 chunks are kept; none of the poisoned state
    kept = checkpoint.list_checkpoints(cfg_dir := (tiny_cfg_dir(cfg)))
    assert [int(p.name) for p in kept] == [400, 600, 800], kept
    template = schedules.make(plan(config.resolve(cfg), devices.single())).init()
    state, info = checkpoint.restore(checkpoint.latest(cfg_dir), template)
    assert info["env_steps"] == 800
    assert all(
        np.isfinite(np.asarray(x)).all()
        for x in jax.tree.leaves(state.agent)
        if jnp.issubdtype(x.dtype, jnp.floating)
    )


def tiny_cfg_dir(cfg):
    """The run directory of ``cfg``."""
    return rundir.path_of(cfg)


def test_nan_before_any_checkpoint_says_none_was_kept(tiny_cfg, monkeypatch):
    """A NaN in the first chunk of a run that checkpoints only at the end: the message says
    that no checkpoint was written (it claims no kept one); the run stays NOT_STARTED."""
    original = schedules.Fused.chunk

    def poisoned_chunk(self, state):
        critic = state.agent.critic
        params = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(jnp.nan), critic.params)
        state = state._replace(agent=state.agent._replace(critic=critic._replace(params=params)))
        return original(self, state)

    monkeypatch.setattr(schedules.Fused, "chunk", poisoned_chunk)
    cfg = tiny_cfg.replace(run_name="nan-first")
    with pytest.raises(NonFiniteError) as err:
        train(cfg, quiet=True)
    message = str(err.value)
    assert "non-finite" in message and "No checkpoint was written" in message
    assert "is kept" not in message
    run = rundir.RunDir(rundir.path_of(cfg))
    assert not checkpoint.list_checkpoints(run.path) and run.not_started
    # no cadence could have kept one: the first chunk was already non-finite
    assert "it came in the run's first chunk" in message and "--checkpoint-every" not in message


def test_the_nan_advice_speaks_of_the_checkpoint_cadence_the_run_had():
    with_cadence = guards.checkpoint_note(None, "runs/r", checkpoint_every=800)
    assert "due at 800 env steps" in with_cadence and "smaller --checkpoint-every" in with_cadence
    assert "set --checkpoint-every" not in with_cadence
    assert "set --checkpoint-every" in guards.checkpoint_note(None, "runs/r", 0)
    for every in (0, 800):  # a NaN in the first chunk: no checkpoint could come before it
        first = guards.checkpoint_note(None, "runs/r", every, first_chunk=True)
        assert "--checkpoint-every" not in first and "--chunk-iterations" in first


def test_the_tripwire_says_whether_a_finite_chunk_came_first():
    def raised(*records):
        wire = guards.Tripwire()
        for r in records:
            wire.check(r)
        with pytest.raises(NonFiniteError) as err:
            wire.raise_if_tripped()
        return err.value.first_chunk

    bad, good = {"chunk": 1, "critic_finite": False}, {"chunk": 0, "critic_finite": True}
    assert raised(bad) is True and raised(good, bad) is False
