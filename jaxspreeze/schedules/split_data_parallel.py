"""The two-device split composed with data parallelism (``--placement split-data``).

With 2k devices over all processes, k carry the actor side and k the critic side
(:func:`jaxspreeze.setup.devices.split_data_parallel`), and each side is data-parallel over its
k devices. Shard i is a pair of devices in one process: actor device i steps the shard's
``num_envs / k`` envs and keeps its observation-only replay rows, critic device i keeps the
shard's ``buffer_size / k`` replay rows; each update samples ``batch_size / k`` rows from
every shard and averages its gradients over the k devices of its side (one all-reduce per
gradient step, inside that side's program). The packed transfers of
:class:`~jaxspreeze.schedules.split.Split` (rollout + actor view + key one way, the critic
view the other) go from each device to its pair only.

It is :class:`Split`'s host-dispatched iteration (the same per-seed pieces, transfers and
staleness rule), each piece a ``shard_map`` over its side's mesh of one shard's ``vmap``
over seeds, traced under :func:`~jaxspreeze.algos.common.data_parallel` with the shard
keys of :class:`~jaxspreeze.schedules.iteration.Shards`, as :class:`DataParallel` traces its fused
chunk: so split-data over 2k devices computes what data-parallel over k devices computes
from the same seed and global sizes (bitwise where XLA compiles the pieces alike, as the
split equals the fused chunk).

The state has :class:`DataParallel`'s global layout (so its checkpoints are alike): the
actor, key and counters replicated over the actor mesh with the envs and the
observation-only rows split over it (axis 1), the critic replicated over the critic mesh
with the replay rows split over it. Values passed between pieces that differ per shard
(the packed transfers, each shard's keys) carry a leading shard axis ``[k, ...]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxspreeze.algos import common
from jaxspreeze.algos.base import AgentState
from jaxspreeze.core.errors import PlacementError
from jaxspreeze.core.types import DATA_AXIS, PyTree
from jaxspreeze.schedules.base import chunking
from jaxspreeze.schedules.data_parallel import (
    DEBUG_ENV,
    agreement,
    bind_shard,
    global_abstract,
    lay_out,
    spec_of,
    state_layout,
)
from jaxspreeze.schedules.iteration import Iteration, Metrics, Shards, TrainState, reduce_metrics
from jaxspreeze.schedules.split import ACTOR, CRITIC, METRICS, SHARD, Split

PER_SHARD = P(DATA_AXIS)  # a value per shard, stacked on a leading axis


def side_of(state: TrainState, side: str) -> TrainState:
    """``state`` with only ``side``'s parts (the other side's are None)."""
    if side == ACTOR:
        return state._replace(agent=AgentState(state.agent.actor, None), buffer=None)
    return TrainState(AgentState(None, state.agent.critic), None, state.buffer, *[None] * 5)


def join(actor: TrainState, critic: TrainState) -> TrainState:
    """The state whose actor side is ``actor``'s and critic side ``critic``'s."""
    return actor._replace(agent=AgentState(actor.agent.actor, critic.agent.critic),
                          buffer=critic.buffer)  # fmt: skip


class _Lowered(NamedTuple):
    """A lowered piece and its outputs' shapes with their layouts (``out_info``)."""

    lowered: jax.stages.Lowered
    out_info: PyTree

    def compile(self) -> jax.stages.Compiled:
        return self.lowered.compile()


def _per_shard(spec: Any) -> bool:
    """True for the partition spec of a per-shard value (leading shard axis)."""
    return isinstance(spec, P) and len(spec) > 0 and spec[0] == DATA_AXIS


@dataclass(eq=False)
class SplitDataParallel(Split):
    """:class:`Split` with each side data-parallel over ``placement.mesh`` (actor) and
    ``placement.critic_mesh`` (critic), device i of one paired with device i of the other.

    ``check_replicas``: after every chunk, check that each side's replicated state is
    bitwise the same on all of its devices (default: ``JAXSPREEZE_DEBUG=1``).
    """

    check_replicas: bool | None = None

    def __post_init__(self) -> None:
        cfg = self._take_plan()
        p = self.placement
        if p.mesh is None or p.critic_mesh is None:
            raise PlacementError(
                "the split-data schedule needs an actor and a critic mesh "
                "(devices.split_data_parallel())"
            )
        actor, critic = list(p.mesh.devices.flat), list(p.critic_mesh.devices.flat)
        if len(actor) != len(critic):
            raise PlacementError(f"{len(actor)} actor-side but {len(critic)} critic-side devices")
        if any(a.process_index != c.process_index for a, c in zip(actor, critic, strict=True)):
            raise PlacementError("split-data pairs devices of one process (their transfers)")
        if self.check_replicas is None:
            self.check_replicas = os.environ.get(DEBUG_ENV, "") not in ("", "0")
        self.shards = k = len(actor)
        self.meshes = {ACTOR: p.mesh, CRITIC: p.critic_mesh}
        # for each destination side: source device -> its pair
        self.pairs = {CRITIC: dict(zip(actor, critic, strict=True)),
                      ACTOR: dict(zip(critic, actor, strict=True))}  # fmt: skip
        shard, self.env, self.algo = bind_shard(self.plan, k, self.algo)
        self.shard_cfg = shard.cfg
        self.data = Shards((DATA_AXIS,), (k,))
        self.per_seed = Iteration(
            self.algo,
            self.env,
            cfg.rollout_steps,
            self.shard_cfg.buffer_size,
            self.plan.warmup_steps // k,
            obs_buffer=True,
            shards=self.data,
        )
        self.iterations_per_chunk, self.num_chunks = chunking(self.plan)
        self.layout = state_layout(self.init_abstract())
        on = lambda mesh: jax.tree.map(lambda sh: NamedSharding(mesh, spec_of(sh)), self.layout)
        self.shardings = join(on(p.mesh), on(p.critic_mesh))
        self._inits: dict[str, Any] | None = None
        self._agree: dict[str, Any] = {}
        self._split_init()

    # ------------------------------------------------------------ onto the two meshes
    def _abstract(self, tree: PyTree, side: str) -> PyTree:
        """Abstract arrays like ``tree`` (laid out on a mesh) laid out alike on ``side``'s."""
        mesh = self.meshes[side]
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=NamedSharding(mesh, x.sharding.spec)
            ),
            tree,
        )

    def _lower(
        self,
        fn: Callable[..., Any],
        side: str,
        args: tuple[PyTree, ...],
        outs: Any,
        donate: tuple[int, ...] = (),
    ) -> Any:
        """``fn`` (one seed) vmapped over seeds, as one shard of ``side``'s mesh, lowered.

        Arguments come laid out (the state's layout, or per shard); ``outs`` names each
        output's layout (:meth:`Split._lower`; a partition-spec tree is taken as it is).
        """
        args = tuple(self._abstract(a, side) for a in args)
        in_specs = tuple(jax.tree.map(lambda x: x.sharding.spec, a) for a in args)
        stacked = tuple(jax.tree.map(lambda x: _per_shard(x.sharding.spec), a) for a in args)
        single = type(outs) is not tuple  # (a NamedTuple of specs is one output)
        kinds = (outs,) if single else outs
        out_specs = tuple(
            in_specs[o] if isinstance(o, int)
            else PER_SHARD if o == SHARD
            else P() if o == METRICS
            else o
            for o in kinds
        )  # fmt: skip
        shards = self.data

        def on_shard(*xs: PyTree) -> Any:
            xs = tuple(
                jax.tree.map(lambda x, st: x[0] if st else x, x, st)
                for x, st in zip(xs, stacked, strict=True)
            )
            with common.data_parallel(shards.axes):
                out = jax.vmap(fn)(*xs)
                out = (out,) if single else tuple(out)
                out = tuple(
                    reduce_metrics(o, shards) if kind == METRICS
                    else jax.tree.map(lambda x: x[None], o) if kind == SHARD
                    else o
                    for o, kind in zip(out, kinds, strict=True)
                )  # fmt: skip
            return out[0] if single else out

        on_shard.__name__ = getattr(fn, "__name__", "piece")  # compile logs name the piece
        mesh = self.meshes[side]
        out_specs = out_specs[0] if single else out_specs
        mapped = jax.shard_map(
            on_shard,
            mesh=mesh,
            in_specs=in_specs,
            out_specs=out_specs,
            check_vma=False,  # as in DataParallel: the optimisers' mean is the only collective
        )
        lowered = jax.jit(mapped, donate_argnums=donate).lower(*args)
        # the outputs' layouts, for lowering the pieces that take them
        laid_out = lambda spec, tree: jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec)),
            tree,
        )
        return _Lowered(lowered, jax.tree.map(laid_out, out_specs, lowered.out_info))

    def _transfer(self, tree: PyTree, side: str) -> PyTree:
        """``tree`` (laid out on the other side's mesh) copied device to paired device."""
        pairs, mesh = self.pairs[side], self.meshes[side]

        def move(x: jax.Array) -> jax.Array:
            shards = x.addressable_shards
            moved = jax.device_put([s.data for s in shards], [pairs[s.device] for s in shards])
            sharding = NamedSharding(mesh, x.sharding.spec)
            return jax.make_array_from_single_device_arrays(x.shape, sharding, moved)

        return jax.tree.map(move, tree)

    def _to_critic(self, tree: PyTree) -> PyTree:
        return self._transfer(tree, CRITIC)

    def _to_actor(self, tree: PyTree) -> PyTree:
        return self._transfer(tree, ACTOR)

    # ------------------------------------------------------------ the schedule API
    def init_abstract(self) -> TrainState:
        """The global shapes and dtypes of :meth:`init`'s state; nothing is allocated."""
        return global_abstract(self.per_seed, self.shards, self.cfg.slots)

    def _key_data(self, data: np.ndarray, side: str) -> jax.Array:
        """Raw key data ``[S, 2]``, replicated over ``side``'s mesh."""
        replicated = NamedSharding(self.meshes[side], P())
        return jax.make_array_from_callback(data.shape, replicated, lambda i: data[i])

    def init(self, seed: int | None = None) -> TrainState:
        """A fresh state for all seeds (seed i uses ``cfg.seed + i``), each side on its mesh.

        Each side initialises its own parts (the same values: the agent's key is shared),
        so nothing is built on one side to be copied to the other.
        """
        data = np.asarray(jax.random.key_data(self._keys(seed)))
        if self._inits is None:
            specs = jax.tree.map(spec_of, self.layout)
            self._inits = {}
            for side in (ACTOR, CRITIC):

                def init(kd: jax.Array, side: str = side) -> TrainState:
                    return side_of(self.per_seed.init(jax.random.wrap_key_data(kd)), side)

                init.__name__ = f"split_data_init_{side}"
                low = self._lower(init, side, (self._key_data(data, side),), side_of(specs, side))
                self._inits[side] = low.compile()
        parts = [self._inits[s](self._key_data(data, s)) for s in (ACTOR, CRITIC)]
        return join(*parts)

    def place(self, state: TrainState) -> TrainState:
        """Lay ``state`` (global values, e.g. a restored checkpoint) out over both meshes.

        As :meth:`DataParallel.place`: leaves already laid out are kept; host values must
        be the same in every process.
        """
        return jax.tree.map(lay_out, state, self.shardings, self.init_abstract())

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations dispatched from the host (:meth:`Split.chunk`) on every pair of
        devices; metrics ``[K, S]`` replicated. Waits only with ``check_replicas``."""
        state, metrics = super().chunk(state)
        if self.check_replicas:
            self.assert_replicas_agree(state)
        return state, metrics

    # ------------------------------------------------------------ replicas
    def replicas_agree(self, state: TrainState) -> dict[str, bool]:
        """For each side: is its replicated state (the actor, key and counters; the critic)
        bitwise the same on all of its devices (waits for ``state``)."""
        out = {}
        for side in (ACTOR, CRITIC):
            part, layout = side_of(state, side), side_of(self.layout, side)
            replicated = jax.tree.map(lambda x, sh: None if sh else x, part, layout)
            if side not in self._agree:
                self._agree[side] = agreement(self.meshes[side], replicated)
            out[side] = bool(self._agree[side](replicated))
        return out

    def assert_replicas_agree(self, state: TrainState) -> None:
        """RuntimeError unless both sides' replicas agree (the data-parallel invariant)."""
        agree = self.replicas_agree(state)
        if not all(agree.values()):
            bad = " and ".join(side for side, ok in agree.items() if not ok)
            raise RuntimeError(
                f"split-data replicas diverged on the {bad} side: its parameters are no "
                "longer the same on every device (an update that is not averaged?)"
            )
