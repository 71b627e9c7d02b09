"""Output a person can follow: a live line in a terminal (a pseudo-terminal here), plain
lines in a pipe, both with the steps, the time elapsed and the ETA; a line while the
start compiles; warnings for a budget far below the recipe's and a PBT interval the run
never reaches; a sweep's members named in its plot; the result's final return."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import sys
import termios
import threading

import pytest

from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core import terminal
from jaxspreeze.run import lines, summary, sweeping, trainer
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan
from jaxspreeze.sinks.console import ConsoleSink

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # any control character but \t and \n


def chunk(steps: int, wall: float, ret: float = -100.0) -> dict:
    return {"kind": "chunk", "env_steps": steps, "wall_s": wall, "env_steps_per_s": 50.0,
            "episode_return": ret}  # fmt: skip


def evaluation(steps: int, ret: float, se: float) -> dict:
    return {"kind": "eval", "env_steps": steps, "eval_return": ret, "eval_return_se": se}


class Pty:
    """A pseudo-terminal: ``file`` is its terminal side (``isatty()``), :meth:`read` what
    was drawn on it."""

    def __init__(self, columns: int = 160):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.file = os.fdopen(slave, "w", encoding="utf-8")
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self):
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # the terminal side closed
                return
            if not data:
                return
            self._chunks.append(data)

    def read(self) -> str:
        self.file.close()
        self._reader.join(30)
        os.close(self.master)
        return b"".join(self._chunks).decode("utf-8", "replace")


@pytest.fixture
def term(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    terminal.status(None)  # no live line left from another test
    yield Pty()
    terminal.status(None)


def feed(sink: ConsoleSink) -> None:
    """Two chunks (100 env steps in 2 s between them: 50/s, 700 left: ETA 0:14), then an
    evaluation, then the last chunk."""
    sink.write(chunk(100, 10.0))
    sink.write(chunk(300, 14.0))
    sink.write(evaluation(300, -150.0, 4.0))
    sink.write(chunk(1000, 28.0, -120.0))
    sink.close()


def test_a_terminal_gets_one_live_line_with_steps_elapsed_and_eta(term):
    sink = ConsoleSink(1000, file=term.file)  # live: the terminal says it is one
    feed(sink)
    out = term.read()
    assert "\r\x1b[K" in out  # redrawn in place
    frames = [f for f in re.split(r"\r\x1b\[K", out) if "elapsed" in f]
    second = next(f for f in frames if "300/1k steps" in f)
    assert "0:14 elapsed, ETA 0:14" in second  # 700 steps left at (300-100)/(14-10) = 50/s
    assert "30%" in second and "train return -100.0" in second and "eval n/a" in second
    assert "0:28 elapsed, ETA 0:00" in frames[-1] and "eval -150.0 ± 4.0" in frames[-1]
    # the evaluation is a line of its own above the live line, which stays on screen
    assert "eval @       300 steps: return -150.0 ± 4.0 s.e." in out
    assert out.rstrip("\r\n").endswith("eval -150.0 ± 4.0")


def test_a_narrow_terminal_keeps_the_steps_the_time_and_the_returns(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    narrow = Pty(columns=80)
    feed(ConsoleSink(1000, file=narrow.file))
    out = narrow.read()
    last = out.split("\r\x1b[K")[-1].rstrip("\r\n")  # the live line, left on screen
    assert len(last) <= 79 and "█" not in last, last
    assert last == "  100% 1k/1k steps | 0:28, ETA 0:00 | train -120.0 | eval -150.0 ± 4.0"


def test_a_pipe_gets_plain_lines_with_steps_elapsed_and_eta():
    read, write = os.pipe()
    with os.fdopen(write, "w") as stream:
        assert not terminal.is_terminal(stream)
        feed(ConsoleSink(1000, file=stream))
    with os.fdopen(read) as got:
        out = got.read()
    assert not CONTROL.search(out), repr(out)
    rows = out.splitlines()
    assert rows[0].split("|")[0].strip() == "100/1,000 steps  10%"
    assert "0:10 elapsed, ETA 0:18" in rows[0]  # the first chunk: its own rate, 50/s
    assert "0:14 elapsed, ETA 0:14" in rows[1] and "train return  -100.0" in rows[1]
    assert rows[2].startswith("  eval @       300 steps: return -150.0 ± 4.0 s.e.")
    assert rows[3].split("|")[0].strip() == "1,000/1,000 steps 100%"
    assert "ETA 0:00" in rows[3] and rows[3].endswith("eval -150.0 ± 4.0")
    assert len(rows) == 4


def test_a_line_written_under_the_live_line_keeps_it_at_the_bottom(term):
    terminal.status("  live 1", file=term.file)
    terminal.line("a warning", file=term.file)
    terminal.status(None)
    out = term.read()
    assert out == "\r\x1b[K  live 1\r\x1b[Ka warning\r\n  live 1\r\x1b[K"


def test_the_start_says_it_is_working_in_a_terminal_and_in_a_pipe(term):
    with terminal.Working("compiling", file=term.file) as working:
        working.set("warming up")
    out = term.read()
    assert "\r\x1b[K  compiling 0:00" in out and "\r\x1b[K  warming up 0:0" in out
    assert out.endswith("\r\x1b[K")  # erased: the next line starts clean
    stream = io.StringIO()  # not a terminal: a plain line every every_s, until told not to
    done = threading.Event()
    with terminal.Working("compiling", file=stream, every_s=0.05) as working:
        while "still working" not in stream.getvalue():
            done.wait(0.02)
        working.set("warming up", lines=False)
        said = stream.getvalue()
        done.wait(0.2)
    assert said.startswith("  compiling: still working (0:00 so far)\n")
    assert stream.getvalue() == said and not CONTROL.search(said)
    quiet = io.StringIO()
    with terminal.Working("compiling", file=quiet, every_s=0.01, enabled=False):
        done.wait(0.1)
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------- warnings
def test_a_budget_far_below_the_recipe_is_named_and_a_default_run_is_not():
    short = plan(RunConfig(algo="fasttd3", total_steps=6000), on_devices=False)
    (line,) = lines.start_warnings(short, 100)
    assert line.startswith("--total-steps 6,000 is under a third of fasttd3's default budget")
    assert "20,000" in line and "raise --total-steps" in line
    assert lines.start_warnings(plan(RunConfig(), on_devices=False), 100) == []
    own = RunConfig(algo="fasttd3", total_steps=6000, learning_starts=200)  # its own recipe
    assert lines.start_warnings(plan(own, on_devices=False), 100) == []


def test_a_pbt_interval_longer_than_the_run_is_named():
    population = ("actor_lr=0.001", "actor_lr=0.0003")
    cfg = RunConfig(total_steps=6000, pbt=True, population=population, chunk_iterations=90)
    planned = plan(cfg, on_devices=False)
    k = 90  # 720 env steps a chunk: the default interval is 7,200
    (line,) = lines.start_warnings(planned, k)
    assert line.startswith("--pbt-interval 0 (ten chunks: 7,200 env steps) is longer than")
    assert "copy no member" in line and "a multiple of 720" in line
    # a run warmed up to 1,000 steps that ends at 1,000 + 7 x 720 = 6,040: the advice holds
    at_most = int(re.search(r"of at most ([\d,]+)", line).group(1).replace(",", ""))
    fits = plan(cfg.replace(pbt_interval=at_most // 720 * 720), on_devices=False)
    assert lines.start_warnings(fits, k) == []


def test_the_warnings_come_before_the_compile(tmp_path, capsys):
    cfg = RunConfig(algo="fasttd3", total_steps=6000, logdir=str(tmp_path), sinks=())
    seen = []

    def start(setup, say, stop):  # the compile: stop here
        seen.append(capsys.readouterr())
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp, pytest.raises(KeyboardInterrupt):
        mp.setattr(trainer, "start", start)
        trainer.train(cfg)
    out, err = seen[0]
    assert err.count("jaxspreeze: warning: --total-steps 6,000") == 1
    assert out.startswith("jaxspreeze: fasttd3 on gymnax/Pendulum-v1")
    assert "device buffers ~" in out and "not counted: XLA's temporaries" in out
    assert len(out.splitlines()) == 1  # the header; the start then says what it compiles


# ------------------------------------------------------------------------ sweeps
def test_a_population_summary_names_members_and_seeds():
    cfg = RunConfig(num_seeds=2, population=("tau=0.01", "tau=0.02", "tau=0.03"))
    flat = [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    got = summary.members_and_seeds(
        {"algo": "sac", "num_seeds": 2, "final_eval_return_per_seed": flat, "x": 1}, cfg
    )
    assert list(got) == [
        "algo", "num_seeds", "num_members", "seeds_per_member", "final_eval_return_per_seed",
        "final_eval_return_per_member", "final_eval_return_per_member_seed", "x",
    ]  # fmt: skip
    assert got["num_members"] == 3 and got["seeds_per_member"] == 2
    assert got["final_eval_return_per_member"] == [2.0, 6.0, 10.0]
    assert got["final_eval_return_per_member_seed"] == [[1.0, 3.0], [5.0, 7.0], [9.0, 11.0]]


def test_a_sweep_folder_is_named_as_one():
    cfg = RunConfig(population=("tau=0.01", "tau=0.02"))
    assert re.fullmatch(r"sweep-sac-gymnax-Pendulum-v1-\d{8}-\d{6}", sweeping.named(cfg).run_name)
    assert sweeping.named(cfg.replace(pbt=True)).run_name.startswith("pbt-sac-")
    assert sweeping.named(cfg.replace(run_name="mine")).run_name == "mine"
    assert sweeping.named(RunConfig()).run_name == RunConfig().run_name  # not a population


def test_the_members_plot_names_every_member():
    from jaxspreeze.sinks.figures import members_figure

    records = [{"kind": "eval", "env_steps": s, "eval_return_per_member": [-s, -2 * s, None]}
               for s in (100, 200)]  # fmt: skip
    values = [{"actor_lr": 1e-3}, {"actor_lr": 3e-4}, {"actor_lr": 1e-4}]
    (ax,) = members_figure(records, values=values).axes
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == [
        "best: member 0 (actor_lr=0.001)", "member 1 (actor_lr=0.0003)", "member 2 (actor_lr=0.0001)"
    ]  # fmt: skip


# ------------------------------------------------------------- a run in a terminal
@pytest.mark.slow  # a whole run (the sink's own tests above cover the display by default)
def test_a_run_in_a_terminal_draws_a_live_line_and_returns_its_final_return(term, tmp_path):
    # (test_console_output's tiny run: the compile cache serves its programs)
    cfg = RunConfig(
        total_steps=280, num_envs=4, grad_steps=2, batch_size=32, buffer_size=2_000,
        learning_starts=200, chunk_iterations=20, eval_episodes=2, eval_every=0,
        logdir=str(tmp_path), run_name="live", sinks=("console",), num_seeds=2,
        sac=SACConfig(hidden=(32, 32)),
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", term.file)
        result = trainer.train(cfg)
    out = term.read()
    frames = [f for f in re.split(r"\r\x1b\[K", out) if f.startswith("  █")]
    assert frames and all("280/280 steps | " in f and "elapsed, ETA 0:00" in f for f in frames)
    assert re.search(r"\r\x1b\[K  compiling, then warming up \d:\d\d", out)  # while it compiles
    assert "\r\n  columns: env steps done/total (per seed)" in out
    assert "\r\x1b[K  final eval @       280 steps: return" in out  # above the live line
    assert result.final_return == result.summary["final_eval_return"]
    assert result.final_return_se == result.summary["final_eval_return_se"] > 0
    assert f"final eval return: {result.final_return:.1f} ± " in out
