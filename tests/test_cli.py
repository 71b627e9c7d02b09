"""The command line: bad input exits 2 with one line naming the field, before any compile.

The bad-input tests call ``jaxspreeze.cli.main`` in this process (``run_main``); a real
``python -m jaxspreeze train`` run checks the entry point end to end.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

BAD = [
    (["--total-steps", "-5"], "--total-steps"),
    (["--batch-size", "512", "--buffer-size", "100"], "--batch-size"),
    (["--env", "gymnax/Nope-v0"], "--env"),
    (["--algo", "sac", "--env", "gymnax/CartPole-v1"], "--algo"),
    (["--num-envs", "0"], "--num-envs"),
    (["--sac.gamma", "1.5"], "--sac.gamma"),
]


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m jaxspreeze ARGS`` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "jaxspreeze", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(("args", "flag"), BAD)
def test_bad_train_input_exits_2_naming_the_field(args, flag, tmp_path, run_main):
    out = run_main("train", *args, "--logdir", str(tmp_path))
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert flag in lines[0] and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir()), "nothing is written for a rejected config"


def test_unknown_algo_is_rejected(tmp_path, run_main):
    out = run_main("train", "--algo", "a2c", "--logdir", str(tmp_path))
    assert out.returncode == 2 and "algo" in out.stderr


def test_preset_file_and_flags_override(tmp_path):
    from jaxspreeze.cli.train import parse_train_args

    preset = tmp_path / "p.toml"
    preset.write_text("total_steps = 1234\nnum_envs = 4\n[sac]\nhidden = [64, 64]\n")
    cfg = parse_train_args(["--config", str(preset), "--num-envs", "2"])
    assert cfg.total_steps == 1234 and cfg.num_envs == 2 and cfg.sac.hidden == (64, 64)


def test_train_cli_writes_run_directory(tmp_path):
    out = run_cli(
        "train",
        "--total-steps",
        "600",
        "--num-envs",
        "4",
        "--grad-steps",
        "2",
        "--batch-size",
        "32",
        "--buffer-size",
        "2000",
        "--learning-starts",
        "200",
        "--chunk-iterations",  # (and the above: tiny_cfg's run, whose programs the
        "50",  # compile cache holds for this child)
        "--eval-episodes",
        "2",
        "--sac.hidden",
        "32",
        "32",
        "--logdir",
        str(tmp_path),
        "--run-name",
        "cli",
    )
    assert out.returncode == 0, out.stderr
    run = tmp_path / "cli"
    summary = json.loads((run / "summary.json").read_text())
    for key in (
        "final_eval_return",
        "env_steps",
        "wall_s",
        "compile_s",
        "env_steps_per_s",
        "update_samples_per_s",
        "grad_steps_per_s",
        "replay_ratio",
    ):
        assert key in summary
    assert summary["env_steps"] >= 600
    assert json.loads((run / "config.json").read_text())["total_steps"] == 600
    assert (run / "metrics.jsonl").read_text().count("\n") >= 1
    last = out.stdout.strip().splitlines()[-2:]
    assert str(run) in last[0] and "final eval return" in last[1]
    # the one wall figure: the command's, from the process's start to the summary
    assert summary["wall_counted_from"] == "command"
    assert summary["command_wall_s"] == pytest.approx(
        summary["command_to_train_s"] + summary["wall_s"], abs=0.5
    )
    assert last[1].endswith(f"| wall {summary['command_wall_s']:.1f}s")


def test_top_level_help_imports_no_command():
    """`jaxspreeze --help` stays fast: neither jax nor any command's module is imported."""
    code = (
        "import sys; from jaxspreeze.cli import main; assert main(['--help']) == 0; "
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jaxspreeze.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.strip().splitlines()[-1]
    # (jaxspreeze.core.clock: the command's start, marked as it starts; core.moved: the old
    # import paths' finder, which `import jaxspreeze` installs; leaves without JAX)
    expected = [
        "jaxspreeze.cli",
        "jaxspreeze.cli.common",
        "jaxspreeze.core",
        "jaxspreeze.core.clock",
        "jaxspreeze.core.errors",
        "jaxspreeze.core.moved",
    ]
    assert loaded == str(expected)


def test_bad_flag_is_one_line_naming_it(run_main):
    """A flag tyro cannot parse exits 2 with one line that names it and points to --help."""
    out = run_main("train", "--total-steps", "many")
    assert out.returncode == 2
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "--total-steps" in lines[0] and "jaxspreeze train --help" in lines[0]
