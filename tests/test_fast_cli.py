"""Fast answers: a misspelled flag, value, algorithm or env id is refused before JAX starts.

The refusals run in a child process (``jaxspreeze.cli.main`` there), which then reports
whether ``jax`` (or a simulator) was imported: no clock is read. The tables
:mod:`jaxspreeze.cli.fastcheck` generates from the commands' dataclasses are compared with
the tyro parsers, and its env ids (the family table's) with the simulators' registries.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from jaxspreeze.cli import COMMANDS, fastcheck
from jaxspreeze.core import envids

HEAVY = ("jax", "gymnax", "brax", "mujoco", "mujoco_playground", "envpool", "flax", "optax")

CHILD = """
import json, sys
from jaxspreeze.cli import main
rc = main(sys.argv[1:])
sys.stderr.flush()
print(json.dumps({"rc": rc, "loaded": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def run_child(*argv: str) -> tuple[int, list[str], list[str]]:
    """``jaxspreeze.cli.main(argv)`` in a new process: (exit code, stderr lines, heavy
    modules it imported)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    err = [line for line in out.stderr.splitlines() if line.strip()]
    return result["rc"], err, result["loaded"]


REFUSED = [
    (
        ["train", "--algo", "sac", "--totl-steps", "100"],
        "jaxspreeze: error: unknown flag --totl-steps; did you mean --total-steps? "
        "(see `jaxspreeze train --help`)",
    ),
    (
        ["train", "--env", "gymnax/Pendulm"],
        "jaxspreeze: error: --env: unknown environment 'gymnax/Pendulm'; did you mean "
        "gymnax/Pendulum-v1? (see `jaxspreeze envs gymnax`)",
    ),
]


@pytest.mark.parametrize(("argv", "line"), REFUSED)
def test_a_misspelling_exits_2_with_one_line_without_importing_jax(argv, line):
    code, err, loaded = run_child(*argv)
    assert code == 2 and err == [line], err
    assert loaded == [], f"imported before refusing: {loaded}"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["train", "--sac.actor-lrr", "1e-3"],
            "unknown flag --sac.actor-lrr; did you mean --sac.actor-lr?",
        ),
        (["train", "--sac_actor_lr", "1e-3"], "did you mean --sac.actor-lr?"),
        (["train", "--algo", "sacc"], "--algo: unknown algorithm 'sacc'; did you mean sac?"),
        (
            ["train", "--total-steps", "1e4"],
            "--total-steps: expected an integer or None, got '1e4'",
        ),
        (["train", "--sac.gamma", "high"], "--sac.gamma: expected a number, got 'high'"),
        (
            ["train", "--placement", "splt"],
            "--placement: unknown choice 'splt'; did you mean split?",
        ),
        (["train", "--num-envs"], "--num-envs: missing its value"),
        (["train", "--env", "brax/halfcheeta"], "did you mean brax/halfcheetah?"),
        (["train", "--env", "Pendulum-v1"], "names are <family>/<task>"),
        (["train", "--env", "gymnaxx/Pendulum-v1"], "did you mean gymnax/Pendulum-v1?"),
        (["train", "--env", "gymnasium/Pendulm-v1"], "did you mean gymnasium/Pendulum-v1?"),
        (["autotune", "--out", "x", "--totl-steps", "5"], "did you mean --total-steps?"),
        (["eval", "run", "--episodess", "3"], "unknown flag --episodess; did you mean --episodes?"),
        (["bench", "--rounds", "two"], "--rounds: expected an integer or None, got 'two'"),
        (
            ["launch", "--processes", "2", "--", "train", "--totl-steps", "5"],
            "did you mean --total-steps?",
        ),
    ],
)
def test_refusals_before_jax_name_the_flag_and_the_nearest_name(argv, says):
    code, err, loaded = run_child(*argv)
    assert code == 2 and len(err) == 1 and err[0].startswith("jaxspreeze: error: "), err
    assert says in err[0], err
    assert "jax" not in loaded, loaded


def test_values_that_look_wrong_but_parse_are_not_refused_early():
    """The early check refuses only what tyro would refuse: every one of these passes it."""
    flags = fastcheck.flags("train")
    for argv in (
        ["--total-steps", "1_000", "--stop-at-return", "-5", "--seed=3"],
        ["--total-steps", "None", "--sinks", "console", "jsonl", "--algo", "ppo"],
        ["--sac.hidden", "64", "64", "--ppo.no-anneal-lr", "--total_steps", "10"],
        ["--env", "gymnax/CartPole-v1", "--env=brax/ant", "--env", "envpool/Anything-v9"],
        ["--env", "gymnasium/some.module:Env-v0", "--debug"],
    ):
        assert fastcheck.check_flags(argv, flags, "jaxspreeze train") is None, argv
    assert fastcheck.check("train", ["--totl-steps", "--help"]) is None  # tyro's help


def test_a_valid_command_line_still_reaches_the_command(capsys):
    """What the early check passes is parsed and run as before (here: `envs gymnax`)."""
    from jaxspreeze.cli import main

    assert main(["envs", "gymnax"]) == 0
    assert "gymnax/Pendulum-v1" in capsys.readouterr().out.splitlines()


def normalised(table: dict) -> dict:
    return {k: frozenset(v) if isinstance(v, tuple) else v for k, v in table.items()}


@pytest.mark.parametrize("command", COMMANDS)
def test_the_generated_flags_are_the_parsers(command):
    """The flags the early check generates from each command's dataclasses are its tyro
    parser's, each with its kind: it refuses exactly the flags the parser refuses."""
    assert normalised(fastcheck.flags(command)) == normalised(fastcheck.live_flags(command))


def test_every_registered_algorithm_placement_and_family_passes_the_early_check():
    """The choices are the registries': every algorithm, placement and env family (with a
    task of its list) passes; a name next to them is refused."""
    from jaxspreeze import algos
    from jaxspreeze.setup import config

    flags = fastcheck.flags("train")
    assert flags["--algo"] == algos.NAMES and flags["--placement"] == config.PLACEMENTS
    for name in algos.NAMES:
        section = f"--{name}.gamma"
        argv = ["--algo", name, section, "0.9"]
        assert fastcheck.check_flags(argv, flags, "jaxspreeze train") is None, name
    for placement in config.PLACEMENTS:
        argv = ["--placement", placement]
        assert fastcheck.check_flags(argv, flags, "jaxspreeze train") is None, placement
    for family, entry in envids.FAMILIES.items():
        task = entry.ids[0] if entry.ids else "Pendulum-v1"
        assert fastcheck.check_env(f"{family}/{task}") is None, family
    assert fastcheck.check_flags(["--algo", "sac2"], flags, "p") is not None
    assert fastcheck.check_env("gymnaxx/Pendulum-v1") is not None


def test_the_early_check_imports_no_jax():
    """fastcheck and every command's module (whose dataclass it reads) import no JAX, nor
    any simulator."""
    child = (
        "import sys; from jaxspreeze.cli import fastcheck; "
        f"[fastcheck.flags(c) for c in {COMMANDS!r}]; "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("family", envids.device_families())
def test_the_static_env_ids_are_the_registries(family):
    """The id list of a family (the family table's) is its registry's, for the version it
    names."""
    entry = envids.FAMILIES[family]
    if entry.ids_from is not None:
        distribution, version = entry.ids_from
        try:
            installed = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{distribution} is not installed")
        if installed != version:
            pytest.skip(f"ids taken from {distribution} {version}, {installed} installed")
    assert entry.ids == fastcheck.live_env_ids(family)


def test_another_simulator_version_leaves_the_ids_to_the_full_check(monkeypatch):
    monkeypatch.setattr(fastcheck, "_installed_version", lambda distribution: "0.0.0-other")
    assert fastcheck.check_env("gymnax/Pendulm") is None  # not known here: checked later
    assert fastcheck.check_env("brax/halfcheeta") is not None  # jaxspreeze's own list


def test_a_registry_already_imported_decides_for_itself(monkeypatch):
    """Once Playground's registry (or jaxspreeze's) is imported in this process (a
    notebook, a test), envs registered at run time may be in it: the static list no longer
    refuses them."""
    import types

    for name in ("mujoco_playground", fastcheck.ENV_REGISTRY):
        monkeypatch.delitem(sys.modules, name, raising=False)
    if fastcheck._static_ids("playground") is None:
        pytest.skip("the static Playground ids are of another version")
    assert fastcheck.check_env("playground/MyOwnTask") is not None
    for name in ("mujoco_playground", fastcheck.ENV_REGISTRY):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        assert fastcheck.check_env("playground/MyOwnTask") is None  # the full check decides
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(
    "argv", [["eval"], ["render"], ["launch", "--port", "1"], ["cache", "tidy"]]
)
def test_what_tyro_refuses_is_refused_before_jax_too(argv):
    """eval, render and launch import JAX (and what needs it) only after parsing: a command
    line that passes the early check but not tyro (no RUN_DIR, no --processes, a bad
    positional) is still one line and exit 2 without it."""
    code, err, loaded = run_child(*argv)
    assert code == 2 and len(err) == 1 and err[0].startswith("jaxspreeze: error: "), err
    assert "jax" not in loaded, loaded
