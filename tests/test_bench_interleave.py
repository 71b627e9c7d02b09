"""The trainer comparison alternates brax's epochs with jaxspreeze's chunks of equal work."""

from __future__ import annotations

import importlib.util
import types

import pytest

from jaxspreeze.bench import suite
from jaxspreeze.bench.record import Workload
from jaxspreeze.setup.plan import plan


def fake_refs(
    epochs: list[int], events: list[str], fail: bool = False, compiled: list[bool] | None = None
) -> types.ModuleType:
    """A references module whose 'brax trainer' runs ``epochs`` (env steps per epoch)."""

    def brax_trainer(algo, env_name, num_envs, num_timesteps, num_evals, between_epochs, **kw):
        assert num_evals == len(epochs) + 1  # brax: the initial evaluation is one of them
        for steps in epochs:
            events.append(f"brax {steps}")
            between_epochs(steps)
        if fail:
            raise RuntimeError("brax broke")
        flags = compiled or [False] * len(epochs)
        return {"name": "brax", "env_steps_per_s": 1.0, "brax_epoch_compiled": flags}

    return types.SimpleNamespace(brax_trainer=brax_trainer)


def workload(events: list[str], env_steps: int = 1000) -> Workload:
    return Workload("chunk", lambda: events.append("ours"), env_steps=env_steps)


HAVE_PLAYGROUND = importlib.util.find_spec("mujoco_playground") is not None
needs_playground = pytest.mark.skipif(not HAVE_PLAYGROUND, reason="MuJoCo Playground missing")


@pytest.mark.parametrize(
    ("algo", "env"),
    [
        pytest.param(a, e, marks=needs_playground if e.startswith("playground/") else ())
        for a, e in suite.TRAINER_ROWS
    ],
)
def test_trainer_config_one_epoch_is_one_chunk(algo, env):
    cfg, kw = suite.trainer_config(algo, env, "cpu", rounds=3)
    assert cfg.env == kw["env_name"] == env
    chunk_steps = cfg.chunk_iterations * plan(cfg, on_devices=False).steps_per_iteration
    prefill = kw["num_envs"] if algo == "sac" else 0
    assert kw["num_timesteps"] == prefill + 5 * chunk_steps  # rounds + the compiling epochs
    assert kw["num_evals"] == 6


def test_rounds_alternate_and_the_compiling_pair_is_dropped():
    events: list[str] = []
    kw = dict(algo="ppo", env_name="brax/ant", num_envs=4, num_timesteps=0, num_evals=5)
    times, ref = suite.interleaved_trainer(
        workload(events), fake_refs([1000, 1000, 2000, 1000], events), kw
    )
    # each brax epoch is followed by as many chunks as it had env steps
    assert events == [
        "brax 1000",
        "ours",
        "brax 1000",
        "ours",
        "brax 2000",
        "ours",
        "ours",
        "brax 1000",
        "ours",
    ]
    assert len(times) == 3 and ref["env_steps_per_s"] == 1.0


def test_pairs_whose_brax_epoch_compiled_are_dropped():
    events: list[str] = []
    times_of = iter([1.0, 2.0, 3.0, 4.0])
    clock = [0.0]

    def run() -> None:  # each call "takes" the next of 1, 2, 3, 4 seconds
        clock[0] += next(times_of)

    import jaxspreeze.bench.suite as s

    real = s.time.perf_counter
    s.time.perf_counter = lambda: clock[0]
    try:
        kw = dict(algo="ppo", env_name="brax/ant", num_envs=4, num_timesteps=0, num_evals=5)
        refs = fake_refs([10] * 4, events, compiled=[True, True, False, False])
        times, _ = suite.interleaved_trainer(Workload("chunk", run, env_steps=10), refs, kw)
    finally:
        s.time.perf_counter = real
    assert times == [3.0, 4.0]


def test_our_failure_is_ours_and_brax_failure_is_a_record():
    events: list[str] = []
    kw = dict(algo="ppo", env_name="brax/ant", num_envs=4, num_timesteps=0, num_evals=3)

    def boom() -> None:
        raise ValueError("our chunk broke")

    with pytest.raises(ValueError, match="our chunk broke"):
        suite.interleaved_trainer(
            Workload("chunk", boom, env_steps=10), fake_refs([10, 10], events), kw
        )
    times, ref = suite.interleaved_trainer(
        workload(events, 10), fake_refs([10, 10], events, fail=True), kw
    )
    assert "brax broke" in ref["error"] and len(times) == 1


def test_the_playground_row_is_a_full_case_of_its_own():
    ids = [c.id for c in suite.selection(full=True, scale="cpu")]
    picked = [i for i in ids if "trainer-ppo-playground" in i]  # what --only selects
    assert picked == ["trainer-ppo-playground/CartpoleBalance-cpu"]
    assert not any("trainer" in i for i in (c.id for c in suite.selection(scale="cpu")))


@needs_playground
def test_brax_drives_the_playground_task_as_jaxspreeze_loads_it():
    from mujoco_playground import wrapper

    from jaxspreeze.bench import references
    from jaxspreeze.envs import env_spec, playground

    args = references.brax_environment("playground/CartpoleBalance")
    env = args["environment"]
    assert env._config.impl == playground.CONFIG_OVERRIDES["impl"] == "jax"  # not warp
    assert args["wrap_env_fn"] is wrapper.wrap_for_brax_training
    spec = env_spec("playground/CartpoleBalance")
    assert args["episode_length"] // args["action_repeat"] == spec.max_episode_steps
    assert env.observation_size == spec.obs_shape[0] and env.action_size == spec.action_dim
    with pytest.raises(ValueError, match="gymnax/Pendulum-v1"):
        references.brax_environment("gymnax/Pendulum-v1")


def test_the_playground_row_is_skipped_without_playground(monkeypatch):
    monkeypatch.setattr(suite.playground, "installed", lambda: False)
    case = suite.Case(
        "trainer", {"algo": "ppo", "env": "playground/CartpoleBalance", "scale": "cpu"}
    )
    rec = suite.measure(case, refs=None)
    assert "not installed" in rec["skipped"]
