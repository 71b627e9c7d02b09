"""Config validation covers every field (before any compile), the registry-built
RunConfig, per-algorithm defaults (resolve) and the memory estimate."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import math
import os
import subprocess
import sys
import typing

import jax
import pytest
import tyro

from jaxspreeze import algos, cli, envs, schedules
from jaxspreeze.algos.base import RUN_SIZES
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import ConfigError, RunConfig, from_dict, is_resolved, resolve, to_dict
from jaxspreeze.setup.memory import buffer_nbytes, check_memory, estimate_memory, format_memory
from jaxspreeze.setup.plan import plan

NAN, INF = float("nan"), float("inf")

# (changes, the field the error must name); every RunConfig field appears at least once
BAD: list[tuple[dict, str]] = [
    ({"algo": "a2c"}, "algo"),
    ({"env": "gymnax/Nope-v0"}, "env"),
    ({"actor_obs_key": "state"}, "actor_obs_key"),  # gymnax observes one array: no keys
    ({"actor_obs_key": 3}, "actor_obs_key"),
    ({"critic_obs_key": "privileged_state"}, "critic_obs_key"),
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
    ({"population": ("hidden=16.0",)}, "population"),  # not a member field (a shape one)
    ({"population": ("gamma=0.9", "tau=0.1")}, "population"),  # members set other fields
    ({"population": ("gamma=2.0",)}, "sac.gamma"),  # the algorithm's own check, member 0
    ({"pbt": True}, "pbt"),  # population-based training of a single member
    ({"pbt": True, "population": ("gamma=0.9", "gamma=0.8"), "pbt_interval": 7}, "pbt_interval"),
    ({"pbt": True, "population": ("gamma=0.9", "gamma=0.8"), "pbt_quantile": 0.6}, "pbt_quantile"),
    ({"placement": "dual"}, "placement"),
    ({"compile": "fast"}, "compile"),
    ({"host_workers": 0}, "host_workers"),
    ({"host_stall_timeout_s": 0.0}, "host_stall_timeout_s"),
    ({"host_stall_timeout_s": INF}, "host_stall_timeout_s"),
    ({"eval_every": -5}, "eval_every"),
    ({"eval_episodes": 0}, "eval_episodes"),
    ({"stop_at_return": NAN}, "stop_at_return"),
    ({"stop_at_return": "high"}, "stop_at_return"),
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
    ({"ppo": "@ppo.policy=x"}, "ppo.policy"),
    ({"ppo": "@ppo.tanh_std=x"}, "ppo.tanh_std"),
    ({"ppo": "@ppo.reward_scaling=nan"}, "ppo.reward_scaling"),
    # the sections of algorithms not in use are range-checked too (SAC runs here)
    ({"td3": "@td3.gamma=1.5"}, "td3.gamma"),
    ({"ppo": "@ppo.gae_lambda=1.5"}, "ppo.gae_lambda"),
    ({"ddpg": "@ddpg.tau=1.5"}, "ddpg.tau"),
    ({"fasttd3": "@fasttd3.gamma=1.5"}, "fasttd3.gamma"),
    ({"fastsac": "@fastsac.tau=1.5"}, "fastsac.tau"),
    ({"fastsac": "@fastsac.n_step=1.5"}, "fastsac.n_step"),
    ({"pqn": "@pqn.gamma=1.5"}, "pqn.gamma"),
    ({"dqn": "@dqn.gamma=1.5"}, "dqn.gamma"),
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
    envs.env_spec("gymnax/Pendulum-v1")
    envs.env_spec("gymnax/CartPole-v1")


@pytest.mark.parametrize(("changes", "field_name"), BAD, ids=[f for _, f in BAD])
def test_bad_config_is_rejected_naming_the_field(changes, field_name, tmp_path, caplog):
    """Each bad value raises ConfigError(field) and compiles nothing."""
    cfg = bad_config(changes, tmp_path)
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        with pytest.raises(ConfigError) as e:
            plan(cfg, on_devices=False)
    assert e.value.field == field_name, str(e.value)
    compiles = [r.getMessage() for r in caplog.records if "ompil" in r.getMessage()]
    assert compiles == []


def test_the_table_covers_every_field():
    """Every RunConfig field has at least one bad value above."""
    named = {f.split(".")[0] for _, f in BAD} | {k for c, _ in BAD for k in c}
    assert {f.name for f in dataclasses.fields(RunConfig)} <= named


def _algo_fields() -> list[tuple[str, str]]:
    cfg = RunConfig()
    return [(algo, f.name) for algo in algos.NAMES for f in dataclasses.fields(getattr(cfg, algo))]


@pytest.mark.parametrize(("algo", "name"), _algo_fields(), ids=lambda x: x)
def test_every_algorithm_field_is_type_checked(algo, name):
    """A wrongly typed value of any algorithm field names ``<algo>.<field>``."""
    sub = dataclasses.replace(getattr(RunConfig(), algo), **{name: "oops"})
    with pytest.raises(ConfigError) as e:
        plan(dataclasses.replace(RunConfig(), **{algo: sub}), on_devices=False)
    assert e.value.field == f"{algo}.{name}"


def test_valid_default_config_passes():
    """The defaults are valid."""
    plan(RunConfig(), on_devices=False)


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
    cfg = RunConfig(
        num_envs=4, buffer_size=3000, batch_size=16, num_seeds=2, sac=SACConfig(hidden=(8,))
    )
    est = estimate_memory(plan(cfg, on_devices=False))
    state = schedules.make(plan(resolve(cfg), devices.single())).init()
    nbytes = lambda t: sum(x.nbytes for x in jax.tree.leaves(t))
    actual = nbytes(state.buffer)
    assert abs(est["replay_buffer"] - actual) <= 0.05 * actual
    assert est["env_states"] == nbytes(state.env)
    assert est["actor_params"] == nbytes(state.agent.actor)
    assert est["critic_params"] == nbytes(state.agent.critic)
    assert est["total"] == sum(v for k, v in est.items() if k != "total")
    assert (
        est["obs_buffer"] == 0
        and estimate_memory(plan(cfg, on_devices=False), split=True)["obs_buffer"] > 0
    )
    assert est["replay_buffer"] == buffer_nbytes(plan(cfg, on_devices=False))
    assert (
        buffer_nbytes(plan(RunConfig(algo="ppo", buffer_size=3000), on_devices=False)) == 0
    )  # no replay buffer
    assert format_memory(est).startswith("memory estimate ")


def test_memory_estimate_allocates_nothing():
    """A 1e6-transition buffer (~30 MB) is estimated without allocating it."""
    cfg = RunConfig(buffer_size=10**6, num_seeds=2)
    estimate_memory(plan(cfg, on_devices=False))  # first call may build cached env constants
    live = lambda: sum(x.nbytes for x in jax.live_arrays())
    before = live()
    est = estimate_memory(plan(cfg, on_devices=False))
    assert est["replay_buffer"] > 20 * 2**20
    assert live() - before < 2**20


def test_check_memory_rejects_what_does_not_fit():
    """A buffer of 1e11 transitions fails naming --buffer-size with the estimate."""
    cfg = RunConfig(buffer_size=10**11)
    with pytest.raises(ConfigError) as e:
        check_memory(plan(cfg, on_devices=False), devices.single())
    assert e.value.field == "buffer_size"
    msg = str(e.value)
    assert "GiB" in msg and "--buffer-size" in msg and "available" in msg
    est = check_memory(plan(RunConfig(buffer_size=1000), on_devices=False), devices.single().actor)
    assert math.isclose(est["total"], sum(v for k, v in est.items() if k != "total"))


# ------------------------------------------------------------------------------ registry
def _help(args=("--help",)) -> str:
    """``jaxspreeze train --help`` as tyro renders RunConfig (wide, no colour)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        tyro.cli(RunConfig, args=list(args), prog="jaxspreeze train")
    return out.getvalue()


def test_runconfig_is_built_from_the_registry():
    """One section per registered algorithm (its config class, its default), ``algo``
    choices = the registry's names; tyro's flags and help are those of hand-written
    fields (``--sac.actor-lr``, the sections' and fields' docstrings)."""
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    cfg = RunConfig()
    for spec in algos.all_specs():
        assert isinstance(getattr(cfg, spec.name), spec.config_cls)
        assert fields[spec.name].metadata["help"] == f"{spec.label} hyperparameters."
    assert typing.get_args(typing.get_type_hints(RunConfig)["algo"]) == algos.NAMES
    names = [f.name for f in dataclasses.fields(RunConfig)]
    order = ["algo", "env", "actor_obs_key", "critic_obs_key", "total_steps"]
    assert names[:5] == order  # hand-written order kept
    assert names[-len(algos.NAMES) :] == list(algos.NAMES)
    text = " ".join(_help().split())
    for flag in ("--algo {sac,td3,ddpg,ppo,fasttd3,fastsac,pqn,dqn}", "--sac.actor-lr FLOAT", "--td3.policy-delay INT",
                 "--ppo.normalize-obs, --ppo.no-normalize-obs", "--num-envs", "--eval-every"):  # fmt: skip
        assert flag in text, flag
    assert "SAC hyperparameters." in text and "Actor learning rate (Adam)." in text
    # the sizes that depend on the algorithm say so, with every algorithm's value
    assert "Parallel environments (vmapped on the device). None: the algorithm's default" in text
    assert "sac/td3/ddpg/fasttd3/fastsac/dqn 8, ppo" in text
    parsed = tyro.cli(
        RunConfig, args=["--sac.actor-lr", "0.01", "--algo", "ppo", "--num-envs", "4"]
    )
    assert parsed.sac.actor_lr == 0.01 and parsed.algo == "ppo" and parsed.num_envs == 4
    assert parsed.rollout_steps is None


def test_unknown_algorithm_is_a_config_error():
    """``algos.get`` of an unknown name names the field ``algo`` and lists the choices."""
    with pytest.raises(ConfigError) as e:
        algos.get("a2c")
    assert e.value.field == "algo" and "sac, td3, ddpg, ppo" in str(e.value)
    with pytest.raises(ConfigError) as e:
        resolve(RunConfig(algo="a2c"))
    assert e.value.field == "algo"


@pytest.mark.parametrize("name", algos.NAMES)
def test_resolve_fills_defaults_keeps_what_was_set_and_is_idempotent(name):
    """Unset sizes come from the algorithm's defaults, set ones stay; eval_every unset
    gives about ten evaluations; resolving twice changes nothing."""
    spec = algos.get(name)
    cfg = RunConfig(algo=name)
    assert all(getattr(cfg, n) is None for n in RUN_SIZES) and not is_resolved(cfg)
    r = resolve(cfg)
    assert is_resolved(r) and resolve(r) is r
    assert {n: getattr(r, n) for n in RUN_SIZES} == dict(spec.defaults)
    assert r.eval_every == spec.defaults["total_steps"] // 10
    mine = resolve(RunConfig(algo=name, num_envs=3, total_steps=500, eval_every=0))
    assert (mine.num_envs, mine.total_steps, mine.eval_every) == (3, 500, 0)
    assert mine.rollout_steps == spec.defaults["rollout_steps"]
    assert resolve(RunConfig(algo=name, total_steps=500)).eval_every == 50
    # the plan's derived sizes read the algorithm's defaults on an unresolved config too
    env = "gymnax/CartPole-v1" if name in ("ppo", "pqn", "dqn") else "gymnax/Pendulum-v1"
    p, pr = (plan(c.replace(env=env), on_devices=False) for c in (cfg, r))
    assert p.steps_per_iteration == pr.steps_per_iteration
    assert p.num_iterations == pr.num_iterations and p.warmup_steps == pr.warmup_steps
    # the plan resolves and holds the resolved config; it is what config.json holds
    # (with the torso auto picks for the env's observation: the MLP for both)
    r_env = r.replace(env=env).replace(**{name: {"torso": "mlp"}})
    assert plan(cfg.replace(env=env), on_devices=False).cfg == r_env
    assert from_dict(to_dict(r)) == r


def test_off_policy_defaults_are_unchanged():
    """The default ``jaxspreeze train`` (SAC) runs exactly the sizes it ran before."""
    r = resolve(RunConfig())
    assert r.algo == "sac" and {n: getattr(r, n) for n in RUN_SIZES} == {
        "total_steps": 10_000,
        "num_envs": 8,
        "rollout_steps": 1,
        "grad_steps": 8,
        "batch_size": 256,
        "buffer_size": 100_000,
        "learning_starts": 1_000,
        "chunk_iterations": 100,
    }
    p = plan(r, on_devices=False)
    assert p.warmup_steps == 1000 and p.num_iterations == 1125


def test_ppo_defaults_pass_validation_on_discrete_and_continuous_envs():
    """``--algo ppo`` with no other flag is valid (its minibatch divides its rollout)."""
    for env in ("gymnax/CartPole-v1", "gymnax/Acrobot-v1", "gymnax/Pendulum-v1"):
        plan(RunConfig(algo="ppo", env=env), on_devices=False)
    with pytest.raises(ConfigError) as e:
        plan(
            RunConfig(algo="ppo", env="gymnax/CartPole-v1", num_envs=8, rollout_steps=1),
            on_devices=False,
        )
    assert e.value.field == "batch_size" and "must divide the rollout" in str(e.value)


def test_cli_refuses_a_bad_section_of_an_algorithm_not_in_use(capsys):
    """``--td3.gamma 1.5`` with SAC: exit 2 naming --td3.gamma (issue 15 item 6)."""
    assert cli.main(["train", "--td3.gamma", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxspreeze: error: --td3.gamma:"), err


def test_replace_changes_a_section_field_and_keeps_the_others():
    """``cfg.replace(sac={"gamma": 0.9})`` on a preset keeps the preset's other SAC
    fields (its hidden sizes): a section's change is merged, not a fresh section."""
    cfg = RunConfig(algo="sac").replace(sac={"hidden": (64, 64), "alpha_lr": 3e-4})
    changed = cfg.replace(sac={"gamma": 0.9}, total_steps=123)
    assert changed.sac.hidden == (64, 64) and changed.sac.alpha_lr == 3e-4
    assert changed.sac.gamma == 0.9 and changed.total_steps == 123
    assert cfg.replace(**{"sac": {"target-entropy-scale": 0.5}}).sac.hidden == (64, 64)
