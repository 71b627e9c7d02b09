"""Console output a person can trust: one compile figure and one wall figure (those of
summary.json), every evaluation's line in step order with the progress lines (a skipped
one saying why), third-party warnings that repeat shown once, lines written whole."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import jax.numpy as jnp
import pytest

from jaxspreeze.agent import evaluate as evaluate_lib
from jaxspreeze.agent.evaluate import EvalResult, Evaluator
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core import clock, terminal
from jaxspreeze.run import threads, trainer
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.sinks.console import ConsoleSink
from jaxspreeze.sinks.metrics import MetricsThread, Note

COMPILE_FIGURE = re.compile(r"compil\w*\D*\d+(\.\d+)?s")  # a line giving a compile time
WALL_FIGURE = re.compile(r"\bwall \d+(\.\d+)?s")


def chunk(steps: int) -> dict:
    return {"kind": "chunk", "env_steps": steps, "env_steps_per_s": 1000.0}


def evaluation(steps: int, ret: float, final: bool = False) -> dict:
    return {"kind": "eval", "env_steps": steps, "eval_return": ret, "final": final}


def lines_of(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


# ------------------------------------------------------------------- the console sink
def test_lines_after_a_queued_evaluation_wait_for_its_line():
    out = io.StringIO()
    sink = ConsoleSink(400, live=False, file=out)
    sink.write(chunk(100))
    sink.note(Note("queued", 100))
    sink.write(chunk(200))  # held: the evaluation at 100 has no line yet
    sink.note(Note("skipped", 200, "busy"))  # (never queued here: its place is its arrival)
    sink.note(Note("queued", 300))
    sink.write(chunk(300))
    assert len(lines_of(out)) == 1
    sink.write(evaluation(100, 7.0))  # 100's line, then what it held up to 300's evaluation
    got = lines_of(out)
    assert [s.split()[0:3] for s in got] == [
        ["100/400", "steps", "25%"],
        ["eval", "@", "100"],
        ["200/400", "steps", "50%"],
        ["eval", "@", "200"],
    ]
    assert got[0].endswith("eval n/a")
    assert got[2].endswith("eval 7.0")  # the progress line shows the eval printed above it
    assert got[3] == "  eval @       200 steps: skipped (busy)"
    sink.write(evaluation(300, 9.0))
    sink.note(Note("queued", 400))
    sink.close()  # 400 never came: said so
    got = lines_of(out)[4:]
    assert got[0].startswith("  eval @       300 steps: return 9.0")
    assert got[1].startswith("        300/400") and got[1].endswith("eval 9.0")
    assert got[2] == "  eval @       400 steps: no result (the run ended first)"
    assert len(got) == 3


def test_a_sink_fed_without_notes_prints_in_arrival_order():
    out = io.StringIO()
    sink = ConsoleSink(200, live=False, file=out)
    for record in (chunk(100), evaluation(100, 1.0), chunk(200), evaluation(200, 2.0, True)):
        sink.write(record)
    sink.close()
    got = lines_of(out)
    assert len(got) == 4 and "final eval @" in got[3] and got[2].endswith("eval 1.0")


def test_notes_reach_only_the_sinks_that_take_them_in_their_place():
    out, seen = io.StringIO(), []

    class Files:  # a sink without `note`: records only
        name = "files"

        def write(self, record):
            seen.append(record["env_steps"])

        def close(self):
            pass

    m = MetricsThread([ConsoleSink(300, live=False, file=out), Files()])
    m.submit(chunk(100))
    m.submit(Note("queued", 100))
    m.submit(chunk(200))
    m.submit(lambda: evaluation(100, 3.0))
    assert m.close() == {"console": 0, "files": 0}
    assert seen == [100, 200, 100]
    assert [s.split()[0] for s in lines_of(out)] == ["100/300", "eval", "200/300"]


# -------------------------------------------------------------------- the evaluator
def test_a_skipped_evaluation_is_noted_with_the_evaluation_it_waited_behind():
    started, gate, notes = threading.Event(), threading.Event(), []

    def evaluate(actor, env_steps):
        started.set()
        assert gate.wait(60)
        return EvalResult(actor["v"], jnp.zeros(()), jnp.ones(()))

    ev = Evaluator(evaluate, on_note=notes.append, skip=True)
    ev.submit({"v": jnp.float32(0)}, env_steps=100)
    assert started.wait(60)  # the thread holds the evaluation at 100
    ev.submit({"v": jnp.float32(1)}, env_steps=200)
    ev.submit({"v": jnp.float32(2)}, env_steps=300)  # two wait (WAITING)
    last = ev.submit({"v": jnp.float32(3)}, env_steps=400)  # replaces 200, the oldest
    gate.set()
    last.result(60)
    ev.close()
    assert [(n.kind, n.env_steps) for n in notes] == [
        ("queued", 100),
        ("queued", 200),
        ("queued", 300),
        ("skipped", 200),
        ("queued", 400),
    ]
    assert notes[3].why == (
        "the evaluator was still busy with 100 steps when 400 came; only the newest 2 "
        "snapshots wait"
    )
    assert ev.skipped == 1 and ev.done == 3


def test_an_evaluator_that_keeps_up_with_the_chunks_skips_none():
    """The trainer's pattern: it queues snapshot c + 1 before chunk c has finished (it
    waits for chunk c once chunk c + 1 is dispatched) and c + 2 as soon as chunk c is done,
    while the evaluation of c is still running. An evaluator as fast as the chunks
    evaluates every snapshot (with one waiting place, c + 2 replaced c + 1: every other
    evaluation of a run was skipped)."""
    chunk_done = [threading.Event() for _ in range(6)]  # chunk c's parameters exist
    submitted = [threading.Event() for _ in range(6)]
    taken = [threading.Event() for _ in range(6)]
    notes = []

    def evaluate(actor, env_steps):
        c = int(actor["c"])
        taken[c].set()
        assert chunk_done[c].wait(60)  # the copy waits for its chunk
        assert submitted[min(c + 2, 5)].wait(60)  # still running when c + 2 comes
        return EvalResult(jnp.float32(c), jnp.zeros(()), jnp.ones(()))

    ev = Evaluator(evaluate, on_note=notes.append)
    futures = []
    for c in range(6):  # chunk c is dispatched and its snapshot queued; chunk c - 1 ends
        if c >= 2:  # the evaluator was free for c - 2 (c - 3's evaluation ended first)
            assert taken[c - 2].wait(60)
        futures.append(ev.submit({"c": jnp.int32(c)}, env_steps=100 * c))
        submitted[c].set()
        if c >= 1:
            chunk_done[c - 1].set()
    chunk_done[5].set()
    ev.close()
    assert ev.skipped == 0 and ev.done == 6, notes
    assert [f.result(1)[1].return_mean for f in futures] == list(range(6))
    assert [n.kind for n in notes] == ["queued"] * 6


def test_a_failed_evaluation_is_noted():
    notes = []

    def evaluate(actor, env_steps):
        raise RuntimeError("nan policy")

    ev = Evaluator(evaluate, on_note=notes.append, report=lambda message: None)
    future = ev.submit({"v": jnp.float32(0)}, env_steps=100)
    assert isinstance(future.exception(60), RuntimeError)
    ev.close()
    assert [(n.kind, n.env_steps, n.why) for n in notes] == [
        ("queued", 100, ""),
        ("failed", 100, "RuntimeError: nan policy"),
    ]


# ------------------------------------------------------------------------ a real run
def tiny(tmp, **changes) -> RunConfig:
    base = RunConfig(
        total_steps=600,
        num_envs=4,
        grad_steps=2,
        batch_size=32,
        buffer_size=2_000,
        learning_starts=200,
        chunk_iterations=20,  # 80 env steps per chunk: 5 chunks
        eval_episodes=2,
        eval_every=80,  # a snapshot at every chunk boundary
        logdir=str(tmp),
        run_name="console",
        sinks=("console",),
        sac=SACConfig(hidden=(32, 32)),
        num_seeds=2,  # test_host's tiny run: the compile cache serves these programs
    )
    return base.replace(**changes)


class Gate:
    """A sink that releases the held evaluator once the last chunk's record arrives."""

    name = "gate"

    def __init__(self, last_chunk: int, gate: threading.Event):
        self.last_chunk, self.gate = last_chunk, gate

    def write(self, record):
        if record["kind"] == "chunk" and record["chunk"] == self.last_chunk:
            self.gate.set()

    def close(self):
        pass


@pytest.fixture(scope="module")
def held_run(tmp_path_factory):
    """5 chunks while the first evaluation is held until the last chunk's record: the
    snapshots in between are skipped. The command "started" 5 s before train()."""
    gate = threading.Event()
    real = threads.make_seed_evaluate

    def held_eval_fn(act, env, keys):
        fn = real(act, env, keys)
        first = []

        def evaluate(actor, env_steps):
            if not first:
                first.append(gate.wait(300))
            return fn(actor, env_steps)

        return evaluate

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(threads, "make_seed_evaluate", held_eval_fn)
        mp.setattr(evaluate_lib, "spare_cpu", lambda: True)  # skips, on any CPUs
        mp.setattr(sys, "stdout", out)  # the console sink and the run's lines
        mp.setattr(clock, "_command", time.time() - 5.0)
        result = trainer.train(tiny(tmp_path_factory.mktemp("runs")), sinks=[Gate(4, gate)])
    assert gate.is_set()
    return result.summary, out.getvalue().splitlines()


def test_one_compile_line_and_one_wall_line_with_the_summary_figures(held_run):
    summary, lines = held_run
    # (the start's progress lines, indented under it, say each program as it is ready:
    # the run's compile figure is the one at the end)
    compile_lines = [s for s in lines if COMPILE_FIGURE.search(s) and not s.startswith("    ")]
    wall_lines = [s for s in lines if WALL_FIGURE.search(s)]
    assert len(compile_lines) == 1 and len(wall_lines) == 1, lines
    assert f"compiling {summary['compile_all_s']:.1f}s in all" in compile_lines[0]
    assert wall_lines[0] == lines[-1] and lines[-1].startswith("final eval return:")
    assert lines[-1].endswith(f"wall {summary['command_wall_s']:.1f}s")
    # the wall counts from the command's start (marked 5 s before train() was called)
    assert summary["wall_counted_from"] == "command"
    assert summary["command_wall_s"] >= summary["wall_s"] + 5.0
    assert summary["compile_all_s"] > 0 and summary["compile_s"] > 0  # the keys stay
    assert clock.take_command_start() is None  # the run took the mark


def test_every_evaluation_has_its_line_in_step_order(held_run):
    summary, lines = held_run
    steps = [int(re.search(r"([\d,]+)(/| steps)", s).group(1).replace(",", "")) for s in lines
             if re.match(r"\s+([\d,]+/|(final )?eval @)", s)]  # fmt: skip
    assert steps == sorted(steps), lines
    evals = [s for s in lines if re.match(r"\s+(final )?eval @", s)]
    skipped = [s for s in evals if ": skipped (" in s]
    assert len(skipped) == summary["evaluations_skipped"] >= 1  # 360 replaced by 520
    # every snapshot (280, 360, 440, 520) has exactly one line, then the final one at 600
    # (which snapshots wait and which are replaced depends on when the evaluator thread
    # takes the first one: the skipped lines name it and the snapshot that replaced them)
    assert [int(re.search(r"@\s+([\d,]+) steps", s).group(1)) for s in evals] == [
        280,
        360,
        440,
        520,
        600,
    ]
    for line in skipped:  # replaced while the evaluator was busy with an earlier one, or
        # while it waited between two evaluations; by a later snapshot either way
        at = int(re.search(r"@\s+(\d+) steps: skipped \(", line).group(1))
        busy = re.search(r"still busy with (\d+) steps when (\d+) came", line)
        between = re.search(r"the snapshot at (\d+) steps replaced it while it waited", line)
        assert busy or between, line
        if busy:
            assert int(busy.group(1)) < at < int(busy.group(2)), line
        else:
            assert at < int(between.group(1)), line
    assert evals[-1].startswith("  final eval @       600 steps: return")
    chunks = [s for s in lines if re.match(r"\s+[\d,]+/600 steps", s)]
    assert len(chunks) == 5


@pytest.mark.slow  # a whole run (the default run stays under 10 minutes)
def test_train_from_python_counts_the_wall_from_its_call(tmp_path, capsys):
    summary = trainer.train(tiny(tmp_path, eval_every=0, total_steps=280)).summary
    assert summary["wall_counted_from"] == "train()"
    assert summary["command_wall_s"] == pytest.approx(summary["wall_s"], abs=0.5)
    lines = capsys.readouterr().out.splitlines()
    assert sum(bool(WALL_FIGURE.search(s)) for s in lines) == 1
    assert "first chunk dispatched" in lines[-3] and "after train() was called" in lines[-3]


def test_the_clock_is_taken_once():
    clock.mark_command()  # the process's start: before this module was imported
    assert clock.take_command_start() <= clock._IMPORTED
    assert clock.take_command_start() is None


def test_only_the_command_itself_marks_the_clock(run_main):
    run_main("train", "--no-such-flag")  # in-process: a call from Python, not the command
    assert clock.take_command_start() is None


# --------------------------------------------------------------- third-party warnings
SETTOTALMASS = """
import warnings
from jaxspreeze import terminal
print(terminal.quiet_third_party("gymnasium/HalfCheetah-v5"), flush=True)
import mujoco
xml = '<mujoco><compiler settotalmass="14"/><worldbody><body><freejoint/>' \\
      '<geom size="0.1"/></body></worldbody></mujoco>'
for _ in range(3):
    mujoco.MjModel.from_xml_string(xml)
warnings.warn("Brax System, piplines and environments are not actively being maintained.")
warnings.warn("a warning that matters")
print(terminal.repeats(), flush=True)
"""


def run_python(code: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    import os

    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS",)}
    environ.pop("JAXSPREEZE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**environ, "JAX_PLATFORMS": "cpu", **env},
    )


def test_a_repeated_mujoco_warning_is_printed_once_and_brax_notice_hidden(tmp_path):
    pytest.importorskip("mujoco")
    proc = run_python(SETTOTALMASS, tmp_path)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert err.count("settotalmass") == 1, err
    assert "MuJoCo warning (each shown once; --debug shows all): compiler attribute" in err
    assert "not actively being maintained" not in err
    assert "a warning that matters" in err  # other warnings are untouched
    first, counts = proc.stdout.splitlines()
    assert first == "True" and ": 3}" in counts
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_debug_shows_every_warning(tmp_path):
    pytest.importorskip("mujoco")
    proc = run_python(SETTOTALMASS, tmp_path, JAXSPREEZE_DEBUG="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "False"
    assert proc.stderr.count("settotalmass") == 3  # MuJoCo's own handler, every time
    assert "not actively being maintained" in proc.stderr


def test_lines_are_written_whole_under_one_lock():
    writes = []

    class Stream:  # records each write; a line split in two writes would show
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    stream = Stream()
    workers = [
        threading.Thread(target=lambda i=i: [terminal.line(f"line {i}", file=stream) for _ in range(200)])
        for i in range(4)
    ]  # fmt: skip
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(writes) == 800 and all(re.fullmatch(r"line \d\n", w) for w in writes)


def test_the_mujoco_handler_keeps_someone_elses(monkeypatch):
    mujoco = pytest.importorskip("mujoco")
    mine = SimpleNamespace(calls=[])
    previous = mujoco.get_mju_user_warning()
    monkeypatch.delenv("JAXSPREEZE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "warnoptions", [])
    try:
        mujoco.set_mju_user_warning(mine.calls.append)
        terminal.quiet_third_party("brax/ant")
        assert mujoco.get_mju_user_warning() == mine.calls.append
    finally:
        mujoco.set_mju_user_warning(previous)


def test_an_evaluation_pending_too_long_lets_the_lines_after_it_go():
    """A log does not fall silent behind a long evaluation: past ``hold_s`` the held lines
    print with one saying it still runs; its own line comes when it is done, and the lines
    after a later queued evaluation are held again."""
    out = io.StringIO()
    sink = ConsoleSink(400, live=False, file=out, hold_s=0.0)
    sink.write(chunk(100))
    sink.note(Note("queued", 100))
    time.sleep(0.01)
    sink.write(chunk(200))  # 100's evaluation pending past hold_s: let go
    got = lines_of(out)
    assert [s.split()[0] for s in got] == ["100/400", "eval", "200/400"]
    assert got[1] == "  eval @       100 steps: still running (its line follows when done)"
    sink.write(chunk(300))  # nothing held any more: printed at once
    assert lines_of(out)[-1].split()[0] == "300/400"
    sink.write(evaluation(100, 7.0))  # its line on arrival
    assert lines_of(out)[-1].startswith("  eval @       100 steps: return 7.0")
    held = ConsoleSink(400, live=False, file=io.StringIO())  # the default holds
    held.write(chunk(100))
    held.note(Note("queued", 100))
    held.write(chunk(200))
    assert len(lines_of(held._file)) == 1
