"""The import contracts (pyproject.toml [tool.importlinter]) fail on each wrong import.

The package and pyproject.toml are copied to a temporary directory; each wrong import is
appended to one module of the copy in turn, and ``lint-imports`` runs on the copy (first
on PYTHONPATH) with the copy's config. All cases run in one subprocess, in-process calls to
import-linter (about a third of a second each), so the whole file takes a few seconds.
Run as a script (``python tests/test_layers.py CASES_JSON``, in the copy's directory) it is
that subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

# (module of the copy that gets the import, the module it imports): each is a plausible
# wrong import that a contract must refuse (the review's and the earlier ones). The comment
# says which rule it breaks.
WRONG = [
    # pure maths imports no threads, files, clocks, the console, host envs or run setup
    ("algos/sac.py", "jaxspreeze.host.workers"),  # threads
    ("algos/ppo.py", "jaxspreeze.host.hostenvs"),  # host envs
    ("algos/td3.py", "jaxspreeze.setup.config"),  # run setup
    ("algos/sac.py", "jaxspreeze.core.programs"),  # the kept programs' files
    ("algos/sac.py", "jaxspreeze.core.clock"),  # a clock
    ("algos/ppo_losses.py", "jaxspreeze.core.terminal"),  # the console
    ("algos/ppo.py", "threading"),  # threads, from the standard library
    ("algos/ddpg.py", "tyro"),  # the CLI's parser
    ("algos/sac.py", "orbax"),  # a checkpoint library
    ("algos/td3.py", "matplotlib"),  # plotting
    ("networks/torsos.py", "jaxspreeze.core.clock"),  # networks are pure maths
    ("data/replay.py", "jaxspreeze.core.terminal"),  # device data is pure maths
    ("data/rollout.py", "jaxspreeze.host.hostenvs"),  # rollouts are device maths
    ("data/rollout.py", "gymnasium"),  # a host simulator
    ("data/transfer.py", "jaxspreeze.store.rundir"),  # device copies importing files
    ("envs/base.py", "jaxspreeze.host.hostenvs"),  # the env contract, not the registry
    ("schedules/iteration.py", "jaxspreeze.host.workers"),  # the iteration importing threads
    ("schedules/iteration.py", "threading"),  # the same, from the standard library
    # inside a package
    ("schedules/iteration.py", "jaxspreeze.schedules.base"),  # the iteration below the schedules
    ("envs/gymnax.py", "jaxspreeze.envs.brax"),  # env adapters are independent
    ("envs/brax.py", "jaxspreeze.envs.playground"),  # the same
    ("algos/ppo_losses.py", "jaxspreeze.algos.sac"),  # shared maths below the algorithms
    ("algos/base.py", "jaxspreeze.algos.ppo"),  # the interface below its implementations
    ("data/replay.py", "jaxspreeze.data.rollout"),  # device data pieces are independent
    # run setup
    ("setup/config.py", "jaxspreeze.setup.distributed"),  # the config's independent floor
    ("setup/config.py", "jaxspreeze.setup.devices"),  # the same floor
    ("setup/config.py", "jaxspreeze.host.workers"),  # run setup starting threads
    ("setup/plan.py", "jaxspreeze.schedules"),  # the plan below the schedules it names
    ("setup/devices.py", "jaxspreeze.schedules.iteration"),  # placement below the iteration
    ("setup/devices.py", "jaxspreeze.setup.memory"),  # placement below the memory estimate
    ("setup/population.py", "tyro"),  # run setup reading the CLI's parser
    # the schedules
    ("schedules/fused.py", "jaxspreeze.host.workers"),  # a device schedule with threads
    ("schedules/split.py", "jaxspreeze.schedules.host_async"),  # device below host schedules
    ("schedules/fused.py", "jaxspreeze.store.checkpoint"),  # a schedule writing files
    # what starts before JAX imports no JAX
    ("core/errors.py", "jax"),  # a leaf
    ("core/envids.py", "flax"),  # the env families' table
    ("cli/fastcheck.py", "jax"),  # the early check
    ("algos/spec.py", "jax"),  # the registry entries
    ("algos/sac_config.py", "optax"),  # an algorithm's config and spec
    # leaves, host envs and host services
    ("core/types.py", "jaxspreeze.setup.config"),  # a leaf importing run setup
    ("core/programs.py", "jaxspreeze.setup.config"),  # the kept programs below run setup
    ("host/workers.py", "jaxspreeze.algos"),  # threads and algorithms are independent
    ("host/hostenvs.py", "jaxspreeze.envs"),  # host envs below the env registry
    ("networks/actors.py", "jaxspreeze.data.replay"),  # networks below device data
    ("sinks/metrics.py", "jaxspreeze.run.trainer"),  # the fan-out importing the trainer
    ("sinks/metrics.py", "jaxspreeze.sinks.console"),  # the fan-out below the sinks
    ("sinks/files.py", "jaxspreeze.store.rundir"),  # sinks below the run directory
    ("sinks/files.py", "jaxspreeze.run.records"),  # sinks below the records they write
    ("agent/evaluate.py", "jaxspreeze.store.checkpoint"),  # the agent and the store: independent
    ("agent/render.py", "jaxspreeze.agent.agent"),  # independent pieces of the agent
    ("agent/policy.py", "jaxspreeze.agent.render"),  # the saved actor below rendering
    ("agent/evaluate.py", "jaxspreeze.agent.agent"),  # the evaluation below the agent
    ("store/checkpoint.py", "jaxspreeze.store.resume"),  # checkpoints below resume
    ("run/stopping.py", "jaxspreeze.run.trainer"),  # the run's pieces below the trainer
    ("run/records.py", "jaxspreeze.run.summary"),  # records below the summary
    ("autotune/__init__.py", "jaxspreeze.bench"),  # bench runs autotune, not the other way
    ("bench/suite.py", "jaxspreeze.score"),  # the yardstick sits above the benchmarks
]

NEW_MODULE = "unplaced.py"  # a module on no floor: the layers contract is exhaustive


def _lint(config: str) -> tuple[int, str]:
    """Run import-linter in this process; its exit status and what it printed."""
    from importlinter.cli import lint_imports

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = lint_imports(config_filename=config, no_cache=True, no_logo=True)
    return rc, out.getvalue()


def _run_cases(cases: list[list[str]]) -> dict[str, list]:
    """In the copy's directory: lint the untouched copy, then each case, restoring each file."""
    config = str(Path("pyproject.toml").resolve())
    results: dict[str, list] = {"untouched": list(_lint(config))}
    for path, target in cases:
        file = Path("jaxspreeze") / path
        before = file.read_text()
        line = len(before.splitlines()) + 1
        file.write_text(before + f"import {target}  # wrong import\n")
        try:
            rc, out = _lint(config)
        finally:
            file.write_text(before)
        results[f"{path}->{target}"] = [rc, out, line]
    new = Path("jaxspreeze") / NEW_MODULE
    new.write_text('"""A module no floor names."""\n')
    try:
        results["new module"] = list(_lint(config))
    finally:
        new.unlink()
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    """Every case's exit status and output, from one subprocess over one copy."""
    tmp = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        ROOT / "jaxspreeze", tmp / "jaxspreeze", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(tmp), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), json.dumps(WRONG)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_untouched_copy_passes(results: dict[str, list]) -> None:
    rc, out = results["untouched"]
    assert rc == 0, out
    assert "0 broken" in out


@pytest.mark.parametrize(("path", "target"), WRONG, ids=[f"{p}->{t}" for p, t in WRONG])
def test_a_wrong_import_fails(results: dict[str, list], path: str, target: str) -> None:
    rc, out, line = results[f"{path}->{target}"]
    assert rc != 0, out
    module = "jaxspreeze." + path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    # the report names the inserted import itself, at its line
    assert f"{module} -> {target} (l.{line})" in out, out


def test_a_module_on_no_floor_fails(results: dict[str, list]) -> None:
    rc, out = results["new module"]
    assert rc != 0, out
    assert "unplaced" in out, out


def test_the_architecture_page_draws_the_contract_floors() -> None:
    """docs/architecture.md's floor diagram is the packages' layers contract, line for line."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c.get("containers") == ["jaxspreeze"]]
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("<!-- layers:", 1)[1].split("<!-- end layers -->", 1)[0]
    lines = block.split("```")[1].strip("\n").splitlines()
    drawn = [line.split("  ")[0].strip() for line in lines]
    assert drawn == layers["layers"]


if __name__ == "__main__":
    print(json.dumps(_run_cases(json.loads(sys.argv[1]))))
