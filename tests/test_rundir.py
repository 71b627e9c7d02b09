"""Run directories: history is kept across a resume, and one run owns a directory.

History: a resume drops the records past its checkpoint, then appends (no duplicates, no
loss). Ownership: a lock refuses a second concurrent run naming the holder (stale locks
of dead processes are taken over); a directory that holds a run is refused unless
resumed or overwritten; a run that never started is replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_resume_changes import T1, T2, copy_run, snapshot, tiny_cfg, train_once
from test_sinks import read_csv

from jaxspreeze import cli
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.run.trainer import train
from jaxspreeze.store import checkpoint, rundir


@pytest.fixture(scope="module")
def trained_run() -> Path:
    """The shared finished tiny run (trained once per process)."""
    return train_once()


def jsonl(run_dir: Path) -> list[dict]:
    """The records of a run's metrics.jsonl."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def steps_of(records, kind="chunk") -> list[int]:
    """The env steps of the records of ``kind``, in file order."""
    return [int(r["env_steps"]) for r in records if r.get("kind", "chunk") == kind]


# ------------------------------------------------------------------------------ history
def test_resume_after_a_kill_past_the_checkpoint_keeps_each_record_once(trained_run, tmp_path):
    """As after a kill -9 past the checkpoint at 16 (the one at 24 never written, a line
    cut short): the resume drops what came after 16, keeps what came before bitwise, and
    appends its own chunks: each step once in metrics.jsonl and metrics.csv."""
    run_dir = copy_run(trained_run, tmp_path)
    shutil.rmtree(checkpoint.checkpoint_dir(run_dir) / f"{T1:012d}")
    before = jsonl(run_dir)
    assert steps_of(before) == [16, 24] and steps_of(before, "eval") == [24]
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"kind": "chunk", "env_steps": 3')  # a write cut short by the kill
    first_line = (run_dir / "metrics.jsonl").read_text().splitlines()[0]
    first_row = read_csv(run_dir / "metrics.csv")[0]

    result = train(tiny_cfg(tmp_path, "x", total_steps=T2), quiet=True, resume=run_dir)
    assert result.summary["resumed_from"].endswith(f"{16:012d}")
    after = jsonl(run_dir)
    assert steps_of(after) == [16, 24, 32, 40]
    assert steps_of(after, "eval") == [T2]  # the old final eval at 24 came after 16: gone
    assert (run_dir / "metrics.jsonl").read_text().splitlines()[0] == first_line
    rows = read_csv(run_dir / "metrics.csv")
    assert [int(r["env_steps"]) for r in rows if r["kind"] == "chunk"] == [16, 24, 32, 40]
    assert rows[0] == first_row
    walls = [r["wall_s"] for r in after if r["kind"] == "chunk"]
    assert walls == sorted(walls), "a resumed run's wall time goes on from its history"


def test_keep_until_drops_later_and_broken_records(tmp_path):
    """keep_until rewrites only what must go; it returns the records kept."""
    from jaxspreeze.sinks import CsvSink, JsonlSink, keep_until

    jl, cs = JsonlSink(tmp_path), CsvSink(tmp_path)
    for steps in (10, 20, 30):
        for sink in (jl, cs):
            sink.write({"kind": "chunk", "env_steps": steps, "x": steps / 10})
    jl.close()
    cs.close()
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("chunk,40")  # a row cut short
    kept = keep_until(tmp_path, 20)
    assert [r["env_steps"] for r in kept] == [10, 20]
    assert steps_of(jsonl(tmp_path)) == [10, 20]
    assert [r["env_steps"] for r in read_csv(tmp_path / "metrics.csv")] == ["10", "20"]
    # a resumed CsvSink appends under the existing header, a new column widens it once
    cs = CsvSink(tmp_path)
    cs.write({"kind": "chunk", "env_steps": 30, "x": 3.0, "y": 1})
    cs.close()
    rows = read_csv(tmp_path / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["10", "20", "30"] and rows[2]["y"] == "1"


# ------------------------------------------------------------------------------ ownership
def test_a_directory_with_a_run_is_refused_unless_resumed_or_overwritten(
    trained_run, tmp_path, capsys
):
    """A new run in a finished run's directory: exit 2 naming --resume and --overwrite,
    nothing changed; --overwrite replaces the old run's files (its checkpoints go)."""
    run_dir = copy_run(trained_run, tmp_path)
    (run_dir / "notes.txt").write_text("mine")
    before = snapshot(run_dir)
    flags = ["--config", str(run_dir / "config.json"), "--logdir", str(tmp_path)]
    flags += ["--run-name", "run", "--total-steps", "16"]
    assert cli.main(["train", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxspreeze: error: --run-name:"), err
    assert "--resume" in err[0] and "--overwrite" in err[0] and "24 env steps" in err[0]
    assert snapshot(run_dir) == before

    assert cli.main(["train", *flags, "--overwrite"]) == 0
    assert [p.name for p in checkpoint.list_checkpoints(run_dir)] == [f"{16:012d}"]
    assert steps_of(jsonl(run_dir)) == [16] and (run_dir / "notes.txt").read_text() == "mine"
    assert not (run_dir / rundir.NOT_STARTED).exists() and not (run_dir / rundir.LOCK).exists()


def test_overwrite_removes_every_policy_file_a_previous_run_wrote(tmp_path):
    """A previous run's best policy, its best/ snapshots and its members' policy files go
    with --overwrite (a run with fewer members must not leave another run's behind); a
    user's own files stay."""
    from jaxspreeze.agent import policy
    from jaxspreeze.run import evalwatch

    cfg = tiny_cfg(tmp_path, "r")
    run = rundir.claim(cfg)
    old = [
        policy.POLICY_FILE,
        policy.member_file(3),
        evalwatch.best_file(None),
        evalwatch.best_file(3),
    ]
    for name in old:
        (run.path / name).write_bytes(b"old")
    (run.path / evalwatch.BEST_DIR).mkdir()
    (run.path / evalwatch.BEST_DIR / evalwatch.JOURNAL).write_text("{}\n")
    (run.path / "mine.msgpack").write_bytes(b"mine")
    run.clear()
    assert sorted(p.name for p in run.path.iterdir()) == sorted(["mine.msgpack", rundir.LOCK])
    run.release()


def test_a_run_that_never_started_is_replaced(tmp_path):
    """NOT_STARTED and no checkpoint: a new run may take the directory; it is cleared."""
    cfg = tiny_cfg(tmp_path, "r")
    run = rundir.claim(cfg)
    run.start_new(cfg)
    (run.path / "metrics.jsonl").write_text('{"kind": "chunk", "env_steps": 8}\n')
    run.release()
    assert run.not_started and not run.holds_run()
    again = rundir.claim(cfg)
    rundir.check_new(again, overwrite=False)
    again.start_new(cfg)
    assert not (run.path / "metrics.jsonl").exists() and again.not_started
    again.release()
    # a default name (run_name "") never collides, even within the same second
    unnamed = tiny_cfg(tmp_path, "")
    a, b = rundir.claim(unnamed), rundir.claim(unnamed)
    assert a.path != b.path and a.path.parent == b.path.parent == tmp_path
    a.release()
    b.release()


def test_the_lock_names_its_holder_and_a_dead_holder_is_taken_over(tmp_path):
    """A second lock is refused naming pid and host; a lock file left by a dead process
    (no flock held) is taken over; release removes the file."""
    cfg = tiny_cfg(tmp_path, "r")
    first = rundir.claim(cfg)
    with pytest.raises(ConfigError) as e:
        rundir.claim(cfg)
    assert e.value.field == "run_name"
    assert f"pid {os.getpid()} on {socket.gethostname()}" in str(e.value)
    first.release()
    assert not (first.path / rundir.LOCK).exists()
    stale = {"pid": 2**22 + 7, "host": socket.gethostname(), "since": 0}
    (first.path / rundir.LOCK).write_text(json.dumps(stale))
    taken = rundir.claim(cfg)
    assert json.loads((first.path / rundir.LOCK).read_text())["pid"] == os.getpid()
    taken.release()


LONG = [
    "--total-steps", "10000000", "--num-envs", "2", "--grad-steps", "1", "--batch-size", "8",
    "--buffer-size", "64", "--learning-starts", "8", "--chunk-iterations", "50",
    "--sac.hidden", "8", "8", "--sinks", "jsonl", "--eval-every", "0", "--eval-episodes", "2",
]  # fmt: skip


def test_two_processes_with_the_same_run_name(tmp_path, run_main):
    """While one training runs, a second with the same --run-name (this process, through
    cli.main) exits 2 naming the first's pid and writes nothing; the first goes on and
    stops cleanly (SIGINT). The first is paused (SIGSTOP, its lock held) while the second
    tries, so that the two do not share the cores."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    args = ["train", *LONG, "--logdir", str(tmp_path), "--run-name", "same"]
    run_dir = tmp_path / "same"
    first = subprocess.Popen(
        [sys.executable, "-m", "jaxspreeze", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "no chunk record within 600 s"
            time.sleep(0.2)
        first.send_signal(signal.SIGSTOP)
        config_before = (run_dir / "config.json").read_bytes()
        second = run_main(*args)
        first.send_signal(signal.SIGCONT)
        assert first.poll() is None, "the first run must still be training"
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "--run-name:" in lines[0] and "Traceback" not in second.stderr
    assert f"in use by another run (pid {first.pid} on" in lines[0]
    assert (run_dir / "config.json").read_bytes() == config_before
    assert first.returncode == 0, err[-2000:]
    chunks = [r["chunk"] for r in jsonl(run_dir) if r["kind"] == "chunk"]
    assert chunks == list(range(len(chunks))), "one writer: every chunk once, in order"
    assert not (run_dir / rundir.LOCK).exists()


def test_a_run_name_too_long_is_named_before_anything_is_made(tmp_path):
    from jaxspreeze.setup.config import RunConfig

    cfg = RunConfig(logdir=str(tmp_path / "runs"), run_name="r" * 300)
    with pytest.raises(ConfigError) as e:
        rundir.claim(cfg)
    assert e.value.field == "run_name" and "choose a shorter --run-name" in str(e.value)
    assert not (tmp_path / "runs").exists()
