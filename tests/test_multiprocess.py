"""Several processes, one run: jax.distributed on CPU (gloo) and ``jaxspreeze launch``.

Two local processes of one CPU device each run the data-parallel schedule (dp_worker.py)
and are compared with one process of two fake devices; the fault tests kill a process and
time how long the rest take to notice. The launcher's own behaviour (signals, exit codes)
is tested with plain Python children, without JAX. The trainer's tests run ``jaxspreeze
train`` as two processes: one summary, a resume (and its refusal on one process), a
signal to one process stopping both, a killed process named by the other.

Every test that starts JAX processes is ``slow`` (each process compiles its programs:
a minute or two on a shared 2-core machine) except the refusal of differing flags, which
ends before anything is compiled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fake_devices
import pytest

from jaxspreeze.cli import launch

WORKER = Path(__file__).with_name("dp_worker.py")
LAUNCH = [sys.executable, "-c", "import sys; from jaxspreeze.cli import launch; "
          "sys.exit(launch.main(sys.argv[1:]))"]  # fmt: skip
FAULT_TIMEOUT_S = 60  # a dead process is noticed and the others stopped within this


def clean_env(**extra: str) -> dict[str, str]:
    """This environment for CPU children, without a parent's multi-process settings."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **extra}
    env["XLA_FLAGS"] = fake_devices.QUICK_XLA_FLAGS  # not the parent's own flags
    env.pop("JAX_NUM_CPU_DEVICES", None)
    for name in ("JAXSPREEZE_COORDINATOR", "JAXSPREEZE_NUM_PROCESSES", "JAXSPREEZE_PROCESS_ID"):
        env.pop(name, None)
    env.update(extra)
    return env


def json_lines(text: str) -> list[dict]:
    """The JSON lines of a worker's output (other lines, e.g. gloo's, skipped)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def launched(
    *worker_args: str, processes: int = 2, timeout: float = 900, devices_per_process: int = 1
) -> list[dict]:
    """``launch --processes N --exec-command -- python dp_worker.py ARGS``; lines by process
    (each process with ``devices_per_process`` fake CPU devices)."""
    more = {"JAX_NUM_CPU_DEVICES": str(devices_per_process)} if devices_per_process > 1 else {}
    proc = subprocess.run(
        [*LAUNCH, "--processes", str(processes), "--exec-command", "--",
         sys.executable, str(WORKER), *worker_args],
        env=clean_env(**more),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return sorted(json_lines(proc.stdout), key=lambda d: d["process"])


@pytest.fixture(scope="module")
def two_processes() -> list[dict]:
    """Tiny SAC (2 seeds), 2 processes x 1 CPU device."""
    return launched("run")


@pytest.fixture(scope="module")
def one_process_two_devices() -> dict:
    """The same run, 1 process x 2 fake CPU devices."""
    proc = subprocess.run(
        [sys.executable, str(WORKER), "run"],
        env=clean_env(JAX_NUM_CPU_DEVICES="2"),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json_lines(proc.stdout)[-1]


# ------------------------------------------------------------------ two processes, one run
@pytest.mark.slow
def test_two_processes_join_one_run(two_processes):
    assert [d["process"] for d in two_processes] == [0, 1]
    for d in two_processes:
        assert d["topology"]["processes"] == 2
        assert d["topology"]["devices_per_process"] == [1, 1]
        assert d["describe"] == "data-parallel over 2 cpu devices (2 processes)"
        assert len(d["local_devices_hold"]) == 1  # each holds its own copy


@pytest.mark.slow
def test_parameters_are_identical_across_processes(two_processes):
    assert two_processes[0]["agent"] == two_processes[1]["agent"]
    assert two_processes[0]["metrics"] == two_processes[1]["metrics"]
    assert all(d["replicas_agree"] for d in two_processes)


@pytest.mark.slow
def test_a_two_process_state_goes_to_the_host_and_back(two_processes):
    """The resume path at the schedule level: gather, re-place, continue bitwise."""
    for d in two_processes:
        assert d["host_round_trip"] and d["resumes_bitwise"], d


@pytest.mark.slow
def test_two_processes_equal_one_process_with_two_devices(two_processes, one_process_two_devices):
    """Bitwise: the same programs, the same two-way all-reduce (gloo vs in-process)."""
    one = one_process_two_devices
    assert one["topology"]["processes"] == 1 and one["topology"]["devices"] == 2
    assert one["replicas_agree"]
    assert two_processes[0]["agent"] == one["agent"]
    assert two_processes[0]["metrics"] == one["metrics"]
    assert two_processes[0]["env_steps"] == one["env_steps"]


@pytest.mark.slow
def test_processes_with_different_configs_are_refused():
    found = launched("config", "--differ", timeout=300)
    assert len(found) == 2
    for d in found:
        assert d["refused"] and "process 1" in d["refused"], d
    assert all(d["refused"] is None for d in launched("config", timeout=300))


# ------------------------------------------------------------------ faults
def wait_ready(directory: Path, procs: list[subprocess.Popen], n: int = 2) -> list[int]:
    """The pids the ``forever`` workers wrote once compiled (fails if one died first)."""
    deadline = time.monotonic() + 900
    files = [directory / f"ready-{i}" for i in range(n)]
    while not all(f.exists() for f in files):
        for p in procs:
            if p.poll() is not None:
                _, err = p.communicate()
                pytest.fail(f"exited early ({p.returncode}): {err[-3000:]}")
        assert time.monotonic() < deadline, "workers did not get ready"
        time.sleep(0.5)
    time.sleep(0.2)  # the pid is written before the file is closed
    return [int(f.read_text()) for f in files]


@pytest.mark.slow
def test_killing_a_process_stops_the_launcher_naming_it(tmp_path):
    launcher = subprocess.Popen(
        [*LAUNCH, "--processes", "2", "--exec-command", "--",
         sys.executable, str(WORKER), "forever", "--dir", str(tmp_path)],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        pids = wait_ready(tmp_path, [launcher])
        t0 = time.monotonic()
        os.kill(pids[1], signal.SIGKILL)
        _, err = launcher.communicate(timeout=FAULT_TIMEOUT_S)
        took = time.monotonic() - t0
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0
    assert "process 1 of 2" in err and "SIGKILL" in err, err[-2000:]
    assert took < FAULT_TIMEOUT_S
    with pytest.raises(ProcessLookupError):  # the survivor was stopped too
        os.kill(pids[0], 0)


@pytest.mark.slow
def test_killing_a_process_makes_the_other_exit_naming_it(tmp_path):
    """Without the launcher (e.g. on SLURM): the survivor's collective fails; it names the dead."""
    port = launch.free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "forever", "--dir", str(tmp_path)],
            env=clean_env(
                JAXSPREEZE_COORDINATOR=f"127.0.0.1:{port}",
                JAXSPREEZE_NUM_PROCESSES="2",
                JAXSPREEZE_PROCESS_ID=str(i),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        wait_ready(tmp_path, procs)
        t0 = time.monotonic()
        procs[1].kill()
        procs[1].wait()
        _, err = procs[0].communicate(timeout=FAULT_TIMEOUT_S)
        took = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode != 0
    assert "process 1 of 2 died" in err, err[-2000:]
    assert took < FAULT_TIMEOUT_S


# ------------------------------------------------------------------ the launcher itself
CHILD = """
import os, signal, sys, time
i = os.environ["JAXSPREEZE_PROCESS_ID"]
d = sys.argv[1]
def stop(signum, frame):
    open(os.path.join(d, f"got-{i}"), "w").write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open(os.path.join(d, f"ready-{i}"), "w").write(str(os.getpid()))
if i == "1" and len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
time.sleep(120)
"""


def test_launcher_forwards_signals_to_every_process(tmp_path):
    launcher = subprocess.Popen(
        [*LAUNCH, "--processes", "2", "--exec-command", "--",
         sys.executable, "-c", CHILD, str(tmp_path)],
        env=clean_env(),
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_ready(tmp_path, [launcher])
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, err
    assert [(tmp_path / f"got-{i}").read_text() for i in range(2)] == ["SIGINT", "SIGINT"]


def test_launcher_returns_the_failed_process_code_and_stops_the_rest(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run(
        [*LAUNCH, "--processes", "2", "--exec-command", "--grace-s", "5", "--",
         sys.executable, "-c", CHILD, str(tmp_path), "3"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 3
    assert "process 1 of 2" in proc.stderr and "exited with code 3" in proc.stderr
    assert (tmp_path / "got-0").read_text() == "SIGTERM"  # the other was stopped
    assert time.monotonic() - t0 < 60


NOISY = """
import os, sys, time
i = os.environ["JAXSPREEZE_PROCESS_ID"]
print(f"[Gloo] Rank {i} is connected to 1 peer ranks. Expected number is : 1", file=sys.stderr)
print(f"I1204 17:30:00.123456 {os.getpid()} coordination_service.cc:123] up", file=sys.stderr)
print("[external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:547] Connection closed "
      "by peer [::1]:2475", file=sys.stderr)  # a survivor's, before the launcher sees a death
print("jaxspreeze: warning: a warning passes through", file=sys.stderr, flush=True)
if i == "1":
    time.sleep(0.5)
    print("jaxspreeze: error: --num-envs: must be at least 1", file=sys.stderr)
    sys.exit(2)
time.sleep(1.5)  # the survivor's report of its peer's death is left out
print("jaxspreeze: error: process 1 of 2 died", file=sys.stderr, flush=True)
print("E1204 17:30:02.000000 1 client.cc:9] connection reset", file=sys.stderr, flush=True)
time.sleep(60)
"""


def test_a_failed_process_is_one_line_on_the_launchers_console():
    proc = subprocess.run(
        [*LAUNCH, "--processes", "2", "--exec-command", "--grace-s", "2", "--",
         sys.executable, "-c", NOISY],
        env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    warnings = [x for x in lines if "warning" in x]
    errors = [x for x in lines if x not in warnings]
    assert proc.returncode == 2 and len(warnings) == 2, proc.stderr
    (line,) = errors
    assert line.startswith("jaxspreeze: error: process 1 of 2") and "exited with code 2" in line
    assert line.endswith(": --num-envs: must be at least 1; stopping the other 1 process(es)")
    debug = subprocess.run(
        [*LAUNCH, "--processes", "2", "--exec-command", "--grace-s", "2", "--",
         sys.executable, "-c", NOISY],
        env=clean_env(JAXSPREEZE_DEBUG="1"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "[Gloo] Rank 0" in debug.stderr and "--num-envs: must be" in debug.stderr


def test_launcher_gives_each_process_its_place(monkeypatch):
    inherited = ("JAXSPREEZE_PROGRAM_CACHE", "JAXSPREEZE_CACHE_DIR", "JAXSPREEZE_TESTS_XLA_CACHE")
    for name in inherited:  # the tests' environment, not the launcher's
        monkeypatch.delenv(name, raising=False)
    seen = []

    class Fake:
        def __init__(self, cmd, env, **kwargs):
            seen.append((cmd, {k: v for k, v in env.items() if k.startswith("JAXSPREEZE_")}))
            self.pid = len(seen)

        def poll(self):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", Fake)
    code = launch.main(["--processes", "2", "--port", "1234", "--devices-per-process", "2",
                        "--", "--total-steps", "100"])  # fmt: skip
    assert code == 0
    assert seen[0][0][-4:] == ["jaxspreeze", "train", "--total-steps", "100"]
    assert seen[1][1] == {
        "JAXSPREEZE_COORDINATOR": "127.0.0.1:1234",
        "JAXSPREEZE_NUM_PROCESSES": "2",
        "JAXSPREEZE_PROCESS_ID": "1",
        "JAXSPREEZE_LOCAL_DEVICE_IDS": "2,3",
    }
    assert launch.main(["--processes", "0"]) == 2
    assert launch.main(["--processes", "2", "--exec-command"]) == 2
    seen.clear()  # `-- train ARGS` reads as the command it runs
    assert launch.main(["--processes", "2", "--", "train", "--total-steps", "100"]) == 0
    assert seen[0][0][-4:] == ["jaxspreeze", "train", "--total-steps", "100"]


def test_launch_is_a_command(capsys):
    from jaxspreeze import cli

    assert cli.main(["--help"]) == 0
    assert "launch --processes N -- train" in capsys.readouterr().out
    assert "launch" in cli.COMMANDS


def test_one_process_needs_no_initialisation(monkeypatch):
    from jaxspreeze.setup import distributed

    for name in ("JAXSPREEZE_COORDINATOR", "JAXSPREEZE_NUM_PROCESSES", "JAXSPREEZE_PROCESS_ID",
                 "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    assert distributed.initialize() is False
    assert distributed.is_main() and distributed.process_count() == 1
    distributed.check_same_config({"a": 1})  # a no-op in one process
    assert distributed.broadcast_text("run-1") == "run-1"
    monkeypatch.setenv("JAXSPREEZE_NUM_PROCESSES", "2")
    with pytest.raises(Exception, match="coordinator"):
        distributed.initialize()


# ------------------------------------------------------------------ with the trainer
TRAIN = ["--algo", "sac", "--num-envs", "4", "--batch-size", "16", "--buffer-size", "400",
         "--learning-starts", "64", "--chunk-iterations", "10", "--sac.hidden", "8",
         "--sinks", "jsonl", "--eval-episodes", "2"]  # fmt: skip


def run_launch(*args: str, processes: int = 2) -> subprocess.CompletedProcess:
    """``jaxspreeze launch --processes N -- ARGS`` (CPU), its output captured."""
    return subprocess.run(
        [*LAUNCH, "--processes", str(processes), "--", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.slow
def test_two_process_training_writes_one_summary_and_resumes(tmp_path):
    proc = run_launch("train", *TRAIN, "--total-steps", "400", "--logdir", str(tmp_path),
                      "--run-name", "mp")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("final eval return") == 1  # process 0 alone writes the console
    runs = list(tmp_path.iterdir())
    assert [r.name for r in runs] == ["mp"]
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["topology"]["processes"] == 2
    assert summary["topology"]["data_parallel_devices"] == 2
    assert summary["placement"] == "data-parallel over 2 cpu devices (2 processes)"
    lines = (runs[0] / "metrics.jsonl").read_text().splitlines()
    chunks = [r["chunk"] for r in map(json.loads, lines) if r["kind"] == "chunk"]
    assert chunks == list(range(len(chunks)))  # one writer
    resumed = run_launch("--resume", str(runs[0]), "--total-steps", "600")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["env_steps"] >= 600 and summary["resumed_from"]
    refused = run_launch("--resume", str(runs[0]), "--total-steps", "800", processes=1)
    assert refused.returncode == 2
    assert "written by 2 processes" in refused.stderr and "--processes 2" in refused.stderr


def start_processes(tmp_path: Path, *args: str, n: int = 2, **per_process: list[str]):
    """``jaxspreeze train ARGS`` as N processes of one run, started by hand (as on SLURM).

    ``per_process["extra"][i]`` (a flag string) is added to process i's arguments.
    """
    port = launch.free_port()
    extra = per_process.get("extra", [""] * n)
    procs = []
    for i in range(n):
        join = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(n),
                "--process-id", str(i)]  # fmt: skip
        command = [sys.executable, "-m", "jaxspreeze", "train", *args, *extra[i].split(), *join]
        procs.append(
            subprocess.Popen(
                command, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    return procs


def wait_for_checkpoint(run: Path, procs: list[subprocess.Popen]) -> None:
    """Until the run has its first checkpoint (fails if a process ended first)."""
    deadline = time.monotonic() + 900
    while not any((run / "checkpoints").glob("0*")):
        for p in procs:
            if p.poll() is not None:
                _, err = p.communicate()
                pytest.fail(f"exited early ({p.returncode}): {err[-3000:]}")
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.5)


LONG = [*TRAIN, "--total-steps", "10000000", "--checkpoint-every", "400", "--eval-every", "0"]


@pytest.mark.slow
def test_a_signal_to_one_process_stops_every_process_at_the_same_chunk(tmp_path):
    procs = start_processes(tmp_path, *LONG, "--logdir", str(tmp_path), "--run-name", "stop")
    try:
        wait_for_checkpoint(tmp_path / "stop", procs)
        procs[1].send_signal(signal.SIGTERM)  # process 1 only
        outs = [p.communicate(timeout=FAULT_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    summary = json.loads((tmp_path / "stop" / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM"
    newest = max((tmp_path / "stop" / "checkpoints").glob("0*"))
    assert int(newest.name) == summary["env_steps"]  # the checkpoint of the chunk they stopped at
    assert "resume" in outs[0][0].lower()


@pytest.mark.slow
def test_killing_a_training_process_makes_the_other_exit_naming_it(tmp_path):
    procs = start_processes(tmp_path, *LONG, "--logdir", str(tmp_path), "--run-name", "kill")
    try:
        wait_for_checkpoint(tmp_path / "kill", procs)
        t0 = time.monotonic()
        procs[1].kill()
        procs[1].wait()
        _, err = procs[0].communicate(timeout=FAULT_TIMEOUT_S)
        took = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode not in (0, None)
    assert "process 1 of 2 died" in err, err[-2000:]
    assert took < FAULT_TIMEOUT_S


def test_processes_started_with_different_flags_are_refused(tmp_path):
    """Before anything is compiled: every process names process 1; nothing is written."""
    procs = start_processes(tmp_path, *TRAIN, "--total-steps", "400", "--logdir", str(tmp_path),
                            "--run-name", "differ", extra=["--seed 0", "--seed 1"])  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 2, err[-2000:]
        assert "process 1 was started with a different config" in err, err[-2000:]
    assert not (tmp_path / "differ").exists()
