"""The notebooks: every one runs top to bottom without an error (markers: notebooks, slow).

The default run checks them statically instead (a few seconds): each is a valid notebook
committed without outputs, its code cells compile, and every name it takes from
jaxspreeze exists and is public. Running them (minutes) is ``-m notebooks``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import os
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]

# what a notebook must show it learned: (a pattern of its printed output, the lowest value
# its number may take); the quickstart's SAC Pendulum, trained then evaluated again
LEARNED = {
    "01_quickstart": [
        (r"final eval return (-?[\d.]+) after", -250.0),
        (r"^return (-?[\d.]+) ± [\d.]+ over 16 episodes", -250.0),
    ],
    # PPO on the corridor (random actions: about 0.1; the best return is under 1)
    "06_your_own_jax_env": [
        (r"final eval return (-?[\d.]+) \(random", 0.7),
        (r"^loaded agent: return (-?[\d.]+) ±", 0.7),
    ],
}


def code_cells(book) -> list[str]:
    """The Python of each code cell, IPython's ``%magic`` and ``!shell`` lines left out."""
    return [
        "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line
            for line in cell.source.splitlines()
        )
        for cell in book.cells
        if cell.cell_type == "code"
    ]


def uses_of_jaxspreeze(tree: ast.AST) -> list[tuple[str, tuple[str, ...]]]:
    """(module, attribute path) of every name a notebook takes from jaxspreeze.

    ``from jaxspreeze.x import a`` gives ("jaxspreeze.x", ("a",)); with ``a`` a module,
    ``a.b.c`` later gives ("jaxspreeze.x.a", ("b", "c")) (likewise ``import jaxspreeze``).
    """
    modules: dict[str, str] = {}  # a local name bound to a jaxspreeze module -> its name
    uses: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jaxspreeze":
            for alias in node.names:
                uses.append((node.module, (alias.name,)))
                full = f"{node.module}.{alias.name}"
                if importlib.util.find_spec(node.module) and _is_module(full):
                    modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jaxspreeze":
                    uses.append((alias.name, ()))
                    modules[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else "jaxspreeze"
                    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            path: list[str] = []
            inner: ast.AST = node
            while isinstance(inner, ast.Attribute):
                path.insert(0, inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in modules:
                uses.append((modules[inner.id], tuple(path)))
    return uses


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _resolve(module: str, path: tuple[str, ...]) -> str | None:
    """None if ``module`` and the public ``path`` in it exist, else what is wrong."""
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        return f"cannot import {module}: {e}"
    where = module
    for attr in path:
        if attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__")):
            return f"{where}.{attr} is private"
        if inspect.ismodule(obj) and not hasattr(obj, attr) and _is_module(f"{where}.{attr}"):
            obj = importlib.import_module(f"{where}.{attr}")
        elif hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            if attr not in {f.name for f in dataclasses.fields(obj)}:
                return f"{where} has no {attr}"
            return None  # a field's value: what follows belongs to the instance
        else:
            return f"{where} has no {attr}"
        if not (inspect.ismodule(obj) or inspect.isclass(obj)):
            return None  # a function or a value: what follows is its result's
        where = f"{where}.{attr}"
    return None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_is_sound(path):
    """Valid, committed without outputs, its cells compile, it calls only public API."""
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), (
        "commit notebooks with their outputs cleared"
    )
    cells = code_cells(book)
    assert cells
    for i, src in enumerate(cells):
        compile(src, f"{path.name}, cell {i}", "exec")
    trees = [ast.parse(src) for src in cells]
    uses = [use for tree in trees for use in uses_of_jaxspreeze(tree)]
    assert any(module.startswith("jaxspreeze") for module, _ in uses)
    problems = {f"{m}:{'.'.join(p)}": _resolve(m, p) for m, p in uses}
    assert not {k: v for k, v in problems.items() if v}, problems


def test_the_api_check_catches_a_wrong_name():
    """The static check fails on a missing or private name (it is not vacuous)."""
    tree = ast.parse(
        "from jaxspreeze.setup import config\nfrom jaxspreeze import nope\nimport jaxspreeze\n"
        "config.resolve(x); config._group(y); jaxspreeze.setup.config.missing_function()"
    )
    problems = {f"{m}:{'.'.join(p)}": _resolve(m, p) for m, p in uses_of_jaxspreeze(tree)}
    assert problems["jaxspreeze:nope"] == "jaxspreeze has no nope"
    assert problems["jaxspreeze.setup.config:_group"] == "jaxspreeze.setup.config._group is private"
    assert problems["jaxspreeze:setup.config.missing_function"] == (
        "jaxspreeze.setup.config has no missing_function"
    )
    assert problems["jaxspreeze.setup.config:resolve"] is None


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs(path, tmp_path):
    from nbclient import NotebookClient

    book = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), (
        "commit notebooks with their outputs cleared"
    )
    env_before = dict(os.environ)
    os.environ["MPLBACKEND"] = "Agg"
    try:
        NotebookClient(
            book,
            timeout=900,
            kernel_name="python3",
            resources={"metadata": {"path": str(tmp_path)}},
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    errors = [
        o
        for c in book.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
    printed = "".join(
        o.get("text", "")
        for c in book.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )
    for pattern, lowest in LEARNED.get(path.stem, []):
        found = re.search(pattern, printed, re.MULTILINE)
        assert found, f"{path.stem} printed nothing matching {pattern!r}"
        assert float(found.group(1)) >= lowest, f"{path.stem}: {found.group(0)}"


def _install_cell(path: Path) -> str:
    book = nbformat.read(path, as_version=4)
    return next(c.source for c in book.cells if c.cell_type == "code")


def test_install_cell_installs_a_clone_editable(tmp_path, monkeypatch):
    """Every notebook's first cell: in a fresh kernel opened in a clone's notebooks/, it runs
    `pip install -e <clone>` and this kernel imports the clone; with no clone it stops with
    a message saying to git clone the repository (and says so in its comment)."""
    import importlib.util
    import subprocess
    import sys

    cells = {p.stem: _install_cell(p) for p in NOTEBOOKS}
    assert len(set(cells.values())) == 1, "the notebooks' install cells differ"
    cell = next(iter(cells.values()))
    assert "git clone" in cell and "pip install -e .." in cell
    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    (clone / "pyproject.toml").write_text('[project]\nname = "jaxspreeze"\n')
    calls: list[list[str]] = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "jaxspreeze" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(subprocess, "check_call", lambda args: calls.append(list(args)))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("JAXSPREEZE_SRC", raising=False)
    monkeypatch.chdir(clone / "notebooks")
    exec(compile(cell, "install-cell", "exec"), {})
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "-e", str(clone.resolve())]]
    assert sys.path[0] == str(clone.resolve())
    # no clone anywhere: one message naming what to do, nothing installed
    monkeypatch.chdir(tmp_path)
    calls.clear()
    with pytest.raises(SystemExit, match="git clone the jaxspreeze repository"):
        exec(compile(cell, "install-cell", "exec"), {})
    assert calls == []
