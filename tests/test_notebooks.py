"""Every notebook runs top to bottom without an error (marker: notebooks)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
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
