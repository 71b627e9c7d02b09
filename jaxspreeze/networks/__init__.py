"""Networks (flax linen): a torso, then a head. Batch shapes are ``[B, ...]``.

Every network reads its observation through a *torso* (:mod:`.torsos`: observation ->
features ``[B, F]``) and gives the features to its *head* (:mod:`.heads`: the ``hidden``
MLP and the output layers of one kind of network). The composed networks are the actors
(:mod:`.actors`) and the critics (:mod:`.critics`); a recurrent cell
(:mod:`.recurrent`) plugs in between torso and head: :class:`RecurrentNet` (the same module),
PPO's ``--ppo.memory``.

The torso is a network's ``torso`` field, a name of :data:`TORSOS` resolved from the
algorithm's ``--<algo>.torso`` (``auto`` by :func:`choose_torso`: convolutional for a
rank-3 observation, ``mlp`` otherwise). ``mlp`` flattens the observation to ``[B, D]`` and
reads the columns ``obs_cols`` of it (``(start, stop)``; None: all): with asymmetric
observations the env observes the actor's part and the critic's part side by side
(:attr:`~jaxspreeze.core.types.EnvSpec.actor_obs`, ``critic_obs``) and each network sees only
its own, so its first layer is as wide as its part. With ``mlp`` a network's parameters
are the MLP it always was (the same tree, the same values for the same key).
"""

from __future__ import annotations

from jaxspreeze.networks.actors import (
    CategoricalActor,
    DeterministicActor,
    GaussianActor,
    SquashedGaussianActor,
    TanhGaussianActor,
    action_scale,
    tanh_gaussian_sample,
)
from jaxspreeze.networks.critics import (
    DiscreteQNet,
    DistributionalQEnsemble,
    QEnsemble,
    ValueNet,
)
from jaxspreeze.networks.heads import LOG_STD_MAX, LOG_STD_MIN
from jaxspreeze.networks.recurrent import (
    CELLS,
    RecurrentCell,
    RecurrentNet,
    RecurrentQNet,
    initial_carry,
    unroll,
)
from jaxspreeze.networks.torsos import (
    MLP,
    TORSOS,
    Flatten,
    ImpalaCNN,
    MinAtarCNN,
    NatureCNN,
    as_float,
)
from jaxspreeze.networks.torsos import choose as choose_torso
from jaxspreeze.networks.torsos import unfit as torso_unfit

__all__ = [
    "CELLS",
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "MLP",
    "TORSOS",
    "CategoricalActor",
    "DeterministicActor",
    "DiscreteQNet",
    "DistributionalQEnsemble",
    "Flatten",
    "GaussianActor",
    "ImpalaCNN",
    "MinAtarCNN",
    "NatureCNN",
    "QEnsemble",
    "RecurrentCell",
    "RecurrentNet",
    "RecurrentQNet",
    "SquashedGaussianActor",
    "TanhGaussianActor",
    "ValueNet",
    "action_scale",
    "as_float",
    "choose_torso",
    "initial_carry",
    "tanh_gaussian_sample",
    "torso_unfit",
    "unroll",
]
