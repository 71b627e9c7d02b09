"""The flat layout's import paths keep working: each old module path is the new module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from jaxspreeze.core.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module(old: str) -> None:
    new = importlib.import_module(f"jaxspreeze.{MOVED[old]}")
    assert importlib.import_module(f"jaxspreeze.{old}") is new
    assert new.__name__ == new.__spec__.name == f"jaxspreeze.{MOVED[old]}"


def test_every_moved_module_exists_and_no_old_file_is_left() -> None:
    import jaxspreeze

    root = jaxspreeze.__path__[0]
    for old, new in MOVED.items():
        assert importlib.util.find_spec(f"jaxspreeze.{new}") is not None, new
        assert not (importlib.util.find_spec(f"jaxspreeze.{new}").origin or "").startswith(
            f"{root}/{old.replace('.', '/')}.py"
        )


def test_the_documented_old_imports_work_in_a_fresh_process() -> None:
    """What the 0.1 README, docs and notebooks wrote, in a fresh interpreter."""
    code = (
        "from jaxspreeze.config import RunConfig\n"
        "from jaxspreeze import config, devices, schedules, replay\n"
        "from jaxspreeze.plan import plan\n"
        "from jaxspreeze.rollout import env_init, random_policy, rollout\n"
        "from jaxspreeze.evaluate import make_evaluate\n"
        "from jaxspreeze.iteration import update_step\n"
        "import jaxspreeze.setup.config as new\n"
        "assert config is new and RunConfig is new.RunConfig\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_import_jaxspreeze_starts_no_jax() -> None:
    code = "import sys, jaxspreeze; assert 'jax' not in sys.modules, 'jax imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
