"""Metric sinks: JSONL, CSV and TensorBoard agree; console output; the fan-out thread."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import struct
import threading
from pathlib import Path

import pytest
from tensorboardX.proto import event_pb2

from jaxspreeze.sinks import ConsoleSink, CsvSink, JsonlSink, TensorBoardSink, make_sinks
from jaxspreeze.sinks.metrics import MetricsThread


def read_csv(path: str | Path) -> list[dict[str, str]]:
    """The rows of a ``metrics.csv`` (cells as strings, missing values as '')."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def read_tensorboard(logdir: str | Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the scalars in the event files under ``logdir``.

    Reads the TFRecord framing directly and parses events with tensorboardX's protobuf
    classes (the ``tensorboard`` package is not needed).
    """
    out: dict[str, dict[int, float]] = {}
    for event in read_events(logdir):
        for value in event.summary.value:
            out.setdefault(value.tag, {})[int(event.step)] = float(value.simple_value)
    return out


def read_events(logdir: str | Path) -> list:
    """Every event of the event files under ``logdir``, in file order, each TFRecord's
    two CRCs checked (CRC-32C by the standard library-free reference below)."""
    events = []
    for path in sorted(Path(logdir).glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            head = data[pos : pos + 8]
            (length,) = struct.unpack("<Q", head)
            body = data[pos + 12 : pos + 12 + length]
            (head_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
            (body_crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
            assert head_crc == _masked_crc32c(head) and body_crc == _masked_crc32c(body)
            events.append(event_pb2.Event.FromString(body))
            pos += 12 + length + 4  # length, its crc, the event, its crc
        assert pos == len(data)
    return events


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C, bit by bit (a second implementation to check the sink's)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 * (crc & 1))
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(i: int, seeds: int = 2) -> dict:
    """A synthetic chunk record like the trainer's (per-seed lists, a NaN, a bool)."""
    rec = {
        "kind": "chunk",
        "env_steps": 100 * (i + 1),
        "chunk": i,
        "wall_s": 1.5 * i + 0.25,
        "critic_loss": 1.0 / (i + 1),
        "critic_loss_per_seed": [1.0 / (i + 1) + s / 10 for s in range(seeds)],
        "episode_return": math.nan if i == 0 else -100.0 * i,
        "critic_finite": True,
        "env_steps_per_s": 1234.5 + i,
    }
    return rec


def evalrec(steps: int) -> dict:
    """A synthetic eval record."""
    return {
        "kind": "eval",
        "env_steps": steps,
        "chunk": 1,
        "wall_s": 3.0,
        "final": False,
        "eval_s": 0.5,
        "eval_return": -321.0,
        "eval_return_per_seed": [-300.0, -342.0],
        "eval_return_std": 12.0,
        "eval_length": 200.0,
    }


def test_jsonl_csv_tensorboard_hold_the_same_values(tmp_path):
    records = [chunk(0), chunk(1), evalrec(200), chunk(2)]
    thread = MetricsThread([JsonlSink(tmp_path), CsvSink(tmp_path), TensorBoardSink(tmp_path)])
    for r in records:
        thread.submit(r)
    assert thread.close() == {"jsonl": 0, "csv": 0, "tensorboard": 0}

    jsonl = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rows = read_csv(tmp_path / "metrics.csv")
    tb = read_tensorboard(tmp_path / "tb")
    assert len(jsonl) == len(rows) == len(records)
    for rec, row in zip(jsonl, rows, strict=True):
        prefix = "eval" if rec["kind"] == "eval" else "train"
        step = rec["env_steps"]
        assert row["kind"] == rec["kind"] and int(row["env_steps"]) == step
        for key, value in rec.items():
            if key in ("kind", "env_steps", "chunk"):
                continue
            if isinstance(value, list):
                base = key.removesuffix("_per_seed")
                for s, v in enumerate(value):
                    assert float(row[f"{base}_seed{s}"]) == v
                    assert tb[f"{prefix}/{base}/seed{s}"][step] == pytest.approx(v, rel=1e-6)
            elif value is None:  # NaN: null in JSONL, empty in CSV, absent from TensorBoard
                assert row[key] == ""
                assert step not in tb.get(f"{prefix}/{key}", {})
            elif isinstance(value, bool):
                assert row[key] == str(value)
                assert tb[f"{prefix}/{key}"][step] == float(value)
            else:
                assert float(row[key]) == value
                assert tb[f"{prefix}/{key}"][step] == pytest.approx(value, rel=1e-6)


def test_csv_widens_when_a_column_first_appears_later(tmp_path):
    sink = CsvSink(tmp_path, extra_columns=())
    sink.write({"kind": "chunk", "env_steps": 1, "a": 1.0})
    sink.write({"kind": "eval", "env_steps": 2, "b": 2.0})
    sink.write({"kind": "chunk", "env_steps": 3, "a": 3.0})
    sink.close()
    rows = read_csv(tmp_path / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["1", "2", "3"]
    assert [r["a"] for r in rows] == ["1.0", "", "3.0"]
    assert [r["b"] for r in rows] == ["", "2.0", ""]


def test_console_plain_lines_when_not_a_tty():
    out = io.StringIO()
    sink = ConsoleSink(1000, live=False, file=out)
    sink.write(chunk(1))
    sink.write(evalrec(200))
    sink.close()
    text = out.getvalue()
    assert "200/1,000 steps" in text and "env steps/s" in text and "ETA" in text
    assert "elapsed" in text and "train return  -100.0" in text
    assert "eval @" in text and "-321.0" in text


def test_console_live_progress_bar(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # a wide terminal: every column shown
    out = io.StringIO()
    sink = ConsoleSink(1000, live=True, file=out)
    sink.write(chunk(1))
    sink.write(evalrec(200))
    sink.close()
    text = out.getvalue()
    assert "200/1k" in text and "steps/s" in text and "ETA" in text and "eval @" in text


class Boom:
    """A sink that always raises."""

    name = "boom"

    def write(self, record):
        raise RuntimeError("disk on fire")

    def close(self):
        pass


class Held:
    """A sink that blocks on an event until released."""

    name = "held"
    queue_size = 3

    def __init__(self):
        self.release = threading.Event()
        self.got = []

    def write(self, record):
        self.release.wait(60)
        self.got.append(record)

    def close(self):
        pass


class Keep:
    """A sink that keeps its records."""

    name = "keep"

    def __init__(self):
        self.got = []

    def write(self, record):
        self.got.append(record)

    def close(self):
        self.closed = True


def test_failing_and_slow_sinks_never_block_and_are_counted():
    reports = []
    held, keep = Held(), Keep()
    thread = MetricsThread([Boom(), held, keep], report=reports.append)
    for i in range(10):
        thread.submit(chunk(i))  # returns at once although `held` is stuck
    thread.submit(lambda: 1 / 0)  # a record that fails to build: reported, skipped
    while thread.records < 10:  # the fan-out itself never waits for a sink
        threading.Event().wait(0.01)
    held.release.set()
    drops = thread.close()
    assert len(keep.got) == 10 and keep.closed
    assert drops["boom"] == 10 and drops["keep"] == 0
    # held took one record into write() and 3 into its queue before it filled up
    assert drops["held"] == 10 - len(held.got) and drops["held"] >= 6
    assert thread.errors == {"boom": "RuntimeError: disk on fire"}
    assert sum("'boom'" in r for r in reports) == 1  # reported once, by name
    assert any("ZeroDivisionError" in r for r in reports)


def test_make_sinks_skips_what_is_not_installed(tmp_path, monkeypatch):
    notes = []
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name in ("tensorboardX", "wandb") else real(name),
    )
    sinks = make_sinks(
        ("console", "jsonl", "csv", "tensorboard", "wandb"),
        tmp_path,
        total_steps=10,
        quiet=True,
        report=notes.append,
    )
    # the event files need no tensorboardX (jaxspreeze.sinks.tfevents writes them)
    assert [s.name for s in sinks] == ["jsonl", "csv", "tensorboard"]
    assert len(notes) == 1 and "wandb" in notes[0]
    for s in sinks:
        s.close()


def test_tensorboard_purges_what_a_resumed_run_runs_again(tmp_path):
    """purge_step: the event file starts with a session START at that step, which makes
    TensorBoard hide the earlier session's events at or past it."""
    first = TensorBoardSink(tmp_path)
    for steps in (100, 200, 300):
        first.write({"kind": "chunk", "env_steps": steps, "x": 1.0})
    first.close()
    again = TensorBoardSink(tmp_path, purge_step=201)
    again.write({"kind": "chunk", "env_steps": 300, "x": 2.0})
    again.close()
    starts = [
        (event.session_log.status, event.step)
        for event in read_events(tmp_path / "tb")
        if event.HasField("session_log")
    ]
    assert starts == [(event_pb2.SessionLog.START, 201)]


def test_event_files_are_what_tensorboard_reads(tmp_path):
    """Every file starts with its version; values are float32 as protobuf's float holds
    them (one too large for float32 is an infinity); a step of 2**40 survives."""
    from jaxspreeze.sinks.tfevents import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    sink = TensorBoardSink(tmp_path)
    sink.write({"kind": "chunk", "env_steps": 2**40, "a": 0.1, "big": 1e300, "n": 3})
    sink.write({"kind": "eval", "env_steps": 7, "eval_return": -5.5})
    sink.close()
    events = read_events(tmp_path / "tb")
    assert events[0].file_version == "brain.Event:2" and events[0].wall_time > 0
    got = {(v.tag, e.step): v.simple_value for e in events[1:] for v in e.summary.value}
    assert got[("train/a", 2**40)] == struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert got[("train/big", 2**40)] == math.inf and got[("train/n", 2**40)] == 3.0
    assert got[("eval/eval_return", 7)] == -5.5


def test_plots_sink_imports_matplotlib_with_its_first_record_and_draws_at_close(tmp_path):
    """The import (about half a second) happens while the run trains, not at its end."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import sys
        from jaxspreeze.sinks import PlotsSink
        sink = PlotsSink({str(tmp_path)!r})
        print("before:", "matplotlib.figure" in sys.modules)
        sink.write({{"kind": "chunk", "env_steps": 8, "wall_s": 1.0, "env_steps_per_s": 8.0}})
        print("after:", "matplotlib.figure" in sys.modules)
        sink.write({{"kind": "eval", "env_steps": 8, "wall_s": 1.5, "eval_return": -3.0}})
        sink.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["before:", "False", "after:", "True"]
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    assert (tmp_path / "throughput.png").stat().st_size > 0
