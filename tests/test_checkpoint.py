"""Checkpoints: bitwise round trip, bitwise resume at the schedule level, atomic writes,
guards, resume checks.

One tiny SAC run (2 seeds) is compiled once per module and shared; resuming it reuses
that schedule's compiled programs (a schedule carries no run state: the program is a pure
function of the config; what a resume must bring back is the state, which is what these
tests check). The slow tests resume in a fresh schedule that compiles its own programs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos, cli, schedules
from jaxspreeze.algos.base import AgentState
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core.errors import CheckpointError, ConfigError, NonFiniteError
from jaxspreeze.envs import env_spec
from jaxspreeze.run import checkpoint_eval
from jaxspreeze.run.guards import nonfinite_message
from jaxspreeze.run.records import chunk_record
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan, plan
from jaxspreeze.store import checkpoint, resume

REPO = Path(__file__).resolve().parents[1]

# no warm-up (one program less to compile), 4 chunks x 2 iterations x 2 envs
TINY = dict(
    total_steps=16,
    num_envs=2,
    grad_steps=1,
    batch_size=8,
    buffer_size=64,
    learning_starts=0,
    chunk_iterations=2,
    num_seeds=2,
    sinks=(),
    eval_episodes=2,
    sac=SACConfig(hidden=(8, 8)),
)


def tiny_cfg(**changes) -> RunConfig:
    """The shared tiny SAC config (2 seeds) with ``changes``, resolved."""
    return config.resolve(RunConfig(**{**TINY, **changes}))


def host_leaves(tree) -> list[tuple[str, str, tuple, bytes]]:
    """(path, dtype, shape, raw bytes) of every leaf; typed keys as their key data."""
    out = []
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        a = np.asarray(x)
        out.append((jax.tree_util.keystr(path), a.dtype.name, a.shape, a.tobytes()))
    return out


def bitwise_equal(a, b) -> bool:
    """Same structure, dtypes, shapes and bytes."""
    return host_leaves(a) == host_leaves(b)


def drop_optimizer_state(state: TrainState, fresh: TrainState) -> TrainState:
    """``state`` with every ``*opt_state`` field taken from ``fresh`` (the negative control)."""

    def swap(side, new):
        names = [n for n in side._fields if "opt_state" in n]
        assert names, f"{type(side).__name__} has no optimizer state field"
        return side._replace(**{n: getattr(new, n) for n in names})

    agent = AgentState(
        swap(state.agent.actor, fresh.agent.actor), swap(state.agent.critic, fresh.agent.critic)
    )
    return state._replace(agent=agent)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Chunk A and B of the tiny run, uninterrupted, with a checkpoint after chunk A."""
    cfg = tiny_cfg()
    schedule = schedules.make(plan(cfg, devices.single()))
    run_dir = tmp_path_factory.mktemp("run")
    state_a, _ = schedule.chunk(schedule.init())
    ckpt = checkpoint.save(run_dir, state_a, env_steps=4, chunk=0, config=cfg, extra={"x": 1})
    host_a = host_leaves(state_a)
    state_b, metrics_b = schedule.chunk(state_a)  # donates state_a
    return {
        "cfg": cfg,
        "schedule": schedule,
        "run_dir": run_dir,
        "ckpt": ckpt,
        "host_a": host_a,
        "state_b": state_b,
        "metrics_b": jax.device_get(metrics_b),
    }


@pytest.fixture(scope="module")
def template(run):
    """A fresh state of the tiny config, as a restore template (never donated)."""
    return run["schedule"].init()


def host_copy(tree):
    """A copy of ``tree`` on the same devices, through the host (no compile)."""

    def copy(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = jax.device_put(np.asarray(jax.random.key_data(x)), x.sharding)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return jax.device_put(np.asarray(x), x.sharding)

    return jax.tree.map(copy, tree)


# ------------------------------------------------------------------------------ round trip
def test_round_trip_is_bitwise_with_two_seeds(run, template):
    """Every leaf of a trained 2-seed SAC state, buffer and keys included, comes back exact."""
    restored, info = checkpoint.restore(run["ckpt"], template)
    assert host_leaves(restored) == run["host_a"]
    assert info["env_steps"] == 4 and info["chunk"] == 0 and info["extra"] == {"x": 1}
    assert info["config"] == run["cfg"]
    assert jax.dtypes.issubdtype(restored.key.dtype, jax.dtypes.prng_key)
    assert int(np.asarray(restored.buffer.size)[0]) == 4  # chunk A: 2 iterations x 2 envs
    for new, old in zip(jax.tree.leaves(restored), jax.tree.leaves(template), strict=True):
        assert new.dtype == old.dtype and new.sharding == old.sharding


@pytest.mark.parametrize("algo", ["td3", pytest.param("ddpg", marks=pytest.mark.slow), "ppo"])
def test_round_trip_other_algorithms(algo, tmp_path):
    """A fresh state of each other algorithm round-trips bitwise (skipped until it exists)."""
    from jaxspreeze import algos

    if not hasattr(algos.get(algo), "make"):
        pytest.skip(f"{algo}.make() does not exist yet")
    hidden = {"hidden": (8,)}
    changes = {algo: type(getattr(RunConfig(), algo))(**hidden), "algo": algo}
    if algo == "ppo":
        changes.update(batch_size=2, num_envs=2, rollout_steps=2, learning_starts=0)
    if algo == "td3":
        changes.update(grad_steps=2)  # a multiple of td3.policy_delay (the plan checks it)
    cfg = tiny_cfg(**changes)
    schedule = schedules.make(plan(cfg, devices.single()))
    state = schedule.init()
    path = checkpoint.save(tmp_path, state, env_steps=0, chunk=0, config=cfg)
    restored, _ = checkpoint.restore(path, schedule.init(seed=123))
    assert bitwise_equal(restored, state)


# ------------------------------------------------------------------------------ bitwise resume
def test_resume_equals_uninterrupted_run(run, template):
    """Chunk A, save, restore into a fresh state, chunk B == chunks A, B: state and metrics."""
    schedule = run["schedule"]
    restored, _ = checkpoint.restore(checkpoint.latest(run["run_dir"]), template)
    state_b, metrics_b = schedule.chunk(restored)
    assert bitwise_equal(state_b, run["state_b"])
    metrics_b = jax.device_get(metrics_b)
    assert metrics_b.keys() == run["metrics_b"].keys()
    for k in metrics_b:
        assert np.asarray(metrics_b[k]).tobytes() == np.asarray(run["metrics_b"][k]).tobytes(), k


def test_resume_without_optimizer_state_differs(run, template):
    """Negative control: re-initialised optimizer states make the comparison fail."""
    schedule = run["schedule"]
    restored, _ = checkpoint.restore(run["ckpt"], template)
    dropped = drop_optimizer_state(restored, host_copy(template))
    state_b, _ = schedule.chunk(dropped)
    assert not bitwise_equal(state_b.agent, run["state_b"].agent)
    assert not bitwise_equal(state_b, run["state_b"])


# ------------------------------------------------------------------------------ files
def test_keep_latest_and_incomplete_dirs(template, tmp_path):
    """Only the newest ``keep`` survive; temp dirs and dirs without a manifest are ignored."""
    for steps in (100, 200, 300):
        checkpoint.save(tmp_path, template, env_steps=steps, chunk=steps // 100, keep=2)
    names = [p.name for p in checkpoint.list_checkpoints(tmp_path)]
    assert names == ["000000000200", "000000000300"]
    root = checkpoint.checkpoint_dir(tmp_path)
    (root / "000000000400").mkdir()  # half-written by something else: no manifest
    (root / ".tmp-000000000500-1-abc").mkdir()
    assert checkpoint.latest(tmp_path).name == "000000000300"
    assert checkpoint.latest(tmp_path / "nowhere") is None
    # same step again: replaced, still complete
    checkpoint.save(tmp_path, template, env_steps=300, chunk=9, keep=2)
    assert checkpoint.read_manifest(checkpoint.latest(tmp_path))["chunk"] == 9
    assert not list(root.glob(".tmp-*"))


class Crash(Exception):
    """Raised inside a save, where a crash would happen."""


class Exploding:
    """A leaf that raises :class:`Crash` when save() copies it to the host."""

    def __array__(self, dtype=None, copy=None):
        raise Crash("while writing a leaf")


def with_leaf(tree, i: int, leaf):
    """``tree`` with its ``i``-th leaf replaced by ``leaf``."""
    leaves, treedef = jax.tree.flatten(tree)
    return jax.tree.unflatten(treedef, [*leaves[:i], leaf, *leaves[i + 1 :]])


def crash_at_commit(monkeypatch):
    """Make the rename that commits a checkpoint (its temp dir into place) raise Crash."""
    real = os.rename

    def rename(src, dst, *args, **kwargs):
        if Path(src).name.startswith(".tmp-"):
            raise Crash("before the commit")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)


def test_crash_at_every_stage_of_a_save_keeps_the_previous(template, tmp_path, monkeypatch):
    """An exception at any point inside save() leaves the previous checkpoint loadable:
    while writing leaf i (every 7th leaf), and with everything written, before the commit."""
    first = checkpoint.save(tmp_path, template, env_steps=1, chunk=0)
    n_leaves = len(jax.tree.leaves(template))
    for i in range(0, n_leaves, 7):
        with pytest.raises(Crash):
            checkpoint.save(tmp_path, with_leaf(template, i, Exploding()), env_steps=2, chunk=1)
        assert checkpoint.latest(tmp_path) == first, i
    with monkeypatch.context() as mp:
        crash_at_commit(mp)
        with pytest.raises(Crash):
            checkpoint.save(tmp_path, template, env_steps=2, chunk=1)
    assert checkpoint.latest(tmp_path) == first, "before_commit"
    restored, info = checkpoint.restore(checkpoint.latest(tmp_path), template)
    assert bitwise_equal(restored, template) and info["env_steps"] == 1


KILL_CHILD = """
import os, random, sys, time
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
import numpy as np
from jaxspreeze import checkpoint

def stall(where):
    print("KILL-ME", where, flush=True)
    time.sleep(120)

class Stalling:  # a leaf that stalls when save() copies it to the host
    def __array__(self, dtype=None, copy=None):
        stall("leaf")

# a state-like tree (no jit needed here): 60 leaves, one of them 8 MiB
tree = {{f"leaf{{i:02d}}": np.full((16, 16), i, np.float32) for i in range(59)}}
tree["buffer"] = np.ones((2**21,), np.float32)
stages = [f"leaf:{{i}}" for i in range(len(tree))] + ["before_commit"]
kill_at = random.Random(0).choice(stages)
if kill_at == "before_commit":  # everything written: stall at the rename that commits
    rename = os.rename
    def stalling_rename(src, dst):
        if os.path.basename(src).startswith(".tmp-"):
            stall(kill_at)
        return rename(src, dst)
    os.rename = stalling_rename
else:  # stall while writing leaf i
    leaves, treedef = jax.tree.flatten(tree)
    leaves[int(kill_at.split(":")[1])] = Stalling()
    tree = jax.tree.unflatten(treedef, leaves)
checkpoint.save({run_dir!r}, tree, env_steps=16, chunk=1)
print("NOT KILLED", flush=True)
"""


def test_sigkill_during_save_keeps_previous_checkpoint(run, template, tmp_path):
    """SIGKILL inside a checkpoint write (at a random stage) leaves the previous one loadable."""
    first = checkpoint.save(tmp_path, template, env_steps=8, chunk=0, config=run["cfg"])
    code = KILL_CHILD.format(run_dir=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("KILL-ME"), line + proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    root = checkpoint.checkpoint_dir(tmp_path)
    assert list(root.glob(".tmp-*")), "the kill should have left a partial temp dir"
    assert checkpoint.latest(tmp_path) == first
    restored, info = checkpoint.restore(first, template)
    assert bitwise_equal(restored, template)
    assert info["env_steps"] == 8 and info["config"] == run["cfg"]
    # the next save clears the partial write
    checkpoint.save(tmp_path, restored, env_steps=16, chunk=1)
    assert not list(root.glob(".tmp-*")) and checkpoint.latest(tmp_path).name.endswith("16")


def test_restore_rejects_a_different_shape(run, tmp_path):
    """A template of another config fails with a message naming the leaf."""
    other = schedules.make(plan(tiny_cfg(buffer_size=32), devices.single()))
    abstract = other.init_abstract()  # nothing allocated
    with pytest.raises(CheckpointError, match=r"\.buffer\.data"):
        checkpoint.restore(run["ckpt"], abstract)


def test_check_compatible_names_every_shape_field(run):
    """Resuming with shape-changing settings names all of them; other changes pass."""
    saved = run["cfg"]
    sac = algos.get(saved.algo)
    as_planned = lambda cfg: RunPlan(cfg, sac, env_spec(cfg.env))
    resume.check_compatible(saved, sac, as_planned(saved.replace(total_steps=10**6, seed=3)))
    bad = saved.replace(num_envs=4, buffer_size=128, sac={"hidden": (16, 16)})
    with pytest.raises(ConfigError) as e:
        resume.check_compatible(saved, sac, as_planned(bad))
    assert e.value.field == "num_envs"
    for name in ("num_envs", "buffer_size", "sac.hidden"):
        assert name in str(e.value)
    with pytest.raises(ConfigError, match="placement"):
        resume.check_compatible(saved, sac, as_planned(saved), saved_split=False, split=True)
    assert resume.config_changes(saved, bad)["num_envs"] == (2, 4)


SPLIT_CHILD = """
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, {tests!r})
from test_checkpoint import tiny_cfg, bitwise_equal
from jaxspreeze import checkpoint, devices, schedules
from jaxspreeze.setup.plan import plan
import jax
placement = devices.resolve("split")
assert placement.split
schedule = schedules.make(plan(tiny_cfg(num_seeds=1, placement="split"), placement))
state = schedule.init()
path = checkpoint.save({run_dir!r}, state, env_steps=0, chunk=0)
assert checkpoint.saved_split(path)
# the template's values are never read (the in-process round trip uses a different one);
# one init keeps this child cheap
restored, _ = checkpoint.restore(path, state)
assert bitwise_equal(restored, state)
for new, old in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
    assert new.devices() == old.devices(), (new.devices(), old.devices())
dev = lambda t: {{d for x in jax.tree.leaves(t) for d in x.devices()}}
assert dev(restored.agent.actor) == dev(restored.obs_buffer) == {{placement.actor}}
assert dev(restored.agent.critic) == dev(restored.buffer) == {{placement.critic}}
assert placement.actor != placement.critic
# one device, e.g. `jaxspreeze eval` of a split run: the obs-only buffer is skipped
single = jax.device_put(state._replace(obs_buffer=None), jax.devices()[0])
restored, _ = checkpoint.restore(path, single, partial=True)
assert bitwise_equal(restored, single) and dev(restored) == {{jax.devices()[0]}}
print("OK")
"""


def test_split_placement_restores_onto_its_devices(tmp_path):
    """With 2 fake CPU devices, actor and critic halves come back on their own devices."""
    code = SPLIT_CHILD.format(tests=str(REPO / "tests"), run_dir=str(tmp_path))
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


# ------------------------------------------------------------------------------ guards
def test_poisoned_critic_turns_the_finite_flag_false(run, template, tmp_path):
    """NaN in seed 0's critic parameters: critic_finite False for seed 0, True for seed 1;
    such a state is never saved."""
    schedule = run["schedule"]
    state, _ = checkpoint.restore(run["ckpt"], template)
    critic = state.agent.critic
    poisoned = jax.tree.map(lambda x: x.at[0].set(jnp.nan), critic.params)
    state = state._replace(agent=state.agent._replace(critic=critic._replace(params=poisoned)))
    good = checkpoint.save(tmp_path, template, env_steps=12, chunk=0)
    with pytest.raises(NonFiniteError, match=r"\.agent\.critic\.params"):
        checkpoint.save(tmp_path, state, env_steps=16, chunk=1)
    assert checkpoint.latest(tmp_path) == good
    assert not list(checkpoint.checkpoint_dir(tmp_path).glob(".tmp-*"))
    _, metrics = schedule.chunk(state)
    metrics = jax.device_get(metrics)
    assert not np.asarray(metrics["critic_finite"])[:, 0].any()
    assert np.asarray(metrics["critic_finite"])[:, 1].all()
    record = chunk_record(metrics, run["cfg"].num_seeds)
    record["chunk"] = 1
    assert record["critic_finite"] is False
    message = nonfinite_message(record)
    assert message is not None
    assert "critic loss/gradients" in message and "env step 8" in message
    assert "seed(s) 0" in message


def test_nonfinite_message():
    """None for a finite record; names quantity, step and chunk otherwise."""
    ok = {"critic_finite": True, "actor_finite": True, "env_steps": 10, "chunk": 0}
    assert nonfinite_message(ok) is None
    assert nonfinite_message({"env_steps": 10}) is None
    msg = nonfinite_message({**ok, "actor_finite": False, "chunk": 3})
    assert "actor loss/gradients/temperature" in msg and "env step 10 (chunk 3)" in msg
    assert "critic" not in msg.split(" in the chunk")[0]


# ------------------------------------------------------------------------------ evaluation
def test_evaluate_checkpoint_of_a_run_without_one_is_an_error(tmp_path):
    """evaluate_checkpoint names the directory it looked in."""
    with pytest.raises(CheckpointError, match="no checkpoint") as e:
        checkpoint_eval.evaluate_checkpoint(tmp_path / "nothing-here")
    assert str(checkpoint.checkpoint_dir(tmp_path / "nothing-here")) in str(e.value)


def test_eval_cli(run, capsys):
    """`jaxspreeze eval RUN_DIR` evaluates the latest checkpoint; no checkpoint -> exit 2."""
    assert cli.main(["eval", str(run["run_dir"]), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["env_steps"] == 4 and result["episodes"] == 2
    assert len(result["return_mean"]) == 2 and all(map(math.isfinite, result["return_mean"]))
    assert cli.main(["eval", str(run["run_dir"] / "nothing-here")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no checkpoint" in err[0]


def test_eval_cli_subprocess_no_checkpoint(tmp_path):
    """The real command: exit 2, one line, for a directory without checkpoints."""
    out = subprocess.run(
        [sys.executable, "-m", "jaxspreeze", "eval", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no checkpoint" in lines[0], out.stderr


# ------------------------------------------------------------------------------ slow: more algorithms, split
def resume_matches(cfg: RunConfig, placement, run_dir) -> tuple[bool, bool]:
    """(chunk A, save, restore in a fresh schedule, chunk B == A, B; same with the optimizer
    state dropped). The fresh schedule compiles its own program, as a new process would."""
    schedule = schedules.make(plan(cfg, placement))
    state_a, _ = schedule.chunk(schedule.warmup(schedule.init()))
    path = checkpoint.save(run_dir, state_a, env_steps=1, chunk=0, config=cfg)
    state_b, metrics_b = schedule.chunk(state_a)
    fresh = schedules.make(plan(cfg, placement))
    restored, _ = checkpoint.restore(path, fresh.init())
    again_b, again_metrics = fresh.chunk(restored)
    same = bitwise_equal(again_b, state_b) and bitwise_equal(
        jax.device_get(again_metrics), jax.device_get(metrics_b)
    )
    restored, _ = checkpoint.restore(path, fresh.init())
    dropped_b, _ = fresh.chunk(drop_optimizer_state(restored, fresh.init(seed=99)))
    return same, bitwise_equal(dropped_b, state_b)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["td3", "ddpg", "ppo"])
def test_resume_other_algorithms(algo, tmp_path):
    """Bitwise resume (and its negative control) for the other algorithms, 2 seeds."""
    from jaxspreeze import algos

    if not hasattr(algos.get(algo), "make"):
        pytest.skip(f"{algo}.make() does not exist yet")
    changes = {algo: type(getattr(RunConfig(), algo))(hidden=(8,)), "algo": algo}
    changes["learning_starts"] = 8  # with a warm-up
    if algo == "ppo":
        changes.update(batch_size=2, num_envs=2, rollout_steps=2, learning_starts=0)
    same, dropped_same = resume_matches(tiny_cfg(**changes), devices.single(), tmp_path)
    assert same and not dropped_same


SPLIT_RESUME_CHILD = """
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, {tests!r})
from test_checkpoint import tiny_cfg, resume_matches
from jaxspreeze import devices
same, dropped_same = resume_matches(
    tiny_cfg(placement="split", learning_starts=8), devices.resolve("split"), {run_dir!r}
)
assert same and not dropped_same, (same, dropped_same)
print("OK")
"""


@pytest.mark.slow
def test_split_resume_is_bitwise(tmp_path):
    """The split placement on 2 fake CPU devices resumes bitwise; dropping the optimizer fails."""
    code = SPLIT_RESUME_CHILD.format(tests=str(REPO / "tests"), run_dir=str(tmp_path))
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_eval_of_a_live_run_falls_back_when_its_checkpoint_is_pruned(run, tmp_path, monkeypatch):
    """A live run with --keep-checkpoints prunes the checkpoint `eval` is reading: the
    newest one left is evaluated instead, and the pruned one is named."""
    run_dir = tmp_path / "live"
    shutil.copytree(run["run_dir"], run_dir)
    older = checkpoint.find(run_dir)[0]
    newer = older.with_name(f"{int(older.name) + 4:0{len(older.name)}d}")
    shutil.copytree(older, newer)
    assert checkpoint.find(run_dir)[0] == newer
    real = checkpoint.restore

    def pruned_while_read(path, *args, **kwargs):
        if Path(path) == newer:  # the run prunes it under the reader
            shutil.rmtree(newer)
            raise FileNotFoundError(newer / "manifest.json")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "restore", pruned_while_read)
    result = checkpoint_eval.evaluate_checkpoint(run_dir, episodes=2)
    assert result["checkpoint"] == str(older) and result["pruned"] == [str(newer)]
    assert all(map(math.isfinite, result["return_mean"]))


def test_a_checkpoint_with_float32_observations_restores_into_one_byte_ones(run, tmp_path):
    """A checkpoint written before observations kept their dtype (MinAtar's float32 0/1
    grids) restores into a run that keeps them as bool: exactly, and refused when a value
    is not exact in bool."""
    saved = {"env": {"obs": jnp.asarray([[0.0, 1.0], [1.0, 0.0]])}, "x": jnp.arange(3.0)}
    path = checkpoint.save(tmp_path / "a", saved, env_steps=0, chunk=0, config=run["cfg"])
    template = {"env": {"obs": jnp.zeros((2, 2), bool)}, "x": jnp.zeros(3)}
    back, _ = checkpoint.restore(path, template)
    assert back["env"]["obs"].dtype == jnp.bool_
    assert np.array_equal(back["env"]["obs"], [[False, True], [True, False]])
    halves = {**saved, "env": {"obs": jnp.full((2, 2), 0.5)}}
    path = checkpoint.save(tmp_path / "b", halves, env_steps=0, chunk=0, config=run["cfg"])
    with pytest.raises(CheckpointError, match="not bool"):
        checkpoint.restore(path, template)
