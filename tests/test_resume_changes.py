"""Resume applies or refuses, never ignores: every changed field is listed; shape and
start-only fields are refused; every other one takes effect from the first resumed update.

One tiny SAC run (:func:`train_once`, also used by test_rundir and test_faults) is
trained once per process; each test resumes a copy of it. The resumed runs share the
compiled chunk through the persistent compilation cache.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from test_checkpoint import bitwise_equal, host_leaves

from jaxspreeze import algos, cli, envs
from jaxspreeze.algos import members
from jaxspreeze.algos.base import AgentState
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.run.trainer import train
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint, resume

# 2 envs x 4 iterations = 8 env steps per chunk; an 8-step warm-up; a checkpoint per chunk
TINY = dict(
    total_steps=24,
    num_envs=2,
    grad_steps=1,
    batch_size=8,
    buffer_size=64,
    learning_starts=8,
    chunk_iterations=4,
    eval_every=0,
    eval_episodes=2,
    checkpoint_every=8,
    keep_checkpoints=10,
    sinks=("jsonl", "csv"),
    sac=SACConfig(hidden=(8, 8)),
)
T1, T2 = 24, 40  # the trained run ends at T1 (2 chunks); resumes go on to T2 (2 more)


def tiny_cfg(logdir: Path, run_name: str, **changes) -> RunConfig:
    """The shared tiny SAC run's config."""
    return RunConfig(**{**TINY, "logdir": str(logdir), "run_name": run_name, **changes})


@functools.cache
def train_once() -> Path:
    """A finished tiny SAC run (checkpoints at 16 and 24 env steps), trained once per
    process for every module that needs one (removed at exit); copy it before use."""
    logdir = Path(tempfile.mkdtemp(prefix="jaxspreeze-trained-"))
    atexit.register(shutil.rmtree, logdir, ignore_errors=True)
    return train(tiny_cfg(logdir, "run"), quiet=True).run_dir


@pytest.fixture(scope="session")
def trained_run() -> Path:
    """The shared finished run (:func:`train_once`)."""
    return train_once()


def copy_run(trained: Path, where: Path, name: str = "run") -> Path:
    """A copy of the trained run directory."""
    target = where / name
    shutil.copytree(trained, target)
    return target


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory, by relative path (what "unchanged" compares)."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------------ units
HPARAMS = {
    "sac": {
        "actor_lr": 0.02, "critic_lr": 0.03, "alpha_lr": 0.04, "gamma": 0.9, "tau": 0.1,
        "target_entropy_scale": 0.5,
    },
    "td3": {
        "actor_lr": 0.02, "critic_lr": 0.03, "gamma": 0.9, "tau": 0.1,
        "exploration_noise": 0.3, "target_noise": 0.1, "target_noise_clip": 0.3,
    },
    "ddpg": {
        "actor_lr": 0.02, "critic_lr": 0.03, "gamma": 0.9, "tau": 0.1, "exploration_noise": 0.3
    },
    "ppo": {
        "lr": 0.02, "gamma": 0.9, "gae_lambda": 0.5, "anneal_lr": False,
        "clip_eps": 0.1, "ent_coef": 0.01, "vf_coef": 0.25, "reward_scaling": 0.5,
    },
}  # fmt: skip


def initial_state(cfg: RunConfig) -> TrainState:
    """One seed's initial agent state of ``cfg`` in a TrainState (no compile)."""
    spec = algos.get(cfg.algo)
    agent = spec.make(getattr(cfg, cfg.algo), envs.env_spec(cfg.env), cfg).init(jax.random.key(0))
    return TrainState(*[None] * len(TrainState._fields))._replace(agent=agent)


@pytest.mark.parametrize("algo", list(HPARAMS))
def test_apply_hyperparameters_takes_every_state_hyperparameter_from_the_new_config(algo):
    """Learning rates (inside the optimiser states), gamma, tau, lambda, noise scales, clip
    ranges, loss coefficients and the reward scale come from the new config; parameters
    and optimiser moments stay as restored."""
    env = "gymnax/CartPole-v1" if algo == "ppo" else "gymnax/Pendulum-v1"
    base = resolve(RunConfig(algo=algo, env=env).replace(**{algo: {"hidden": (4,)}}))
    new = base.replace(**{algo: {"hidden": (4,), **HPARAMS[algo]}})
    restored = initial_state(base)
    trained = restored._replace(agent=jax.tree.map(lambda x: x + 1, restored.agent))
    fresh = initial_state(new)
    out = resume.apply_hyperparameters(trained, fresh)
    replaced = set()
    for (path, got), kept, want in zip(
        jax.tree_util.tree_flatten_with_path(out.agent)[0],
        jax.tree.leaves(trained.agent),
        jax.tree.leaves(fresh.agent),
        strict=True,
    ):
        if resume.is_hyperparameter(path):
            replaced.add(jax.tree_util.keystr(path))
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_array_equal(got, kept)
    lrs = [k for k in HPARAMS[algo] if k.endswith("lr")]
    opt_lrs = [p for p in replaced if "learning_rate" in p]
    assert len(opt_lrs) >= len(lrs) - (algo == "ppo"), replaced  # PPO: one tx, two states
    for name in ("gamma", "tau", "gae_lambda", *members.ADDED_LEAVES):
        if name in HPARAMS[algo]:
            assert any(p.endswith(f".{name}") for p in replaced), (name, replaced)
    actor_lr = optax.tree_utils.tree_get(out.agent.actor.opt_state, "learning_rate")
    want_lr = HPARAMS[algo].get("actor_lr", HPARAMS[algo].get("lr"))
    assert float(actor_lr) == pytest.approx(want_lr)


def _planned(cfg: RunConfig):
    """The plan (no devices) of a changed config, as a resume compares it with the saved one."""
    return plan(cfg, on_devices=False)


START_ONLY = [
    ({"sac": {"init_alpha": 0.5}}, "sac.init_alpha", "log_alpha"),
    ({"seed": 3}, "seed", "only when a run starts"),
    ({"learning_starts": 16}, "learning_starts", "only when a run starts"),
]


@pytest.mark.parametrize(("change", "name", "why"), START_ONLY)
def test_start_only_fields_are_found(change, name, why):
    """A field whose change only alters the initial state (or the start) is refused."""
    saved = resolve(RunConfig(**TINY))
    refused = resume.start_only_fields(saved, algos.get("sac"), _planned(saved.replace(**change)))
    assert list(refused) == [name] and why in refused[name]


def test_hyperparameters_and_closure_fields_are_not_start_only():
    """Learning rates, gamma, tau and closure fields (entropy target, noise) apply; an
    on-policy run does not read learning_starts."""
    saved = resolve(RunConfig(**TINY))
    applied = saved.replace(
        sac={"hidden": (8, 8), **HPARAMS["sac"], "target_entropy_scale": 0.5},
        td3={"exploration_noise": 0.3},
    )
    assert resume.start_only_fields(saved, algos.get("sac"), _planned(applied)) == {}
    ppo = resolve(RunConfig(algo="ppo", env="gymnax/CartPole-v1"))
    changed = _planned(ppo.replace(learning_starts=5))
    assert resume.start_only_fields(ppo, algos.get("ppo"), changed) == {}


# ------------------------------------------------------------------------------ refused
REFUSED = [
    (["--sac.hidden", "16", "16"], "--sac.hidden", "shapes"),
    (["--num-envs", "4"], "--num-envs", "shapes"),
    (["--sac.init-alpha", "0.5"], "--sac.init-alpha", "start setting"),
    (["--seed", "7"], "--seed", "start setting"),
    (["--learning-starts", "16"], "--learning-starts", "start setting"),
    ([], "--total-steps", "already has 24 env steps"),  # the run's own total: nothing left
    (["--total-steps", "16"], "--total-steps", "give --total-steps above 24"),
]


@pytest.mark.parametrize(("args", "flag", "words"), REFUSED)
def test_a_refused_resume_exits_2_and_changes_nothing(
    trained_run, tmp_path, capsys, args, flag, words
):
    """Exit 2, one line naming the flag, the run directory bitwise unchanged."""
    run_dir = copy_run(trained_run, tmp_path)
    before = snapshot(run_dir)
    code = cli.main(["train", "--resume", str(run_dir), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"jaxspreeze: error: {flag}:") and words in err[0], err
    assert snapshot(run_dir) == before


def test_every_refused_field_is_named_in_the_one_line(trained_run, tmp_path, capsys):
    """Shape fields and start fields refused together: one line naming all of them."""
    run_dir = copy_run(trained_run, tmp_path)
    args = ["--num-envs", "4", "--sac.hidden", "16", "16", "--seed", "3"]
    code = cli.main(["train", "--resume", str(run_dir), *args])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.startswith("jaxspreeze: error: --num-envs:"), line
    assert all(name in line for name in ("num_envs", "sac.hidden", "seed 0 -> 3")), line


def test_a_run_killed_after_its_last_checkpoint_is_finished_by_resuming_it(
    trained_run, tmp_path, capsys
):
    """Killed after the last checkpoint, before the summary and the policy: resuming it as
    it was trains nothing more and writes the final evaluation, the summary and the
    policy, as the run would have (the final evaluation's record once, not twice)."""
    run_dir = copy_run(trained_run, tmp_path)
    (run_dir / "summary.json").unlink()
    (run_dir / "policy.msgpack").unlink()
    code = cli.main(["train", "--resume", str(run_dir)])
    capsys.readouterr()
    assert code == 0
    before = json.loads((trained_run / "summary.json").read_text())
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["env_steps"] == before["env_steps"] == T1
    assert after["final_eval_return"] == before["final_eval_return"]
    policy = lambda d: (d / "policy.msgpack").read_bytes()
    assert policy(run_dir) == policy(trained_run)
    rows = lambda d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert sum(bool(r.get("final")) for r in rows(run_dir)) == 1
    assert len(rows(run_dir)) == len(rows(trained_run))


# ------------------------------------------------------------------------------ applied
@pytest.mark.slow  # two whole runs (the default run stays under 10 minutes)
def test_a_changed_learning_rate_applies_from_the_first_resumed_update(
    trained_run, tmp_path, capsys
):
    """Resumed with new learning rates, gamma, tau and entropy target: the parameters
    differ from the unchanged resume and equal a reference built by hand (the checkpoint
    restored into the new config's schedule, its state hyperparameters set with optax,
    the same chunks run). The unchanged resume equals an uninterrupted run bitwise."""
    new = {"actor_lr": 0.01, "critic_lr": 0.02, "gamma": 0.9, "tau": 0.05}
    same = train(
        tiny_cfg(tmp_path, "x", total_steps=T2),
        quiet=True,
        resume=copy_run(trained_run, tmp_path, "same"),
    )
    capsys.readouterr()
    changed_dir = copy_run(trained_run, tmp_path, "changed")
    cfg = tiny_cfg(tmp_path, "x", total_steps=T2).replace(
        sac={"hidden": (8, 8), **new, "target_entropy_scale": 0.5}, td3={"gamma": 0.5}
    )
    changed = train(cfg, resume=changed_dir)
    out = capsys.readouterr().out

    # the reference: restore into the new config's (already compiled) schedule, set the
    # state hyperparameters by hand, run the same two chunks
    schedule = changed.schedule
    template = schedule.init()
    state, info = checkpoint.restore(
        checkpoint.checkpoint_dir(trained_run) / f"{T1:012d}", template
    )
    assert info["env_steps"] == T1

    def full(value, like):
        return jax.device_put(jnp.full(like.shape, value, like.dtype), like.sharding)

    def set_lr(opt_state, lr):
        old = optax.tree_utils.tree_get(opt_state, "learning_rate")
        return optax.tree_utils.tree_set(opt_state, learning_rate=full(lr, old))

    actor, critic = state.agent
    actor = actor._replace(
        opt_state=set_lr(actor.opt_state, new["actor_lr"]),
        target_entropy_scale=full(0.5, actor.target_entropy_scale),  # a leaf of the state too
    )
    critic = critic._replace(
        opt_state=set_lr(critic.opt_state, new["critic_lr"]),
        gamma=full(new["gamma"], critic.gamma),
        tau=full(new["tau"], critic.tau),
    )
    state = state._replace(agent=AgentState(actor, critic))
    for _ in range(2):
        state, _ = schedule.chunk(state)
    assert bitwise_equal(changed.state.agent, state.agent)
    assert not bitwise_equal(changed.state.agent.actor.params, same.state.agent.actor.params)

    # listed on the console, recorded in summary.json, resumes.jsonl and config.json
    assert "applied from the first update" in out and "sac.actor_lr 0.001 -> 0.01" in out
    assert "sac.target_entropy_scale 1.0 -> 0.5" in out
    assert "not used by this run (sac): td3.gamma 0.99 -> 0.5" in out
    applied = changed.summary["resume"]["applied"]
    assert applied["sac.actor_lr"] == [0.001, 0.01] and applied["total_steps"] == [T1, T2]
    assert changed.summary["resume"]["unused"] == {"td3.gamma": [0.99, 0.5]}
    entry = json.loads((changed_dir / "resumes.jsonl").read_text().splitlines()[-1])
    assert entry["applied"] == applied and entry["env_steps"] == T1
    assert json.loads((changed_dir / "config.json").read_text())["sac"]["actor_lr"] == 0.01
    assert same.summary["resume"]["applied"] == {"total_steps": [T1, T2]}

    # unchanged config: bitwise the run that never stopped
    straight = train(tiny_cfg(tmp_path, "straight", total_steps=T2), quiet=True)
    assert host_leaves(same.state) == host_leaves(straight.state)
