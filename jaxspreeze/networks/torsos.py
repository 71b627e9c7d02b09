"""Torsos: an observation ``[B, ...]`` to features ``[B, F]``, and the MLP.

A torso is the first part of every network (:mod:`jaxspreeze.networks`); the head (the
``hidden`` MLP and the output layers, :mod:`~jaxspreeze.networks.heads`) reads its
features. :data:`TORSOS` are the choices (``--<algo>.torso``):

- ``mlp``: :class:`Flatten`, no parameters: the observation's columns ``obs_cols``,
  flattened to ``[B, D]``, so the whole network is the head's MLP (every network before
  torsos existed, parameter for parameter).
- ``minatar``: :class:`MinAtarCNN`, for small grids (MinAtar's 10x10xC): one 3x3 conv of
  16 channels, stride 1, then a dense layer of 128 (Young & Tian, 2019).
- ``nature``: :class:`NatureCNN`, for images (Atari's 84x84x4): 32 8x8/4, 64 4x4/2,
  64 3x3/1, then a dense layer of 512 (Mnih et al., 2015).
- ``impala``: :class:`ImpalaCNN`: stages of 16, 32, 32 channels (a 3x3 conv, a 3x3
  max-pool of stride 2, two residual blocks each), then a dense layer of 256 (Espeholt et
  al., 2018).

``auto`` (:func:`choose`): an observation of rank 3 ``(H, W, C)`` gets ``minatar`` when
``min(H, W) < 32`` and ``nature`` otherwise; any other rank gets ``mlp`` (as does an
image under 3 a side, too small for ``minatar``). The
convolutional torsos read ``[B, H, W, C]`` (VALID padding, except IMPALA's SAME) and end
in a ReLU. Every torso, and the :class:`MLP`, casts its input to float32 first
(:func:`as_float`): observations are kept in the env's own dtype (``EnvSpec.obs_dtype``:
a bool or uint8 grid stays one byte a value in the replay buffer, the rollouts and the
transfers) and are widened only here, at the network's input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxspreeze.core.types import Columns

AUTO = "auto"
IMAGE_SIDE = 32  # auto: a rank-3 observation with min(H, W) below this is a grid (minatar)


def as_float(obs: jax.Array) -> jax.Array:
    """``obs`` as float32: uint8 scaled by 1/255 (pixels to [0, 1]), bool to 0/1, other
    integers as they are; a float observation is returned unchanged (not even cast)."""
    if jnp.issubdtype(obs.dtype, jnp.floating):
        return obs
    x = obs.astype(jnp.float32)
    return x / 255.0 if obs.dtype == jnp.uint8 else x


def flat(obs: jax.Array, cols: Columns | None) -> jax.Array:
    """``obs [B, ...] -> [B, D]``, then its columns ``cols`` (all when None)."""
    x = obs.reshape(obs.shape[0], -1)
    return x if cols is None else x[:, cols[0] : cols[1]]


class MLP(nn.Module):
    """Dense layers with ReLU between them; ``out`` adds a final linear layer.

    ``layer_norm``: a LayerNorm after every hidden Dense, before its ReLU (off: the
    parameters are exactly the plain MLP's). A non-float input (an observation in its own
    dtype) is widened first (:func:`as_float`); a float one is read as it is."""

    hidden: Sequence[int]
    out: int | None = None
    out_scale: float = 1.0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """``[B, in] -> [B, hidden[-1] or out]``."""
        x = as_float(x)
        for width in self.hidden:
            x = nn.Dense(width)(x)
            x = nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)
        if self.out is not None:
            init = nn.initializers.variance_scaling(self.out_scale, "fan_avg", "uniform")
            x = nn.Dense(self.out, kernel_init=init)(x)
        return x


class Flatten(nn.Module):
    """The ``mlp`` torso: the observation's columns ``cols``, flattened (no parameters)."""

    cols: Columns | None = None  # the observation columns it reads (None: all)

    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, ...] -> [B, D]`` (D: the columns' width)."""
        return flat(as_float(obs), self.cols)


def _image(obs: jax.Array) -> jax.Array:
    """``obs [B, H, W, C]`` as float32 (:func:`as_float`)."""
    if obs.ndim != 4:
        raise ValueError(f"a convolutional torso reads [B, H, W, C], got shape {obs.shape}")
    return as_float(obs)


def _dense_relu(x: jax.Array, features: int) -> jax.Array:
    """Flatten ``[B, ...]``, then a Dense of ``features`` and a ReLU."""
    return nn.relu(nn.Dense(features)(x.reshape(x.shape[0], -1)))


class MinAtarCNN(nn.Module):
    """The ``minatar`` torso: one 3x3 conv (16 channels, stride 1, VALID), a ReLU, then a
    dense layer of 128 (MinAtar's DQN)."""

    channels: int = 16
    features: int = 128
    min_side: ClassVar[int] = 3  # H and W it needs (the 3x3 VALID conv)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, H, W, C] -> [B, features]``."""
        x = nn.relu(nn.Conv(self.channels, (3, 3), strides=1, padding="VALID")(_image(obs)))
        return _dense_relu(x, self.features)


class NatureCNN(nn.Module):
    """The ``nature`` torso (DQN's): 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1
    (VALID, each with a ReLU), then a dense layer of 512."""

    features: int = 512
    min_side: ClassVar[int] = 36  # H and W it needs (84 -> 20 -> 9 -> 7; 36 -> 8 -> 3 -> 1)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, H, W, C] -> [B, features]``."""
        x = _image(obs)
        for channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            conv = nn.Conv(channels, (kernel, kernel), strides=stride, padding="VALID")
            x = nn.relu(conv(x))
        return _dense_relu(x, self.features)


class ResidualBlock(nn.Module):
    """IMPALA's residual block: ``x + conv(relu(conv(relu(x))))``, 3x3 convs, SAME."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """``[B, H, W, C] -> [B, H, W, C]``."""
        channels = x.shape[-1]
        y = nn.Conv(channels, (3, 3), padding="SAME")(nn.relu(x))
        y = nn.Conv(channels, (3, 3), padding="SAME")(nn.relu(y))
        return x + y


class ImpalaCNN(nn.Module):
    """The ``impala`` torso (IMPALA's ResNet): per stage a 3x3 conv (SAME), a 3x3 max-pool
    of stride 2 (SAME) and ``blocks`` residual blocks; then a ReLU and a dense layer of 256.
    84x84 ends as 11x11x32."""

    stages: Sequence[int] = (16, 32, 32)
    blocks: int = 2
    features: int = 256
    min_side: ClassVar[int] = 1  # SAME padding: any size

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """``obs [B, H, W, C] -> [B, features]``."""
        x = _image(obs)
        for channels in self.stages:
            x = nn.Conv(channels, (3, 3), padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for _ in range(self.blocks):
                x = ResidualBlock()(x)
        return _dense_relu(nn.relu(x), self.features)


# the torsos by their --<algo>.torso name (besides "auto", which picks one of them)
TORSOS: dict[str, type[nn.Module]] = {
    "mlp": Flatten,
    "minatar": MinAtarCNN,
    "nature": NatureCNN,
    "impala": ImpalaCNN,
}
CONVOLUTIONAL = ("minatar", "nature", "impala")


def choose(name: str, obs_shape: tuple[int, ...]) -> str:
    """The torso ``name`` means for observations of ``obs_shape`` (one, unbatched):
    ``auto`` is ``minatar`` for a rank-3 shape with ``min(H, W) < 32``, ``nature`` for a
    larger rank-3 one and ``mlp`` otherwise (and for a rank-3 shape too small for
    ``minatar``'s 3x3 conv); any other name is itself."""
    if name != AUTO:
        return name
    if len(obs_shape) != 3 or min(obs_shape[:2]) < MinAtarCNN.min_side:
        return "mlp"
    return "minatar" if min(obs_shape[:2]) < IMAGE_SIDE else "nature"


def unfit(name: str, obs_shape: tuple[int, ...], cols: Sequence[Columns | None] = ()) -> str | None:
    """Why torso ``name`` cannot read observations of ``obs_shape`` (None when it can).

    ``cols``: the column slices the networks read (asymmetric observations); a
    convolutional torso reads the whole image, so it refuses them."""
    chosen = choose(name, obs_shape)
    if chosen not in TORSOS:
        return f"unknown torso {name!r}; choose one of {', '.join((AUTO, *TORSOS))}"
    if chosen not in CONVOLUTIONAL:
        return None
    if len(obs_shape) != 3:
        return (
            f"the {chosen} torso reads images (H, W, C); the observation's shape is "
            f"{obs_shape}: use mlp (or auto)"
        )
    if any(c is not None for c in cols):
        return f"the {chosen} torso reads the whole image: asymmetric observation columns need mlp"
    side = TORSOS[chosen].min_side
    if min(obs_shape[:2]) < side:
        return (
            f"the {chosen} torso needs H and W of at least {side}, the observation is {obs_shape}"
        )
    return None


def make(torso: str, cols: Columns | None = None, **kwargs: Any) -> nn.Module:
    """The torso module ``torso`` (a resolved name, not ``auto``) reading the columns
    ``cols`` (only ``mlp`` reads columns). ``kwargs`` go to the module (``name``: its
    scope in a network)."""
    if torso not in TORSOS:
        raise ValueError(f"unknown torso {torso!r}; choose one of {', '.join(TORSOS)}")
    if torso == "mlp":
        return Flatten(cols, **kwargs)
    if cols is not None:
        raise ValueError(f"the {torso} torso reads the whole image, not the columns {cols}")
    return TORSOS[torso](**kwargs)


def encode(torso: str, obs: jax.Array, cols: Columns | None) -> jax.Array:
    """``obs [B, ...] -> features [B, F]`` through the torso ``torso`` (resolved), made as
    the submodule ``torso`` of the network whose compact method calls this (``mlp`` has
    no parameters, so a network's tree gains nothing from it)."""
    return make(torso, cols, name="torso")(obs)
