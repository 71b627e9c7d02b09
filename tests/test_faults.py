"""Faults give one line and leave no damage; runs that cannot train are refused; the
lesser items of issue 15. Each case asserts the exit code, the one line (naming the flag
or the path) and what is on disk afterwards.

The commands run in-process through ``jaxspreeze.cli.main`` (no JAX start-up per case);
the signal cases run the real command in a subprocess. Resumes copy the shared tiny run
of test_resume_changes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_defaults import _tiny as tiny_defaults
from test_resume_changes import T1, T2, copy_run, snapshot, train_once

from jaxspreeze import cli
from jaxspreeze.run import starting
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan
from jaxspreeze.store import checkpoint, rundir

TINY_FLAGS = [
    "--num-envs", "2", "--grad-steps", "1", "--batch-size", "8", "--buffer-size", "64",
    "--learning-starts", "8", "--chunk-iterations", "4", "--eval-every", "0",
    "--eval-episodes", "2", "--sac.hidden", "8", "8", "--sinks", "jsonl",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained_run() -> Path:
    """The shared finished tiny run (checkpoints at 16 and 24 env steps)."""
    return train_once()


def one_error(capsys) -> str:
    """The one ``jaxspreeze: error:`` line on stderr (and no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.startswith("jaxspreeze: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def mount(tmp_path):
    """``mount(path, options)``: a small tmpfs at ``path`` (skips where that is not allowed)."""
    mounted: list[Path] = []

    def do(path: Path, options: str) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root and mount(8)")
        path.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if out.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        mounted.append(path)
        return path

    yield do
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# ------------------------------------------------------------------------------ bad paths
def bad_logdir(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """--logdir values that cannot hold a run: (value, words of the message)."""
    (tmp_path / "a-file").write_text("x")
    return {
        "proc": ("/proc/jaxspreeze-no-such-dir", "/proc/jaxspreeze-no-such-dir"),
        "under-a-file": (str(tmp_path / "a-file" / "runs"), "not a directory"),
    }


@pytest.mark.parametrize("case", ["proc", "under-a-file", "read-only"])
def test_an_unusable_logdir_is_one_line_naming_it(case, tmp_path, capsys, mount):
    """--logdir under /proc, under a file, or read-only: exit 2, one line naming --logdir
    and the path, nothing written."""
    if case == "read-only":
        logdir, words = str(mount(tmp_path / "ro", "ro,size=1m")), "read-only file system"
    else:
        logdir, words = bad_logdir(tmp_path)[case]
    code = cli.main(["train", *TINY_FLAGS, "--total-steps", "24", "--logdir", logdir])
    line = one_error(capsys)
    assert code == 2 and line.startswith("jaxspreeze: error: --logdir:") and words in line, line
    assert not (tmp_path / "a-file" / "runs").exists()


BAD_CONFIG = [
    ("a-directory", None, "is a directory"),
    ("broken.json", '{"total_steps": 12', "is not valid JSON"),
    ("list.json", "[1, 2]", "does not hold a table"),
    ("broken.toml", "total_steps = = 3", "is not valid TOML"),
]


@pytest.mark.parametrize(("name", "text", "words"), BAD_CONFIG)
def test_a_bad_config_file_is_one_line(name, text, words, tmp_path, capsys):
    """--config given a directory or a broken file: exit 2, one line naming the file."""
    path = tmp_path / name
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    code = cli.main(["train", "--config", str(path), "--logdir", str(tmp_path / "runs")])
    line = one_error(capsys)
    assert code == 2 and line.startswith("jaxspreeze: error: --config:"), line
    assert str(path) in line and words in line
    assert not (tmp_path / "runs").exists()


def test_a_wrong_type_in_a_config_file_is_one_line_and_no_warning(tmp_path):
    """A TOML value of the wrong type: its one line, with no third-party warning before it
    (a fresh interpreter: pytest would capture the warnings)."""
    path = tmp_path / "bad.toml"
    path.write_text('total_steps = "lots"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "jaxspreeze", "train", "--config", str(path)],
        env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "jaxspreeze: error: --total-steps: must be an integer, got 'lots'"
    ]


# ------------------------------------------------------------------------------ damaged checkpoints
def truncate_arrays(ckpt: Path) -> None:
    """Cut ``arrays.bin`` to 1000 bytes."""
    os.truncate(ckpt / "arrays.bin", 1000)


def break_manifest(ckpt: Path) -> None:
    """Write a manifest that is not JSON."""
    (ckpt / "manifest.json").write_text('{"format": 1, "env_steps": ')


def flip_actor_byte(ckpt: Path) -> None:
    """Flip one byte of the actor's first parameter leaf."""
    manifest = json.loads((ckpt / "manifest.json").read_text())
    entry = next(e for e in manifest["leaves"] if e["path"].startswith(".agent.actor.params"))
    with open(ckpt / "arrays.bin", "r+b") as f:
        f.seek(entry["offset"] + 3)
        byte = f.read(1)
        f.seek(entry["offset"] + 3)
        f.write(bytes([byte[0] ^ 0xFF]))


DAMAGE = {
    "truncated arrays.bin": (truncate_arrays, "truncated"),
    "malformed manifest": (break_manifest, "not valid JSON"),
    "flipped actor bytes": (flip_actor_byte, "does not match its checksum"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_eval_detects_damage_in_the_checkpoint_it_is_given(damage, trained_run, tmp_path, capsys):
    """`jaxspreeze eval RUN/checkpoints/N` of a damaged checkpoint: exit 2 naming its file;
    `jaxspreeze eval RUN` skips it (a warning naming it) for the newest intact one."""
    run_dir = copy_run(trained_run, tmp_path)
    newest = checkpoint.checkpoint_dir(run_dir) / f"{T1:012d}"
    breaker, words = DAMAGE[damage]
    breaker(newest)
    # --episodes 2: the run's eval_episodes, so the run's compiled evaluation serves
    assert cli.main(["eval", str(newest), "--episodes", "2"]) == 2
    line = one_error(capsys)
    assert str(newest) in line and words in line, line
    assert cli.main(["eval", str(run_dir), "--episodes", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["env_steps"] == 16
    assert f"skipped damaged checkpoint {newest}" in captured.err and words in captured.err


def test_resume_skips_a_damaged_newest_checkpoint(trained_run, tmp_path, capsys):
    """A truncated newest arrays.bin: the resume says so, sets it aside and continues from
    the newest intact checkpoint (exit 0)."""
    run_dir = copy_run(trained_run, tmp_path)
    newest = checkpoint.checkpoint_dir(run_dir) / f"{T1:012d}"
    truncate_arrays(newest)
    code = cli.main(["train", "--resume", str(run_dir), "--total-steps", str(T2)])
    out = capsys.readouterr().out
    assert code == 0
    assert f"checkpoint {newest} is damaged" in out and "truncated" in out
    assert "resumed from" in out and f"{16:012d} at 16 env steps" in out
    assert (newest.parent / f"damaged-{newest.name}").is_dir()
    names = [p.name for p in checkpoint.list_checkpoints(run_dir)]
    assert names[-1] == f"{T2:012d}" and f"{16:012d}" in names
    entry = json.loads((run_dir / "resumes.jsonl").read_text().splitlines()[-1])
    assert entry["damaged"][0][0] == str(newest)


def test_a_run_without_an_intact_checkpoint_is_not_touched(trained_run, tmp_path, capsys):
    """Every checkpoint damaged, or a broken config.json: exit 2, one line naming the file,
    the run directory bitwise unchanged (nothing is rewritten before a resume succeeds)."""
    run_dir = copy_run(trained_run, tmp_path)
    for ckpt in checkpoint.list_checkpoints(run_dir):
        flip_actor_byte(ckpt)
    before = snapshot(run_dir)
    assert cli.main(["train", "--resume", str(run_dir), "--total-steps", str(T2)]) == 2
    line = one_error(capsys)
    assert line.startswith("jaxspreeze: error: --resume:") and "no intact checkpoint" in line
    assert "does not match its checksum" in line
    assert snapshot(run_dir) == before

    other = copy_run(trained_run, tmp_path, "other")
    (other / "config.json").write_text("{")
    before = snapshot(other)
    assert cli.main(["train", "--resume", str(other), "--total-steps", str(T2)]) == 2
    line = one_error(capsys)
    assert line.startswith("jaxspreeze: error: --resume:") and "not valid JSON" in line
    assert str(other / "config.json") in line and snapshot(other) == before


# ------------------------------------------------------------------------------ disk full
def test_a_full_disk_is_one_line_and_leaves_no_partial_checkpoint(tmp_path, capsys, mount):
    """A 3 MB tmpfs and SAC's defaults at test_defaults' tiny budget (whose programs the
    compile cache holds), a checkpoint of about 4 MB: exit 1, one line naming the checkpoint
    and the fix; the partial checkpoint is removed (the space is free again), the lock too."""
    logdir = mount(tmp_path / "small", "size=3m")
    cfg = tiny_defaults("sac", "gymnax/Pendulum-v1", logdir)
    flags = ["--total-steps", str(cfg.total_steps), "--chunk-iterations", str(cfg.chunk_iterations)]
    code = cli.main(
        ["train", *flags, "--sinks", "jsonl", "--logdir", str(logdir), "--run-name", "full"]
    )
    line = one_error(capsys)
    run_dir = logdir / "full"
    assert code == 1, line
    assert str(checkpoint.checkpoint_dir(run_dir)) in line
    assert "no space left on the device; free space or choose another --logdir" in line
    assert not list(checkpoint.checkpoint_dir(run_dir).glob(".tmp-*"))
    assert shutil.disk_usage(logdir).free > 0.9 * 3 * 2**20
    assert not (run_dir / rundir.LOCK).exists() and (run_dir / rundir.NOT_STARTED).exists()


# ------------------------------------------------------------------------------ signals
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_compiling_exits_at_once_marking_the_run(sig, tmp_path):
    """SIGINT/SIGTERM during the first compile: the process ends by the signal with one
    line; the run directory is marked NOT_STARTED and a new run may take its name."""
    cmd = [sys.executable, "-m", "jaxspreeze", "train", *TINY_FLAGS, "--total-steps", "24"]
    cmd += ["--logdir", str(tmp_path), "--run-name", "r", "--compile-cache", "off"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        header = proc.stdout.readline()  # printed right before the compile starts
        assert header.startswith("jaxspreeze: sac"), header + proc.stderr.read()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"stopped by {sig.name}: the run had not started" in lines[0]
    assert "compiled in" not in out
    run = rundir.RunDir(tmp_path / "r")
    assert run.not_started and not checkpoint.list_checkpoints(run.path)
    assert not run.holds_run()
    rundir.check_new(run, overwrite=False)  # the same name may start again


# ------------------------------------------------------------------------------ budgets
NO_TRAINING = [
    (["--total-steps", "500"], "warm-up takes 1,000", "--learning-starts"),
    (["--num-envs", "4096", "--total-steps", "2000"], "warm-up takes 4,096", "--num-envs"),
    (["--num-envs", "100000000", "--buffer-size", "100000000"], "100,000,000", "--num-envs"),
    (
        ["--algo", "ppo", "--env", "gymnax/CartPole-v1", "--total-steps", "500"],
        "1,024",
        "--rollout",
    ),
]


@pytest.mark.parametrize(("args", "words", "fix"), NO_TRAINING)
def test_a_run_that_cannot_train_is_refused(args, words, fix, tmp_path, capsys):
    """No gradient step (or one iteration far past the budget): exit 2 naming
    --total-steps and the fields to change, before anything is allocated or written."""
    code = cli.main(["train", *args, "--logdir", str(tmp_path / "runs")])
    line = one_error(capsys)
    assert code == 2 and line.startswith("jaxspreeze: error: --total-steps:"), line
    assert words in line and fix in line
    assert not (tmp_path / "runs").exists()


def test_a_buffer_far_larger_than_the_run_is_a_warning():
    """More than 1 GiB of replay buffer that the run never fills: one warning line."""
    cfg = resolve(RunConfig(total_steps=10_000, buffer_size=100_000_000))
    (line,) = starting.budget_warnings(plan(cfg, on_devices=False))
    assert "buffer_size 100,000,000" in line and "never filled" in line
    assert starting.budget_warnings(plan(resolve(RunConfig()), on_devices=False)) == []


# ------------------------------------------------------------------------------ lesser items
def test_unused_algorithm_fields_are_range_checked(tmp_path, capsys):
    """--td3.gamma 1.5 with SAC: exit 2 naming --td3.gamma."""
    code = cli.main(["train", "--td3.gamma", "1.5", "--logdir", str(tmp_path / "runs")])
    line = one_error(capsys)
    assert code == 2 and line.startswith("jaxspreeze: error: --td3.gamma:")


def test_profile_given_a_directory(tmp_path, capsys):
    """--profile DIR: DIR/autotune.json is used when there is one; else one line saying what
    to give."""
    code = cli.main(["train", "--profile", str(tmp_path), "--logdir", str(tmp_path / "runs")])
    line = one_error(capsys)
    assert code == 2 and line.startswith("jaxspreeze: error: --profile:")
    assert "is a directory without an autotune.json" in line and "DIR/autotune.json" in line


def test_eval_accepts_a_checkpoint_directory(trained_run, capsys):
    """`jaxspreeze eval RUN/checkpoints/000000000016` evaluates that checkpoint."""
    ckpt = checkpoint.checkpoint_dir(trained_run) / f"{16:012d}"
    assert cli.main(["eval", str(ckpt), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["checkpoint"] == str(ckpt) and result["env_steps"] == 16


def test_render_names_a_truncated_policy_file(trained_run, tmp_path, capsys):
    """A truncated policy.msgpack: exit 2, one line naming it."""
    run_dir = copy_run(trained_run, tmp_path)
    policy = run_dir / "policy.msgpack"
    policy.write_bytes(policy.read_bytes()[:50])
    assert cli.main(["render", str(run_dir)]) == 2
    line = one_error(capsys)
    assert str(policy) in line and "is damaged" in line
    assert not (run_dir / "render.gif").exists()


@pytest.mark.parametrize(
    "text",
    ["not json at all\n\x00\x01\n", '{"a": 1}\n[1, 2]\n', ""],
    ids=["garbage", "no-records", "empty"],
)
def test_plot_of_garbage_metrics_says_so(text, tmp_path, capsys):
    """metrics.jsonl without records: exit 2 naming it, no PNG drawn."""
    (tmp_path / "metrics.jsonl").write_text(text)
    assert cli.main(["plot", str(tmp_path)]) == 2
    line = one_error(capsys)
    assert str(tmp_path / "metrics.jsonl") in line
    assert "no metrics records" in line or "no records yet" in line
    assert not list(tmp_path.glob("*.png"))


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(
    tmp_path, capsys, monkeypatch
):
    """Anything else: exit 1 with one line pointing to --debug; --debug re-raises."""
    import jaxspreeze.cli.train as train_cli

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(train_cli, "train", boom)
    flags = ["train", *TINY_FLAGS, "--total-steps", "24", "--logdir", str(tmp_path)]
    assert cli.main(flags) == 1
    line = one_error(capsys)
    assert "unexpected RuntimeError: boom" in line and "--debug" in line
    with pytest.raises(RuntimeError, match="boom"):
        cli.main([*flags, "--debug"])
