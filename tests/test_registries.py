"""One list per registry, read by everything.

The algorithm registry (``jaxspreeze.algos``: each algorithm's config and ``SPEC`` in its
no-JAX ``<name>_config.py``) and ``jaxspreeze.setup.config`` import without JAX; each spec's maths
module is the one it names. A new env family registers once (``envids.FAMILIES``) and a
new algorithm once (``algos._SPECS``): a fake of each, put into the registries before
anything reads them, is accepted by every consumer (config's checks, the early check,
the program cache's key, rendering's lookup, ``jaxspreeze envs`` and the plan).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

from jaxspreeze import algos

HEAVY = ("jax", "jaxlib", "flax", "optax", "numpy", "gymnax", "brax", "mujoco")


def run_child(code: str, cwd=None) -> str:
    """``code`` in a new Python process; its stdout (fails on a non-zero exit)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_config_and_the_algorithm_registry_import_without_jax():
    out = run_child(
        f"""
        import sys
        import jaxspreeze.setup.config as config
        from jaxspreeze import algos
        from jaxspreeze.cli import fastcheck
        for spec in algos.all_specs():
            spec.validate(spec.config_cls(), spec.name + ".", None)
            list(spec.member_fields)
        cfg = config.RunConfig(algo="ppo")
        config.check_types(cfg)
        print([m for m in {HEAVY!r} if m in sys.modules])
        """
    )
    assert out.strip() == "[]", out


def test_each_spec_is_its_maths_modules_and_names_its_member_fields():
    """``SPEC.maths`` is the module whose ``SPEC`` it is; the member fields the spec names
    (without JAX) are the setters the maths holds, in order, and ``make`` binds it."""
    for spec in algos.all_specs():
        maths = importlib.import_module(spec.maths)
        assert maths.SPEC is spec, spec.name
        assert tuple(spec.member_fields) == tuple(maths.MEMBER_FIELDS), spec.name
        assert all(spec.member_fields[n] is maths.MEMBER_FIELDS[n] for n in spec.member_fields)
        assert spec.config_cls.__module__.endswith("_config"), "the config lives without JAX"


# the fake family's adapter: gymnax's Pendulum under another family's name
TOY_ADAPTER = """
from jaxspreeze.envs import gymnax
from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.core.types import EnvSpec

PREFIX = "toy"


def names():
    return ("Swing-v0",)


def check(env_name):
    if env_name not in names():
        raise UnknownEnvError(f"unknown environment toy/{env_name}")


def make(env_name):
    parts = gymnax.make("Pendulum-v1")
    spec = EnvSpec(**{**parts.spec.__dict__, "name": f"toy/{env_name}"})
    return parts._replace(spec=spec)
"""

# registers the fake family and the fake algorithm, then asks every consumer
TOY_RUN = """
import dataclasses, json

from jaxspreeze import algos, envids
from jaxspreeze.algos import sac_config, spec

envids.FAMILIES["toy"] = envids.Family(
    "toy",
    adapter="toyfamily",
    ids=("Swing-v0",),
    distributions=("toydist",),
    renderer="drawings",
)


@dataclasses.dataclass(frozen=True)
class ToyConfig(sac_config.SACConfig):
    pass


toy = dataclasses.replace(sac_config.SPEC, name="toy", config_cls=ToyConfig, label="Toy")
algos._SPECS = (*algos._SPECS, toy)
algos.NAMES = (*algos.NAMES, "toy")
algos._BY_NAME["toy"] = toy

from jaxspreeze import config, programs, render
from jaxspreeze.cli import fastcheck
from jaxspreeze.envs import env_ids
from jaxspreeze.setup.plan import plan

cfg = config.RunConfig(algo="toy", env="toy/Swing-v0", toy=ToyConfig(hidden=(8,)))
config.check_fields(config.resolve(cfg))
planned = plan(cfg, on_devices=False)
out = {
    "train": fastcheck.check_flags(
        ["--algo", "toy", "--env", "toy/Swing-v0", "--toy.actor-lr", "0.1"],
        fastcheck.flags("train"),
        "jaxspreeze train",
    ),
    "misspelled": fastcheck.check_env("toy/Swng-v0"),
    "distributions": "toydist" in programs.distributions(),
    "renderer": render.renderer_of("toy/Swing-v0") is render.RENDERERS["drawings"],
    "ids": env_ids("toy"),
    "plan": [planned.algo_spec.name, planned.env_spec.name, planned.cfg.num_envs],
    "obs": list(planned.env_spec.obs_shape),
}
print(json.dumps(out))
"""


def test_a_new_family_and_algorithm_register_once_and_every_consumer_reads_them(tmp_path):
    (tmp_path / "toyfamily.py").write_text(TOY_ADAPTER)
    out = json.loads(run_child(TOY_RUN, cwd=tmp_path).strip().splitlines()[-1])
    assert out["train"] is None  # the early check accepts the family, its id and --toy.*
    assert "did you mean toy/Swing-v0?" in out["misspelled"]
    assert out["distributions"] and out["renderer"]
    assert out["ids"] == ["toy/Swing-v0"]
    assert out["plan"] == ["toy", "toy/Swing-v0", algos.get("sac").defaults["num_envs"]]
    assert out["obs"] == [3]
