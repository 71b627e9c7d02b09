"""Defaults per env family (``AlgoSpec.family_defaults``): PPO's tanh-squashed policy on
brax, SAC's 64 x 64 networks on gymnax; what the user sets is kept; every other default and every other algorithm's is
unchanged. No JAX program runs here."""

from __future__ import annotations

import dataclasses

import pytest

from jaxspreeze import algos
from jaxspreeze.algos import base, ppo
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

SIZES = ("num_envs", "rollout_steps", "batch_size", "chunk_iterations", "total_steps")


def _resolved(**kw):
    cfg = config.resolve(RunConfig(**kw))
    return {k: getattr(cfg, k) for k in SIZES}, cfg.ppo


def test_ppo_defaults_per_family():
    """brax: the tanh-squashed Gaussian; every other family (and every size): today's."""
    gymnax_sizes, section = _resolved(algo="ppo", env="gymnax/CartPole-v1")
    assert gymnax_sizes == dict(num_envs=16, rollout_steps=64, batch_size=256,
                                chunk_iterations=20, total_steps=200_000)  # fmt: skip
    assert (section.lr, section.epochs, section.policy) == (1e-3, 10, "clipped")
    for env, policy in (
        ("brax/halfcheetah", "tanh"),
        ("brax/reacher", "tanh"),
        ("playground/CheetahRun", "clipped"),
        ("gymnax/Pendulum-v1", "clipped"),
        ("gymnasium/Pendulum-v1", "clipped"),
        ("envpool/Pendulum-v1", "clipped"),
    ):
        sizes, section = _resolved(algo="ppo", env=env)
        assert section.policy == policy, env
        assert sizes == gymnax_sizes and (section.lr, section.epochs) == (1e-3, 10), env


def test_what_the_user_sets_is_kept_and_other_algorithms_are_untouched():
    cfg = RunConfig(algo="ppo", env="brax/halfcheetah", num_envs=8)
    cfg = config.resolve(cfg.replace(ppo={"policy": "clipped", "epochs": 4}))
    assert (cfg.num_envs, cfg.rollout_steps, cfg.batch_size) == (8, 64, 256)
    assert (cfg.ppo.policy, cfg.ppo.epochs) == ("clipped", 4)
    assert config.resolve(cfg) is cfg and config.is_resolved(cfg)
    unset = RunConfig(algo="ppo", env="brax/halfcheetah", **{k: 1 for k in base.RUN_SIZES},
                      eval_every=1)  # fmt: skip
    assert not config.is_resolved(unset)  # every size set, the policy left to the family
    assert config.resolve(unset).ppo.policy == "tanh"
    for algo in ("sac", "td3", "fasttd3"):
        spec = algos.get(algo)
        on_brax = config.resolve(RunConfig(algo=algo, env="brax/halfcheetah"))
        on_gymnax = config.resolve(RunConfig(algo=algo, env="gymnax/Pendulum-v1"))
        assert {k: getattr(on_brax, k) for k in SIZES} == {k: getattr(on_gymnax, k) for k in SIZES}
        filled = {f: getattr(getattr(on_brax, algo), f) for f in spec.field_defaults}
        assert getattr(on_brax, algo) == spec.config_cls(**filled), algo
        if algo != "sac":  # SAC's widths are the family's (test_sac_widths_per_family)
            assert getattr(on_brax, algo) == getattr(on_gymnax, algo) == spec.config_cls()
        assert on_brax.ppo.policy is None  # an unused section keeps "the family's"
        assert algo == "sac" or on_brax.sac.hidden is None


def test_sac_widths_per_family():
    """gymnax: 64 x 64; every other family 128 x 128; what the user sets is kept; every
    other SAC field is the same in every family; SAC's make fills an unset width from the
    env spec's family (direct callers)."""
    from jaxspreeze.algos import sac

    assert config.resolve(RunConfig(algo="sac", env="gymnax/Pendulum-v1")).sac.hidden == (64, 64)
    for env in ("brax/halfcheetah", "playground/CheetahRun", "gymnasium/Pendulum-v1",
                "envpool/Pendulum-v1"):  # fmt: skip
        section = config.resolve(RunConfig(algo="sac", env=env)).sac
        assert section == sac.SACConfig(hidden=(128, 128)), env
    mine = RunConfig(algo="sac", env="gymnax/Pendulum-v1").replace(sac={"hidden": [32]})
    assert config.resolve(mine).sac.hidden == (32,)
    planned = plan(RunConfig(algo="sac", env="gymnax/Pendulum-v1"), on_devices=False)
    assert planned.cfg.sac.hidden == (64, 64)
    assert isinstance(planned.make_algorithm(), base.Algorithm)
    assert base.filled(sac.SPEC, sac.SACConfig(), "gymnax").hidden == (64, 64)
    assert base.filled(sac.SPEC, sac.SACConfig(), "brax").hidden == (128, 128)
    with pytest.raises(config.ConfigError) as e:
        plan(RunConfig(algo="sac").replace(sac={"hidden": [0]}), on_devices=False)
    assert e.value.field == "sac.hidden"


def test_plans_check_the_value_a_field_takes():
    planned = plan(RunConfig(algo="ppo", env="brax/inverted_pendulum"), on_devices=False)
    assert planned.cfg.ppo.policy == "tanh"
    assert isinstance(planned.make_algorithm(), base.Algorithm)
    # an unused PPO section with unset fields passes; a bad one is still named
    plan(RunConfig(algo="sac", env="gymnax/Pendulum-v1"), on_devices=False)
    with pytest.raises(config.ConfigError) as e:
        plan(RunConfig(algo="sac").replace(ppo={"epochs": 0}), on_devices=False)
    assert e.value.field == "ppo.epochs"
    # PPO's make fills unset fields from the env spec's family (direct callers)
    section = base.filled(ppo.SPEC, ppo.PPOConfig(), "brax")
    assert section.policy == "tanh" and base.filled(ppo.SPEC, section, "brax") is section
    assert base.filled(ppo.SPEC, ppo.PPOConfig(), "gymnax").policy == "clipped"


def test_the_table_is_checked():
    """A family may change only the fields declared None (the run-level sizes stay the
    algorithm's, with their accelerator values)."""
    with pytest.raises(ValueError, match="names \\['hidden'\\], not None fields"):
        dataclasses.replace(ppo.SPEC, field_defaults={"hidden": (8,)})
    with pytest.raises(ValueError, match="family_defaults\\['brax'\\] names \\['gamma'\\]"):
        dataclasses.replace(ppo.SPEC, family_defaults={"brax": {"gamma": 0.9}})
    with pytest.raises(ValueError, match="family_defaults\\['brax'\\] names \\['num_envs'\\]"):
        dataclasses.replace(ppo.SPEC, family_defaults={"brax": {"num_envs": 4}})
    assert base.family_of("brax/ant") == "brax" and base.family_of("Pendulum-v1") == ""


def test_a_run_saved_before_the_family_default_loads_as_it_trained(tmp_path):
    """A PPO run's config.json from before ``policy`` existed trained the clipped Gaussian:
    it loads as clipped on brax too (the field's ``absent``), not as brax's tanh."""
    import json

    cfg = config.resolve(RunConfig(algo="ppo", env="brax/reacher").replace(ppo={"policy": "tanh"}))
    data = config.to_dict(cfg)
    del data["ppo"]["policy"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert config.resolve(config.load(tmp_path / "config.json")).ppo.policy == "clipped"
    data["ppo"]["policy"] = "tanh"
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert config.resolve(config.load(tmp_path / "config.json")).ppo.policy == "tanh"
