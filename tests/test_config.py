"""Config validation covers every field (before any compile) and the memory estimate."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import subprocess
import sys

import jax
import pytest

from jaxspreeze import cli, devices
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.config import (
    ConfigError,
    RunConfig,
    check_memory,
    estimate_memory,
    format_memory,
    validate,
)

NAN, INF = float("nan"), float("inf")

# (changes, the field the error must name); every RunConfig field appears at least once
BAD: list[tuple[dict, str]] = [
    ({"algo": "a2c"}, "algo"),
    ({"env": "gymnax/Nope-v0"}, "env"),
    ({"total_steps": 0}, "total_steps"),
    ({"total_steps": 1.5}, "total_steps"),
    ({"num_envs": 0}, "num_envs"),
    ({"num_envs": 2.5}, "num_envs"),
    ({"rollout_steps": 0}, "rollout_steps"),
    ({"grad_steps": -1}, "grad_steps"),
    ({"grad_steps": 0}, "grad_steps"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": 512, "buffer_size": 256}, "batch_size"),
    ({"buffer_size": 0}, "buffer_size"),
    ({"buffer_size": 4, "batch_size": 4}, "buffer_size"),
    ({"learning_starts": -1}, "learning_starts"),
    ({"learning_starts": 5000, "buffer_size": 1000}, "learning_starts"),
    ({"chunk_iterations": 0}, "chunk_iterations"),
    ({"seed": -1}, "seed"),
    ({"seed": 2**31}, "seed"),
    ({"seed": True}, "seed"),
    ({"num_seeds": 0}, "num_seeds"),
    ({"placement": "dual"}, "placement"),
    ({"eval_every": -5}, "eval_every"),
    ({"eval_episodes": 0}, "eval_episodes"),
    ({"logdir": ""}, "logdir"),
    ({"run_name": "a/b"}, "run_name"),
    ({"sinks": ("console", "nope")}, "sinks"),
    ({"sinks": ("jsonl", "jsonl")}, "sinks"),
    ({"checkpoint_every": -1}, "checkpoint_every"),
    ({"keep_checkpoints": 0}, "keep_checkpoints"),
    ({"replay_ratio": -1.0}, "replay_ratio"),
    ({"replay_ratio": NAN}, "replay_ratio"),
    ({"autotune_budget_s": 0.0}, "autotune_budget_s"),
    ({"autotune_budget_s": INF}, "autotune_budget_s"),
    ({"compile_cache": "@FILE"}, "compile_cache"),
    ({"sac": SACConfig(gamma=1.5)}, "sac.gamma"),
    ({"sac": SACConfig(actor_lr=0.0)}, "sac.actor_lr"),
    ({"sac": SACConfig(hidden=())}, "sac.hidden"),
    ({"sac": SACConfig(target_entropy_scale=NAN)}, "sac.target_entropy_scale"),
    ({"td3": "@td3.tau=x"}, "td3.tau"),
    ({"ddpg": "@ddpg.gamma=nan"}, "ddpg.gamma"),
    ({"ppo": "@ppo.epochs=1.5"}, "ppo.epochs"),
    ({"env": "gymnax/CartPole-v1"}, "algo"),  # SAC cannot do discrete actions
]


def bad_config(changes: dict, tmp_path) -> RunConfig:
    """RunConfig() with ``changes``; '@' values are built here (files, sub-config fields)."""
    changes = dict(changes)
    for name, value in list(changes.items()):
        if value == "@FILE":
            file = tmp_path / "a-file"
            file.write_text("")
            changes[name] = str(file)
        elif isinstance(value, str) and value.startswith("@"):
            field_name, raw = value[1:].split(".", 1)[1].split("=")
            parsed = {"x": "x", "nan": NAN, "1.5": 1.5}[raw]
            changes[name] = dataclasses.replace(getattr(RunConfig(), name), **{field_name: parsed})
    return dataclasses.replace(RunConfig(), **changes)


@pytest.fixture(scope="module", autouse=True)
def _envs_imported():
    """Import gymnax and build the env specs first: its import runs a few tiny jits."""
    from jaxspreeze import envs

    envs.env_spec("gymnax/Pendulum-v1")
    envs.env_spec("gymnax/CartPole-v1")


@pytest.mark.parametrize(("changes", "field_name"), BAD, ids=[f for _, f in BAD])
def test_bad_config_is_rejected_naming_the_field(changes, field_name, tmp_path, caplog):
    """Each bad value raises ConfigError(field) and compiles nothing."""
    cfg = bad_config(changes, tmp_path)
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        with pytest.raises(ConfigError) as e:
            validate(cfg)
    assert e.value.field == field_name, str(e.value)
    compiles = [r.getMessage() for r in caplog.records if "ompil" in r.getMessage()]
    assert compiles == []


def test_the_table_covers_every_field():
    """Every RunConfig field has at least one bad value above."""
    named = {f.split(".")[0] for _, f in BAD} | {k for c, _ in BAD for k in c}
    assert {f.name for f in dataclasses.fields(RunConfig)} <= named


def _algo_fields() -> list[tuple[str, str]]:
    cfg = RunConfig()
    return [
        (algo, f.name)
        for algo in ("sac", "td3", "ddpg", "ppo")
        for f in dataclasses.fields(getattr(cfg, algo))
    ]


@pytest.mark.parametrize(("algo", "name"), _algo_fields(), ids=lambda x: x)
def test_every_algorithm_field_is_type_checked(algo, name):
    """A wrongly typed value of any algorithm field names ``<algo>.<field>``."""
    sub = dataclasses.replace(getattr(RunConfig(), algo), **{name: "oops"})
    with pytest.raises(ConfigError) as e:
        validate(dataclasses.replace(RunConfig(), **{algo: sub}))
    assert e.value.field == f"{algo}.{name}"


def test_valid_default_config_passes():
    """The defaults are valid."""
    validate(RunConfig())


def test_cli_rejects_bad_flags_with_one_line(capsys, tmp_path):
    """`jaxspreeze train <bad flag>`: exit 2 and one stderr line naming the flag."""
    rows = [
        (["--num-envs", "0"], "--num-envs"),
        (["--seed", "-1"], "--seed"),
        (["--sinks", "console", "nope"], "--sinks"),
        (["--sac.gamma", "1.5"], "--sac.gamma"),
        (["--logdir", ""], "--logdir"),
        (["--learning-starts", "5000", "--buffer-size", "1000"], "--learning-starts"),
        (["--replay-ratio", "nan"], "--replay-ratio"),
    ]
    for argv, flag in rows:
        assert cli.main(["train", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"jaxspreeze: error: {flag}:"), err


def test_cli_subprocess_exit_code():
    """The real console entry point exits 2 with one line naming the flag."""
    out = subprocess.run(
        [sys.executable, "-m", "jaxspreeze", "train", "--keep-checkpoints", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxspreeze: error: --keep-checkpoints:")


# ------------------------------------------------------------------------------ memory
def test_memory_estimate_matches_allocation():
    """Buffer estimate within 5% of the allocated ReplayState; state parts exact."""
    from jaxspreeze.loop import Loop

    cfg = RunConfig(
        num_envs=4, buffer_size=3000, batch_size=16, num_seeds=2, sac=SACConfig(hidden=(8,))
    )
    est = estimate_memory(cfg)
    state = Loop(cfg, devices.single()).init()
    nbytes = lambda t: sum(x.nbytes for x in jax.tree.leaves(t))
    actual = nbytes(state.buffer)
    assert abs(est["replay_buffer"] - actual) <= 0.05 * actual
    assert est["env_states"] == nbytes(state.env)
    assert est["actor_params"] == nbytes(state.agent.actor)
    assert est["critic_params"] == nbytes(state.agent.critic)
    assert est["total"] == sum(v for k, v in est.items() if k != "total")
    assert est["obs_buffer"] == 0 and estimate_memory(cfg, split=True)["obs_buffer"] > 0
    assert format_memory(est).startswith("memory estimate ")


def test_memory_estimate_allocates_nothing():
    """A 1e6-transition buffer (~30 MB) is estimated without allocating it."""
    cfg = RunConfig(buffer_size=10**6, num_seeds=2)
    estimate_memory(cfg)  # first call may build cached env constants
    live = lambda: sum(x.nbytes for x in jax.live_arrays())
    before = live()
    est = estimate_memory(cfg)
    assert est["replay_buffer"] > 20 * 2**20
    assert live() - before < 2**20


def test_check_memory_rejects_what_does_not_fit():
    """A buffer of 1e11 transitions fails naming --buffer-size with the estimate."""
    cfg = RunConfig(buffer_size=10**11)
    with pytest.raises(ConfigError) as e:
        check_memory(cfg, devices.single())
    assert e.value.field == "buffer_size"
    msg = str(e.value)
    assert "GiB" in msg and "--buffer-size" in msg and "available" in msg
    est = check_memory(RunConfig(buffer_size=1000), devices.single().actor)
    assert math.isclose(est["total"], sum(v for k, v in est.items() if k != "total"))
