"""``jaxspreeze envs [FAMILY]``: the env ids of a family, one a line, ready for ``--env``."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import gymnax
import pytest

from jaxspreeze import cli
from jaxspreeze.core import envids
from jaxspreeze.envs import brax, check_env_name, playground

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None


def ids(capsys, *argv: str) -> list[str]:
    assert cli.main(["envs", *argv]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    return out.out.splitlines()


def test_gymnax_and_brax_list_every_task(capsys):
    assert ids(capsys, "gymnax") == [f"gymnax/{n}" for n in gymnax.registered_envs]
    assert ids(capsys, "brax/") == [f"brax/{n}" for n in brax.NAMES]  # a trailing / is fine


def test_gymnasium_lists_its_registry(capsys):
    listed = ids(capsys, "gymnasium")
    assert listed == sorted(f"gymnasium/{n}" for n in gym.registry)
    assert "gymnasium/CartPole-v1" in listed and "gymnasium/Pendulum-v1" in listed
    check_env_name("gymnasium/CartPole-v1")  # what is listed is accepted


@pytest.mark.skipif(not playground.installed(), reason="MuJoCo Playground is not installed")
def test_playground_lists_the_tasks_that_load_offline(capsys):
    listed = ids(capsys, "playground")
    assert listed == [f"playground/{n}" for n in playground.available()]
    assert "playground/CartpoleBalance" in listed


def test_a_family_not_installed_names_its_install_command(capsys, monkeypatch):
    monkeypatch.setattr(playground, "installed", lambda: False)
    assert cli.main(["envs", "playground"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxspreeze: error:") and 'pip install "jaxspreeze[playground]"' in err
    # in the list of every family it is one line, the others are listed
    lines = ids(capsys, "--all")
    assert any(line.startswith("playground: ") and "pip install" in line for line in lines)
    assert f"gymnax ({len(gymnax.registered_envs)}):" in lines and "  brax/ant" in lines


@pytest.mark.skipif(not HAS_ENVPOOL, reason="envpool is not installed")
def test_envpool_lists_its_tasks(capsys):
    import envpool

    listed = ids(capsys, "envpool")
    assert listed == sorted(f"envpool/{n}" for n in envpool.list_all_envs())
    assert "envpool/Pendulum-v1" in listed


def test_an_unknown_family_exits_2_naming_the_families(capsys):
    assert cli.main(["envs", "gymnaxx"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown env family 'gymnaxx'; did you mean gymnax or gymnasium?" in err
    assert ", ".join((*envids.device_families(), *envids.host_families())) in err


def test_a_reader_that_leaves_is_no_error(capsys, monkeypatch, tmp_path):
    """`jaxspreeze envs | head -1`: a broken pipe ends the listing quietly, exit 0."""
    import sys

    sink = open(tmp_path / "out", "w")

    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            return sink.fileno()

    monkeypatch.setattr(sys, "stdout", Gone())
    assert cli.main(["envs", "brax"]) == 0
    sink.close()
    assert capsys.readouterr().err == ""
