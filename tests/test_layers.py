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
# import that a contract must refuse. The comment says which rule it breaks.
WRONG = [
    ("algos/sac.py", "workers"),  # pure maths importing threads
    ("guards.py", "resume"),  # a leaf-like host service importing the top of the house
    ("replay.py", "envs"),  # two independent pieces of device maths
    ("config.py", "distributed"),  # run setup's independent floor
    ("config.py", "devices"),  # the same floor
    ("networks/torsos.py", "replay"),  # device maths, independent
    ("envs/gymnax.py", "algos"),  # envs below the algorithms
    ("types.py", "config"),  # a leaf importing run setup
    ("schedules/fused.py", "checkpoint"),  # a schedule writing files
    ("schedules/base.py", "memory"),  # a schedule importing run setup
    ("algos/ppo.py", "hostenvs"),  # pure maths importing host envs (forbidden contract)
    ("algos/td3.py", "config"),  # pure maths importing run setup
    ("algos/sac.py", "programs"),  # pure maths importing the program files (forbidden)
    ("iteration.py", "workers"),  # the iteration importing threads (forbidden contract)
    ("iteration.py", "schedules"),  # the iteration below the schedules
    ("rollout.py", "hostenvs"),  # rollouts are device maths (forbidden contract)
    ("envs/base.py", "hostenvs"),  # the env contract, not the registry (forbidden)
    ("transfer.py", "rundir"),  # device copies importing files
    ("workers.py", "algos"),  # the threads and the algorithms are independent
    ("metrics.py", "trainer"),  # a host service importing the trainer
    ("metrics.py", "sinks"),  # the old upward arrow, as a real import
    ("stopping.py", "metrics"),  # the lowest host floor is independent
    ("records.py", "sinks"),  # records are below the sinks that write them
    ("evaluate.py", "checkpoint"),  # the evaluator below checkpoints
    ("render.py", "evaluate"),  # independent host services
    ("policy.py", "render"),  # the saved actor below rendering
    ("evaluate.py", "agent"),  # the evaluation below the agent that runs it
    ("agent.py", "records"),  # the agent and the records are independent
    ("checkpoint.py", "resume"),  # checkpoints below resume
    ("sinks/files.py", "rundir"),  # sinks below the run directory
    ("devices.py", "memory"),  # placement below the memory estimate
    ("autotune/__init__.py", "bench"),  # bench runs autotune, not the other way
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
        file.write_text(before + f"import jaxspreeze.{target}  # wrong import\n")
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
    assert f"{module} -> jaxspreeze.{target} (l.{line})" in out, out


def test_a_module_on_no_floor_fails(results: dict[str, list]) -> None:
    rc, out = results["new module"]
    assert rc != 0, out
    assert "unplaced" in out, out


def test_the_architecture_page_draws_the_contract_floors() -> None:
    """docs/architecture.md's floor diagram is the layers contract, line for line."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("<!-- layers:", 1)[1].split("<!-- end layers -->", 1)[0]
    lines = block.split("```")[1].strip("\n").splitlines()
    drawn = [line.split("  ")[0].strip() for line in lines]
    assert drawn == layers["layers"]


if __name__ == "__main__":
    print(json.dumps(_run_cases(json.loads(sys.argv[1]))))
