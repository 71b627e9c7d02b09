"""Run-level defaults that depend on the backend: the fast recipes' sizes on a GPU/TPU."""

from __future__ import annotations

import jax
import pytest

from jaxspreeze import algos
from jaxspreeze.algos import fasttd3
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig


def test_on_the_cpu_every_algorithm_takes_its_defaults():
    for name in algos.NAMES:
        cfg = config.resolve(RunConfig(algo=name, env="gymnax/Pendulum-v1"))
        assert cfg.num_envs == algos.get(name).defaults["num_envs"], name
        assert cfg.batch_size == algos.get(name).defaults["batch_size"], name


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_on_an_accelerator_the_fast_recipes_take_the_papers_sizes(monkeypatch, backend):
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    for name in ("fasttd3", "fastsac"):
        cfg = config.resolve(RunConfig(algo=name, env="gymnax/Pendulum-v1"))
        for size, value in fasttd3.ACCELERATOR_DEFAULTS.items():
            assert getattr(cfg, size) == value, (name, size)
        assert cfg.grad_steps == fasttd3.DEFAULTS["grad_steps"]  # 2 per env step everywhere
        assert cfg.eval_every == cfg.total_steps // config.EVALUATIONS
    # a size the user set stays; an algorithm without accelerator sizes keeps its own
    cfg = config.resolve(RunConfig(algo="fasttd3", env="gymnax/Pendulum-v1", num_envs=64))
    assert (cfg.num_envs, cfg.batch_size) == (64, 32_768)
    sac = config.resolve(RunConfig(algo="sac", env="gymnax/Pendulum-v1"))
    assert sac.num_envs == algos.get("sac").defaults["num_envs"]


def test_help_names_the_accelerator_sizes():
    help_text = next(
        f.metadata["help"] for f in config.dataclasses.fields(RunConfig) if f.name == "num_envs"
    )
    assert "on a GPU or TPU fasttd3/fastsac 1,024" in help_text


def test_accelerator_defaults_name_run_sizes_only():
    spec = algos.get("fasttd3")
    with pytest.raises(ValueError, match="accelerator_defaults"):
        config.dataclasses.replace(spec, accelerator_defaults={"hidden": 3})
