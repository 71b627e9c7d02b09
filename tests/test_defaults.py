"""Every algorithm runs with its own defaults: ``jaxspreeze train --algo X --env E``.

A matrix of every registered algorithm x one discrete (CartPole-v1) and one continuous
(Pendulum-v1) gymnax env: where the algorithm supports the env, the defaults resolve,
validate and train (at a tiny budget: only ``total_steps`` and ``chunk_iterations`` are
lowered); where it does not, validation refuses with a clear message on ``--algo``.
The slow test checks that PPO's defaults learn Acrobot-v1 within their own budget.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from jaxspreeze import algos, envs
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.config import RunConfig, is_resolved, resolve
from jaxspreeze.setup.plan import plan

DISCRETE, CONTINUOUS = "gymnax/CartPole-v1", "gymnax/Pendulum-v1"
MATRIX = [(name, env) for name in algos.NAMES for env in (DISCRETE, CONTINUOUS)]
# the other classic-control gymnax envs: validated (not trained) with defaults
MORE_ENVS = ("gymnax/Acrobot-v1", "gymnax/MountainCar-v0", "gymnax/MountainCarContinuous-v0")
CHUNK = 2  # iterations per chunk in the tiny runs


def _supported(name: str, env: str) -> bool:
    return algos.get(name).supports(envs.env_spec(env)) is None


def _tiny(name: str, env: str, tmp_path) -> RunConfig:
    """The defaults, with a budget of warm-up plus two chunks of CHUNK iterations."""
    r = plan(RunConfig(algo=name, env=env), on_devices=False)
    total = r.warmup_steps + 2 * CHUNK * r.steps_per_iteration
    return RunConfig(
        algo=name,
        env=env,
        total_steps=total,
        chunk_iterations=CHUNK,
        logdir=str(tmp_path),
        run_name=f"{name}-defaults",
        sinks=("jsonl",),
    )


@pytest.mark.parametrize(("name", "env"), MATRIX, ids=[f"{a}-{e.split('/')[1]}" for a, e in MATRIX])
def test_defaults_validate_or_are_refused_clearly(name, env):
    """Supported: the resolved defaults pass validation (PPO's minibatch divides its
    rollout, the off-policy warm-up fits the buffer). Unsupported: ConfigError on
    ``algo`` saying why and what to use instead."""
    cfg = RunConfig(algo=name, env=env)
    if _supported(name, env):
        resolved = plan(cfg, on_devices=False).cfg
        # resolved like resolve() does, and the torso auto picks (the MLP: vectors)
        assert resolved == resolve(cfg).replace(**{cfg.algo: {"torso": "mlp"}})
        assert is_resolved(resolved)
        assert resolved.eval_every == resolved.total_steps // 10  # about ten evaluations
    else:
        with pytest.raises(ConfigError) as e:
            plan(cfg, on_devices=False)
        assert e.value.field == "algo"
        message = str(e.value)
        assert f"{name} cannot train {env}" in message
        assert "action space" in message and "--algo ppo" in message


@pytest.mark.parametrize("env", MORE_ENVS)
@pytest.mark.parametrize("name", algos.NAMES)
def test_defaults_validate_on_the_other_classic_envs(name, env):
    """Acrobot, MountainCar (discrete) and MountainCarContinuous: valid with defaults
    wherever the algorithm supports the action space."""
    cfg = RunConfig(algo=name, env=env)
    if _supported(name, env):
        plan(cfg, on_devices=False)
    else:
        with pytest.raises(ConfigError, match="action space"):
            plan(cfg, on_devices=False)


SUPPORTED = [(a, e) for a, e in MATRIX if _supported(a, e)]
# td3 and ddpg train with SAC's run-level defaults through the same schedule, fastsac
# with fasttd3's (their recipes' own tests run one update each by default), PPO on
# Pendulum through the same schedule as on CartPole: -m slow
SLOW_DEFAULTS = {("td3", None), ("ddpg", None), ("fasttd3", None), ("fastsac", None),
                 ("ppo", "gymnax/Pendulum-v1")}  # fmt: skip
TRAINED = [
    pytest.param(a, e, id=f"{a}-{e.split('/')[1]}",
                 marks=[pytest.mark.slow] * bool({(a, None), (a, e)} & SLOW_DEFAULTS))
    for a, e in SUPPORTED
]  # fmt: skip


@pytest.mark.parametrize(("name", "env"), TRAINED)
def test_defaults_train_at_a_tiny_budget(name, env, tmp_path):
    """Two chunks with every other size at the algorithm's default: all env steps are
    taken, the final evaluation and every parameter are finite."""
    cfg = _tiny(name, env, tmp_path)
    result = train(cfg, quiet=True)
    r = plan(cfg, on_devices=False)
    assert result.summary["env_steps"] >= cfg.total_steps
    assert result.summary["env_steps"] == r.warmup_steps + r.num_iterations * r.steps_per_iteration
    assert math.isfinite(result.summary["final_eval_return"])
    leaves = jax.tree.leaves(result.state.agent)
    assert all(
        np.all(np.isfinite(np.asarray(x))) for x in leaves if np.asarray(x).dtype.kind == "f"
    )


@pytest.mark.slow
def test_ppo_defaults_learn_acrobot(tmp_path):
    """``jaxspreeze train --algo ppo --env gymnax/Acrobot-v1`` with no other flag: the
    final evaluation is >= -200 (random policy: about -500) within the default budget."""
    cfg = RunConfig(
        algo="ppo", env="gymnax/Acrobot-v1", logdir=str(tmp_path), run_name="ppo-acrobot",
        sinks=("jsonl",),
    )  # fmt: skip
    summary = train(cfg, quiet=True).summary
    assert summary["final_eval_return"] >= -200, summary["final_eval_return"]
