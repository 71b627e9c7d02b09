"""The fast recipes' critic LayerNorm option (``--fasttd3.critic-layer-norm``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos, envs, networks
from jaxspreeze.setup import config
from jaxspreeze.setup.config import RunConfig

OBS, ACT = jnp.ones((3, 5)), jnp.zeros((3, 2))


def test_off_the_parameters_are_the_plain_mlps():
    plain = networks.DistributionalQEnsemble((8, 8), 11).init(jax.random.key(0), OBS, ACT)
    off = networks.DistributionalQEnsemble((8, 8), 11, layer_norm=False)
    same = off.init(jax.random.key(0), OBS, ACT)
    assert jax.tree.structure(plain) == jax.tree.structure(same)
    assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((a == b).all()), plain, same)))


def test_on_every_hidden_layer_is_normalised_before_its_relu():
    net = networks.DistributionalQEnsemble((8, 8), 11, num_qs=2, layer_norm=True)
    params = net.init(jax.random.key(0), OBS, ACT)
    mlp = params["params"]["VmapMLP_0"]
    assert sorted(k for k in mlp if k.startswith("LayerNorm")) == ["LayerNorm_0", "LayerNorm_1"]
    assert mlp["LayerNorm_0"]["scale"].shape == (2, 8)  # one per critic of the twin
    # a hidden layer's pre-activations of any scale come out normalised: scaling the
    # first layer's kernel leaves the logits unchanged (up to LayerNorm's epsilon)
    logits = net.apply(params, OBS, ACT)
    scaled = jax.tree_util.tree_map_with_path(
        lambda p, x: x * 50.0 if "Dense_0" in str(p) else x, params
    )
    np.testing.assert_allclose(net.apply(scaled, OBS, ACT), logits, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("algo", ["fasttd3", "fastsac"])
def test_the_algorithm_builds_its_critic_with_it(algo):
    cfg = config.resolve(RunConfig(algo=algo, env="gymnax/Pendulum-v1", batch_size=16))
    cfg = cfg.replace(**{algo: {"critic_layer_norm": True, "critic_hidden": (16, 16)}})
    assert getattr(cfg, algo).critic_layer_norm
    spec = envs.env_spec(cfg.env)
    algorithm = algos.get(algo).make(getattr(cfg, algo), spec, cfg)
    agent = jax.jit(algorithm.init)(jax.random.key(0))
    names = str(jax.tree_util.tree_structure(agent.critic))
    assert "LayerNorm_0" in names
    field = next(
        f for f in dataclasses.fields(algos.get(algo).config_cls) if f.name == "critic_layer_norm"
    )
    assert "shape" in field.metadata["kinds"]  # a resume refuses to change it
