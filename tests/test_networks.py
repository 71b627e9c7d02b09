"""The networks package: torsos, heads, composed actors and critics, recurrent cells, and
the ``--<algo>.torso`` choice.

The MLP networks are compared bitwise with a verbatim copy of the networks as they were
before torsos and heads (``_Old*`` below, with the same submodule class names, so the
parameter trees must match path for path). Shapes and parameter counts of the big
convolutional torsos come from ``jax.eval_shape`` (nothing is allocated).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze import algos, networks
from jaxspreeze.algos import spec as algo_spec
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec
from jaxspreeze.networks import torsos
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

B = 5
GRID, IMAGE, VECTOR = (10, 10, 4), (84, 84, 4), (7,)


# --- the networks before torsos and heads, verbatim (the reference) -------------------


class MLP(nn.Module):  # named MLP: the parameter paths read MLP_0, VmapMLP_0
    hidden: Sequence[int]
    out: int | None = None
    out_scale: float = 1.0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = nn.Dense(width)(x)
            x = nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)
        if self.out is not None:
            init = nn.initializers.variance_scaling(self.out_scale, "fan_avg", "uniform")
            x = nn.Dense(self.out, kernel_init=init)(x)
        return x


def _flat(obs, cols):
    x = obs.reshape(obs.shape[0], -1)
    return x if cols is None else x[:, cols[0] : cols[1]]


def _ensemble(hidden, out, num_qs, obs, action, obs_cols, layer_norm=False):
    x = jnp.concatenate([_flat(obs, obs_cols), action], axis=-1)
    ensemble = nn.vmap(
        MLP,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=0,
        axis_size=num_qs,
    )
    return ensemble(hidden, out, layer_norm=layer_norm)(x)


class _OldTanhGaussian(nn.Module):
    hidden: Sequence[int]
    action_dim: int
    obs_cols: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, obs):
        h = MLP(self.hidden)(_flat(obs, self.obs_cols))
        mean = nn.Dense(self.action_dim)(h)
        log_std = nn.Dense(self.action_dim)(h)
        log_std = -5.0 + 0.5 * (2.0 - -5.0) * (jnp.tanh(log_std) + 1)
        return mean, log_std


class _OldDeterministic(nn.Module):
    hidden: Sequence[int]
    action_dim: int
    obs_cols: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, obs):
        return jnp.tanh(MLP(self.hidden, self.action_dim)(_flat(obs, self.obs_cols)))


class _OldQ(nn.Module):
    hidden: Sequence[int]
    num_qs: int = 2
    obs_cols: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, obs, action):
        return _ensemble(self.hidden, 1, self.num_qs, obs, action, self.obs_cols)[..., 0]


class _OldC51(nn.Module):
    hidden: Sequence[int]
    num_atoms: int
    num_qs: int = 2
    obs_cols: tuple[int, int] | None = None
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs, action):
        return _ensemble(
            self.hidden, self.num_atoms, self.num_qs, obs, action, self.obs_cols, self.layer_norm
        )


class _OldValue(nn.Module):
    hidden: Sequence[int]
    obs_cols: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, obs):
        return MLP(self.hidden, 1)(_flat(obs, self.obs_cols))[..., 0]


class _OldCategorical(nn.Module):
    hidden: Sequence[int]
    num_actions: int
    obs_cols: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, obs):
        return MLP(self.hidden, self.num_actions, out_scale=0.01)(_flat(obs, self.obs_cols))


class _OldGaussian(nn.Module):
    hidden: Sequence[int]
    action_dim: int
    obs_cols: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, obs):
        mean = MLP(self.hidden, self.action_dim, out_scale=0.01)(_flat(obs, self.obs_cols))
        return mean, self.param("log_std", nn.initializers.zeros, (self.action_dim,))


class _OldSquashed(nn.Module):
    hidden: Sequence[int]
    action_dim: int
    obs_cols: tuple[int, int] | None = None
    state_std: bool = True

    @nn.compact
    def __call__(self, obs):
        x = _flat(obs, self.obs_cols)
        if self.state_std:
            out = MLP(self.hidden, 2 * self.action_dim, out_scale=0.01)(x)
            return out[:, : self.action_dim], out[:, self.action_dim :]
        mean = MLP(self.hidden, self.action_dim, out_scale=0.01)(x)
        return mean, self.param("raw_std", nn.initializers.zeros, (self.action_dim,))


H = (16, 8)
# (new network, the old one, whether it reads an action)
PAIRS = {
    "tanh_gaussian": (networks.TanhGaussianActor(H, 3), _OldTanhGaussian(H, 3), False),
    "tanh_gaussian_cols": (
        networks.TanhGaussianActor(H, 3, (0, 4)),
        _OldTanhGaussian(H, 3, (0, 4)),
        False,
    ),
    "deterministic": (
        networks.DeterministicActor(H, 3, (2, 7)),
        _OldDeterministic(H, 3, (2, 7)),
        False,
    ),
    "q": (networks.QEnsemble(H), _OldQ(H), True),
    "q3_cols": (networks.QEnsemble(H, 3, (1, 5)), _OldQ(H, 3, (1, 5)), True),
    "c51_layer_norm": (
        networks.DistributionalQEnsemble(H, 11, 2, (0, 3), layer_norm=True),
        _OldC51(H, 11, 2, (0, 3), layer_norm=True),
        True,
    ),
    "value": (networks.ValueNet(H, (3, 7)), _OldValue(H, (3, 7)), False),
    "categorical": (networks.CategoricalActor(H, 4), _OldCategorical(H, 4), False),
    "gaussian": (networks.GaussianActor(H, 3), _OldGaussian(H, 3), False),
    "squashed_state": (networks.SquashedGaussianActor(H, 3), _OldSquashed(H, 3), False),
    "squashed_scalar": (
        networks.SquashedGaussianActor(H, 3, state_std=False),
        _OldSquashed(H, 3, state_std=False),
        False,
    ),
}


def _paths(tree):
    return {
        jax.tree_util.keystr(p): np.asarray(x)
        for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def _assert_bitwise(a, b):
    pa, pb = _paths(a), _paths(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        assert pa[k].shape == pb[k].shape and pa[k].tobytes() == pb[k].tobytes(), k


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("obs_shape", [(7,), (2, 2, 3)], ids=["vector", "rank3_flattened"])
def test_mlp_networks_equal_the_old_ones_bitwise(name, obs_shape):
    """With the default torso (mlp) every network has the old parameter tree (the same
    paths, so old checkpoints load) and the same values and outputs, bit for bit."""
    new, old, takes_action = PAIRS[name]
    if obs_shape != (7,) and new.obs_cols is not None:
        obs_shape = (12,)
    obs = jax.random.normal(jax.random.key(1), (B, *obs_shape))
    args = (obs, jax.random.normal(jax.random.key(2), (B, 3))) if takes_action else (obs,)
    key = jax.random.key(3)
    p_new, p_old = new.init(key, *args), old.init(key, *args)
    _assert_bitwise(p_new, p_old)
    _assert_bitwise(new.apply(p_new, *args), old.apply(p_old, *args))


# --- torsos --------------------------------------------------------------------------

# (torso, observation) -> (features, parameters); None: the torso refuses that observation
EXPECTED = {
    ("mlp", GRID): (400, 0),
    ("mlp", IMAGE): (84 * 84 * 4, 0),
    ("mlp", VECTOR): (7, 0),
    # conv 3*3*4*16 + 16; dense 8*8*16*128 + 128
    ("minatar", GRID): (128, 592 + 131_200),
    ("minatar", IMAGE): (128, 592 + 82 * 82 * 16 * 128 + 128),
    ("minatar", VECTOR): None,
    # 8224 + 32832 + 36928 convs; 7*7*64 = 3136 into 512
    ("nature", GRID): None,
    ("nature", IMAGE): (512, 8_224 + 32_832 + 36_928 + 3_136 * 512 + 512),
    ("nature", VECTOR): None,
    # convs and residual blocks: 97,744; 84 -> 42 -> 21 -> 11 (10 -> 5 -> 3 -> 2) x 32 into 256
    ("impala", GRID): (256, 97_744 + 2 * 2 * 32 * 256 + 256),
    ("impala", IMAGE): (256, 97_744 + 11 * 11 * 32 * 256 + 256),
    ("impala", VECTOR): None,
}


def _count(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("torso,shape", sorted(EXPECTED), ids=lambda v: str(v))
def test_torso_features_and_parameter_count(torso, shape):
    """Each torso's output width and parameter count on a grid (10x10x4), an image
    (84x84x4) and a vector; a convolutional torso refuses a vector (and Nature a 10x10
    grid, under its 36-pixel minimum)."""
    expected = EXPECTED[(torso, shape)]
    reason = torsos.unfit(torso, shape)
    if expected is None:
        assert reason is not None
        return
    assert reason is None
    module = torsos.make(torso)
    obs = jax.ShapeDtypeStruct((B, *shape), jnp.float32)
    params = jax.eval_shape(module.init, jax.random.key(0), obs)
    out = jax.eval_shape(module.apply, params, obs)
    assert (out.shape, _count(params)) == ((B, expected[0]), expected[1])


def test_auto_picks_a_convolutional_torso_for_rank_3():
    assert networks.choose_torso("auto", GRID) == "minatar"
    assert networks.choose_torso("auto", (30, 40, 3)) == "minatar"  # gymnax Pong-misc
    assert networks.choose_torso("auto", (32, 32, 3)) == "nature"
    assert networks.choose_torso("auto", IMAGE) == "nature"
    assert networks.choose_torso("auto", VECTOR) == "mlp"
    assert networks.choose_torso("auto", (8, 8)) == "mlp"  # rank 2 (bsuite DeepSea)
    assert networks.choose_torso("auto", (2, 2, 3)) == "mlp"  # under minatar's 3x3
    assert networks.choose_torso("impala", GRID) == "impala"


def test_conv_torsos_refuse_asymmetric_columns():
    assert torsos.unfit("minatar", GRID, ((0, 10), None)) is not None
    assert torsos.unfit("mlp", VECTOR, ((0, 3), (3, 7))) is None


@pytest.mark.slow  # test_obs_dtype widens uint8/bool by default (the default run stays under 10 minutes)
def test_integer_observations_are_cast_inside_the_torso():
    """uint8 is scaled by 1/255, bool is 0/1, a float observation is untouched."""
    pixels = jax.random.randint(jax.random.key(0), (B, *GRID), 0, 256).astype(jnp.uint8)
    grid = pixels > 128
    for torso in ("minatar", "impala", "mlp"):
        module = torsos.make(torso)
        params = module.init(jax.random.key(1), pixels)
        scaled = module.apply(params, pixels.astype(jnp.float32) / 255.0)
        np.testing.assert_array_equal(module.apply(params, pixels), scaled)
        np.testing.assert_array_equal(
            module.apply(params, grid), module.apply(params, grid.astype(jnp.float32))
        )
    x = jnp.ones((2, 3), jnp.bfloat16)
    assert networks.as_float(x) is x


# name: (network on an image, whether it reads an action, its outputs' shapes)
IMAGE_NETS = {
    "tanh_gaussian": (networks.TanhGaussianActor(H, 3, torso="minatar"), False, [(B, 3)] * 2),
    "deterministic": (networks.DeterministicActor(H, 3, torso="impala"), False, [(B, 3)]),
    "categorical": (networks.CategoricalActor(H, 6, torso="nature"), False, [(B, 6)]),
    "gaussian": (networks.GaussianActor(H, 3, torso="minatar"), False, [(B, 3), (3,)]),
    "squashed": (networks.SquashedGaussianActor(H, 3, torso="minatar"), False, [(B, 3)] * 2),
    "value": (networks.ValueNet(H, torso="impala"), False, [(B,)]),
    "q": (networks.QEnsemble(H, 2, torso="minatar"), True, [(2, B)]),
    "c51": (networks.DistributionalQEnsemble(H, 11, 2, torso="minatar"), True, [(2, B, 11)]),
}


@pytest.mark.parametrize("name", sorted(IMAGE_NETS))
def test_networks_read_images_through_their_torso(name):
    """On ``[B, H, W, C]`` (uint8) a network's torso is its submodule ``torso``, once (a
    Q ensemble's members share it), and its head's MLP reads the torso's features (and
    the action, for a critic)."""
    net, takes_action, shapes = IMAGE_NETS[name]
    side = 84 if net.torso == "nature" else 10
    obs = jax.ShapeDtypeStruct((B, side, side, 4), jnp.uint8)
    args = (obs, jax.ShapeDtypeStruct((B, 3), jnp.float32)) if takes_action else (obs,)
    params = jax.eval_shape(net.init, jax.random.key(0), *args)["params"]
    alone = jax.eval_shape(torsos.make(net.torso).init, jax.random.key(0), obs)["params"]
    assert jax.tree.map(lambda x: x.shape, params["torso"]) == jax.tree.map(
        lambda x: x.shape, alone
    )
    features = {"minatar": 128, "nature": 512, "impala": 256}[net.torso]
    mlp = params["VmapMLP_0" if takes_action else "MLP_0"]
    assert mlp["Dense_0"]["kernel"].shape[-2] == features + (3 if takes_action else 0)
    out = jax.eval_shape(net.apply, {"params": params}, *args)
    assert [o.shape for o in jax.tree.leaves(out)] == shapes


# --- the --<algo>.torso choice ---------------------------------------------------------


CONT_GRID = EnvSpec("grid", GRID, False, 2, (-1.0, -1.0), (1.0, 1.0))
DISC_IMAGE = EnvSpec("image", IMAGE, True, 6)


def _spec(algo: str):
    return {s.name: s for s in algos.all_specs()}[algo]


def _state_shapes(algo: str, env: EnvSpec, **fields) -> dict[str, tuple[int, ...]]:
    """The fresh state of ``algo`` (its config with ``fields``) on ``env``: shape by path."""
    s = _spec(algo)
    cfg = dataclasses.replace(s.config_cls(), **fields)
    run = RunConfig(
        algo=algo, total_steps=64, num_envs=4, rollout_steps=2, grad_steps=2, batch_size=8
    )
    state = jax.eval_shape(s.make(cfg, env, run).init, jax.random.key(0))
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {jax.tree_util.keystr(k): v.shape for k, v in leaves}


def _shapes_at(shapes: dict[str, tuple[int, ...]], side: str, tail: str) -> set:
    """The shapes of the leaves of the ``side`` ('actor' or 'critic') ending in ``tail``."""
    return {v for k, v in shapes.items() if k.startswith(f".{side}") and k.endswith(tail)}


def test_every_algorithm_has_the_torso_field():
    """``torso``: default auto, a shape field, the same choices everywhere (the Literal,
    the check's list and the networks' torsos), a bad value a ConfigError naming it."""
    assert algo_spec.TORSOS == ("auto", *networks.TORSOS)
    for s in algos.all_specs():
        (f,) = [f for f in dataclasses.fields(s.config_cls) if f.name == "torso"]
        assert f.default == "auto" and "shape" in f.metadata["kinds"]
        hint = typing.get_type_hints(s.config_cls)["torso"]
        assert typing.get_args(hint) == algo_spec.TORSOS
        with pytest.raises(ConfigError) as e:
            s.validate(dataclasses.replace(s.config_cls(), torso="resnet"), f"{s.name}.", None)
        assert e.value.field == f"{s.name}.torso"


def test_auto_builds_a_conv_torso_and_explicit_mlp_flattens():
    """A grid gets MinAtar's conv in the actor and the critic, an image Nature's; an
    explicit mlp flattens the grid into the MLP (400 = 10 x 10 x 4 inputs)."""
    conv = "['torso']['Conv_0']['kernel']"
    grid = _state_shapes("sac", CONT_GRID)
    assert _shapes_at(grid, "actor", conv) == _shapes_at(grid, "critic", conv) == {(3, 3, 4, 16)}
    flat = _state_shapes("sac", CONT_GRID, torso="mlp")
    assert not any("torso" in k for k in flat)
    assert _shapes_at(flat, "actor", "['MLP_0']['Dense_0']['kernel']") == {(400, 128)}
    assert _shapes_at(flat, "critic", "['VmapMLP_0']['Dense_0']['kernel']") == {(2, 402, 128)}
    image = _state_shapes("ppo", DISC_IMAGE)
    dense = "['torso']['Dense_0']['kernel']"
    assert _shapes_at(image, "actor", dense) == _shapes_at(image, "critic", dense) == {(3136, 512)}
    impala = _state_shapes("fasttd3", CONT_GRID, torso="impala", normalize_obs=False)
    assert _shapes_at(impala, "actor", dense) == {(2 * 2 * 32, 256)}


def test_a_vector_env_keeps_the_mlp_under_auto():
    """auto on a vector observation is exactly mlp: the same state, path for path."""
    vector = EnvSpec("v", VECTOR, False, 2, (-1.0, -1.0), (1.0, 1.0))
    for s in algos.all_specs():
        auto = _state_shapes(s.name, vector)
        assert auto == _state_shapes(s.name, vector, torso="mlp")
        assert not any("torso" in k for k in auto)


def test_the_plan_refuses_a_torso_that_cannot_read_the_env():
    with pytest.raises(ConfigError) as e:
        plan(RunConfig(env="gymnax/Pendulum-v1", sac=_sac(torso="nature")), on_devices=False)
    assert e.value.field == "sac.torso" and "(3,)" in str(e.value)
    minatar = plan(RunConfig(algo="ppo", env="gymnax/Breakout-MinAtar"), on_devices=False)
    params = jax.eval_shape(minatar.make_algorithm().init, jax.random.key(0)).actor.params["params"]
    assert params["torso"]["Conv_0"]["kernel"].shape == (3, 3, 4, 16)


def _sac(**fields):
    s = {x.name: x for x in algos.all_specs()}["sac"]
    return dataclasses.replace(s.config_cls(), **fields)


# --- recurrent cells -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_recurrent_cells_reset_rows_on_episode_start(kind):
    """A row whose episode starts steps from the initial carry (as a fresh cell would),
    the others from their own; the initial carry is flax's; unroll equals stepping."""
    cell = networks.RecurrentCell(kind, 6)
    x = jax.random.normal(jax.random.key(0), (4, 3))
    carry0 = cell.initialize_carry(4)
    flax_cell = networks.CELLS[kind](6)
    flax_carry = flax_cell.initialize_carry(jax.random.key(0), (4, 3))
    _assert_bitwise(carry0, flax_carry)
    no_reset = jnp.zeros(4, bool)
    params = cell.init(jax.random.key(1), carry0, x, no_reset)
    carry1, _ = cell.apply(params, carry0, x, no_reset)  # some history: a non-zero carry
    reset = jnp.array([True, False, True, False])
    carry2, y = cell.apply(params, carry1, x, reset)
    _, y_fresh = cell.apply(params, carry0, x, no_reset)
    _, y_kept = cell.apply(params, carry1, x, no_reset)
    np.testing.assert_array_equal(y[reset], y_fresh[reset])
    np.testing.assert_array_equal(y[~reset], y_kept[~reset])
    assert not np.allclose(y_fresh, y_kept)  # the reset mattered
    xs, resets = jnp.stack([x, x, x]), jnp.stack([no_reset, reset, no_reset])
    last, ys = networks.unroll(cell, params, carry0, xs, resets)
    _, y3 = cell.apply(params, carry2, x, no_reset)
    np.testing.assert_allclose(ys[1], y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ys[2], y3, rtol=1e-6, atol=1e-6)
    assert jax.tree.map(jnp.shape, last) == jax.tree.map(jnp.shape, carry0)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_recurrent_network_unrolls_and_differentiates_as_flax_cell_stepped_by_hand(kind):
    """RecurrentNet's cell (input projections before the loop, a hand-written gradient)
    against flax's cell stepped one step at a time with the same parameters (autodiff):
    the carries after each step, the last carry, and the gradients of a loss reading all
    of them w.r.t. the cell's parameters, the starting carry and the cell's inputs, with
    resets inside the sequence; acting (T = 1) is the first step. The parameter tree is
    flax's cell's."""
    T, B, D, F = 5, 3, 4, 6
    net = networks.RecurrentNet("value", (5,), 1, kind, F)
    k = jax.random.split(jax.random.key(2), 5)
    obs = jax.random.normal(k[0], (T, B, D))
    resets = jnp.array([[0, 0, 1], [1, 0, 0], [0, 0, 0], [0, 1, 1], [0, 0, 0]], bool)
    params = net.init(k[1], net.initialize_carry(1), obs[:1, :1], resets[:1, :1])
    flax_cell = networks.CELLS[kind](F)
    flax_params = flax_cell.init(k[1], flax_cell.initialize_carry(k[1], (1, D)), obs[0, :1])
    assert jax.tree.structure(params["params"]["memory"]["cell"]["cell"]) == jax.tree.structure(
        flax_params["params"]
    )
    carry = jax.tree.map(lambda c: jax.random.normal(k[2], c.shape), net.initialize_carry(B))
    weights = jax.random.normal(k[3], (T, B, F))

    def by_hand(p, carry, xs):  # the torso is a flatten: the cell reads obs itself
        cell = {"params": p["params"]["memory"]["cell"]["cell"]}
        carries = []
        for t in range(xs.shape[0]):
            carry = jax.tree.map(lambda c: jnp.where(resets[t][:, None], 0.0, c), carry)
            carry, _ = flax_cell.apply(cell, carry, xs[t])
            carries.append(carry)
        return carry, jax.tree.map(lambda *c: jnp.stack(c), *carries)

    def network(p, carry, xs):
        last, _, carries = net.apply(p, carry, xs, resets)
        return last, carries

    def loss(fn):
        def f(p, carry, xs):
            last, carries = fn(p, carry, xs)
            return sum(jnp.sum(c * weights) for c in jax.tree.leaves(carries)) + sum(
                jnp.sum(c**2) for c in jax.tree.leaves(last)
            )

        return f

    @jax.jit  # one program (op by op, the hand loop's gradient is slow to dispatch)
    def both(params, carry, obs):
        grad = lambda fn: jax.grad(loss(fn), argnums=(0, 1, 2))(params, carry, obs)
        first = by_hand(params, carry, obs[:1])[0]
        acted = net.apply(params, carry, obs[:1], resets[:1])[0]
        return (by_hand(params, carry, obs), grad(by_hand), first), (
            network(params, carry, obs),
            grad(network),
            acted,
        )

    (hand, g_hand, first), (ours, g_net, acted) = both(params, carry, obs)
    tol = dict(rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(hand), jax.tree.leaves(ours), strict=True):
        np.testing.assert_allclose(a, b, **tol)
    g_net = (g_net[0]["params"]["memory"], *g_net[1:])  # the head's gradients are zero
    g_hand = (g_hand[0]["params"]["memory"], *g_hand[1:])
    assert jax.tree.structure(g_hand) == jax.tree.structure(g_net)
    for a, b in zip(jax.tree.leaves(g_hand), jax.tree.leaves(g_net), strict=True):
        assert np.abs(np.asarray(a)).max() > 0  # every gradient reaches its leaf
        np.testing.assert_allclose(a, b, **tol)
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(acted), strict=True):
        np.testing.assert_allclose(a, b, **tol)
