"""Data parallelism: the fused chunk on every device of a mesh, gradients averaged.

The run's global sizes are split evenly over D shards: ``--num-envs``, ``--batch-size``
and ``--buffer-size`` (and ``learning_starts``, ``total_steps``) are for the whole run,
and each shard steps ``num_envs / D`` envs, keeps ``buffer_size / D`` replay rows and
samples ``batch_size / D`` of every update's batch from them. Each shard runs the same
per-seed :class:`~jaxspreeze.schedules.iteration.Iteration` as the one-device schedule, traced
under :func:`~jaxspreeze.algos.common.data_parallel`: every optimiser averages its
gradients over the shards (one all-reduce per gradient step, inside the compiled chunk),
so the parameters stay the same on every device. A chunk is one program:
``shard_map(scan(vmap(iteration)))`` over the mesh's ``"data"`` axis, the state donated.

The state has the one-device shapes of the global sizes: the agent, the key and the
counters are replicated on every device; the envs ``[S, N, ...]`` and the replay rows
``[S, C, ...]`` are sharded along axis 1 (device i holds envs ``i*N/D ... (i+1)*N/D``).
With ``shards`` a multiple of the devices, each device carries several shards (vmapped,
with the collectives over both axes): D shards on one device compute what D devices do,
to float rounding, which is how the tests compare data-parallel with one device.

Shard d's random keys are the one-device keys folded with d; the agent's init key is
shared. So a D-shard run is not the one-device run of the same global sizes sample for
sample (each shard samples its own rows); its updates average the same number of
samples. Multi-seed runs vmap the seeds inside every shard.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxspreeze.algos import common
from jaxspreeze.algos.base import AgentState, Algorithm
from jaxspreeze.core.errors import ConfigError, PlacementError
from jaxspreeze.core.types import DATA_AXIS, PyTree
from jaxspreeze.data import replay
from jaxspreeze.envs import VecEnv, make_env
from jaxspreeze.schedules.base import DeviceSchedule, chunking
from jaxspreeze.schedules.iteration import Iteration, Metrics, Shards, TrainState, reduce_metrics
from jaxspreeze.setup.plan import RunPlan, shard_plan

LOCAL_AXIS = "local"  # the vmapped axis of the shards one device carries (shards > devices)
DEBUG_ENV = "JAXSPREEZE_DEBUG"  # "1": check after every chunk that all replicas agree


def bind_shard(
    plan: RunPlan, shards: int, algo: Algorithm | None
) -> tuple[RunPlan, VecEnv, Algorithm]:
    """One shard's plan, envs and algorithm (bound to the shard's sizes) of ``shards``.

    ConfigError when the global sizes do not split evenly, or when the algorithm refuses
    one shard's sizes (the message then says they are per device).
    """
    spec, cfg = plan.algo_spec, plan.cfg
    shard = shard_plan(plan, shards)
    shard_cfg = shard.cfg
    env = make_env(cfg.env, shard_cfg.num_envs, cfg.obs_keys)  # one shard's envs
    if algo is None:
        try:
            spec.validate(plan.algo_config, f"{spec.name}.", shard_cfg)
        except ConfigError as e:  # the shard's sizes: say so
            message = str(e).removeprefix(f"{e.field}: ")
            raise ConfigError(
                e.field, f"{message} (per device, data-parallel over {shards})"
            ) from None
        algo = spec.make(plan.algo_config, env.spec, shard_cfg)
    elif shards > 1:
        raise ValueError(
            "a data-parallel schedule binds the algorithm to one shard's sizes; "
            "pass algo=None (custom algorithms: bind them to shard_plan(plan, shards).cfg)"
        )
    return shard, env, algo


def global_abstract(per_seed: Iteration, shards: int, num_seeds: int) -> TrainState:
    """The global shapes of the state of ``shards`` shards of ``per_seed`` (all seeds):
    one shard's, with the envs and replay rows (axis 1) of all shards."""
    one_shard = dataclasses.replace(per_seed, shards=None)  # same shapes, no axes
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), num_seeds))
    s = jax.eval_shape(jax.vmap(one_shard.init), keys)
    rows = lambda x: jax.ShapeDtypeStruct((x.shape[0], x.shape[1] * shards, *x.shape[2:]), x.dtype)
    buffers = [
        None if b is None else b._replace(data=jax.tree.map(rows, b.data))
        for b in (s.buffer, s.obs_buffer)
    ]
    return s._replace(env=jax.tree.map(rows, s.env), buffer=buffers[0], obs_buffer=buffers[1])


def spec_of(sharded: bool) -> P:
    """The partition spec of a state leaf: envs and replay rows split along axis 1."""
    return P(None, DATA_AXIS) if sharded else P()


def agreement(mesh: jax.sharding.Mesh, replicated: PyTree) -> Callable[[PyTree], jax.Array]:
    """A jitted check that trees shaped like ``replicated`` (replicated over ``mesh``) are
    bitwise the same on every device: True or False, one small collective."""
    specs = jax.tree.map(lambda _: P(), replicated)

    def agree(tree: PyTree) -> jax.Array:
        fp = _fingerprint(tree)
        return jax.lax.pmax(fp, DATA_AXIS) == jax.lax.pmin(fp, DATA_AXIS)

    return jax.jit(
        jax.shard_map(agree, mesh=mesh, in_specs=(specs,), out_specs=P(), check_vma=False)
    )


def state_layout(state: TrainState) -> TrainState:
    """True for the leaves sharded along axis 1 (envs, replay rows), False if replicated."""
    rep = lambda tree: jax.tree.map(lambda _: False, tree)
    shd = lambda tree: jax.tree.map(lambda _: True, tree)
    buffers = [
        None if b is None else replay.ReplayState(shd(b.data), False, False)
        for b in (state.buffer, state.obs_buffer)
    ]
    return TrainState(rep(state.agent), shd(state.env), *buffers, False, False, False, False)


def _fingerprint(tree: PyTree) -> jax.Array:
    """A uint32 hash of the bits of every leaf (equal trees, equal hashes)."""
    total = jnp.zeros((), jnp.uint32)
    for x in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        x = x.reshape(-1)
        bits = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}.get(x.dtype.itemsize)
        if x.dtype == bool:
            x = x.astype(jnp.uint32)
        elif bits is None:  # 8-byte leaves: as pairs of 32-bit words
            x = jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(-1)
        else:
            x = jax.lax.bitcast_convert_type(x, bits).astype(jnp.uint32)
        weights = jnp.arange(x.shape[0], dtype=jnp.uint32) * jnp.uint32(2654435761) + 1
        total = total * jnp.uint32(31) + jnp.sum(x * weights, dtype=jnp.uint32)
    return total


@dataclass(eq=False)
class DataParallel(DeviceSchedule):
    """The fused chunk over every device of ``placement.mesh``, gradients averaged.

    ``shards``: data-parallel shards (default: one per device; a multiple of the
    devices). ``check_replicas``: after every chunk, check that the replicated state
    (agent, key, counters) is bitwise the same on every device (default: the
    ``JAXSPREEZE_DEBUG=1`` environment variable); costs a host wait per chunk.
    """

    split: ClassVar[bool] = False

    shards: int | None = None
    check_replicas: bool | None = None

    def __post_init__(self) -> None:
        cfg = self._take_plan()
        mesh = self.placement.mesh
        if mesh is None:
            raise PlacementError("the data-parallel schedule needs a placement with a mesh")
        devices = mesh.devices.size
        self.shards = devices if self.shards is None else self.shards
        if self.shards < 1 or self.shards % devices:
            raise PlacementError(
                f"shards ({self.shards}) must be a positive multiple of the mesh's {devices} devices"
            )
        if self.check_replicas is None:
            self.check_replicas = os.environ.get(DEBUG_ENV, "") not in ("", "0")
        local = self.shards // devices
        self.local_shards = local
        self.mesh = mesh
        shard, self.env, self.algo = bind_shard(self.plan, self.shards, self.algo)
        self.shard_cfg = shard_cfg = shard.cfg
        axes, sizes = ((DATA_AXIS,), (devices,)) if local == 1 else (
            (DATA_AXIS, LOCAL_AXIS), (devices, local)
        )  # fmt: skip
        self.data = Shards(axes, sizes)
        self.per_seed = Iteration(
            self.algo,
            self.env,
            cfg.rollout_steps,
            shard_cfg.buffer_size,
            self.plan.warmup_steps // self.shards,
            obs_buffer=False,
            shards=self.data,
        )
        self.iterations_per_chunk, self.num_chunks = chunking(self.plan)
        abstract = self.init_abstract()
        self.layout = state_layout(abstract)
        self.shardings = jax.tree.map(
            lambda sharded: NamedSharding(mesh, spec_of(sharded)), self.layout
        )
        self._init = jax.jit(self._sharded(self._shard_init, keys_in=True))
        self._chunk: Any = None
        self._agree: Any = None

    # ------------------------------------------------------------ one shard, all seeds
    def _shard_init(self, key_data: jax.Array) -> TrainState:
        """One shard's fresh state for all seeds (keys as raw ``[S, 2]`` key data)."""
        return jax.vmap(self.per_seed.init)(jax.random.wrap_key_data(key_data))

    def _shard_chunk(self, s: TrainState) -> tuple[TrainState, Metrics]:
        """K iterations of one shard (all seeds), the metrics those of all shards."""

        def step(s: TrainState, _: None) -> tuple[TrainState, Metrics]:
            s, metrics = jax.vmap(self.per_seed)(s)
            return s, reduce_metrics(metrics, self.data)

        return jax.lax.scan(step, s, None, length=self.iterations_per_chunk)

    def _shard_warmup(self, s: TrainState) -> TrainState:
        """One shard's random-action warm-up (all seeds)."""
        return jax.vmap(self.per_seed.warmup)(s)

    # ------------------------------------------------------------ onto the devices
    def _sharded(
        self, fn: Callable[..., Any], keys_in: bool = False, metrics_out: bool = False
    ) -> Callable[..., Any]:
        """``fn`` (one shard) as a function of the global state, mapped over the mesh.

        ``fn`` takes a state (or, ``keys_in``, the replicated key data) and returns a
        state, or (``metrics_out``) a (state, metrics) pair whose metrics are the same on
        every shard. Traced under :func:`~jaxspreeze.algos.common.data_parallel`.
        """
        layout, local = self.layout, self.local_shards
        shards = self.data

        def on_shard(x: Any) -> Any:
            with common.data_parallel(shards.axes):
                return fn(x)

        def on_device(x: Any) -> Any:
            if local == 1:
                return on_shard(x)
            # several shards on this device: vmap them over the local axis
            if keys_in:
                in_axes: Any = None
            else:
                x = jax.tree.map(lambda v, sh: _split(v, local) if sh else v, x, layout)
                in_axes = jax.tree.map(lambda sh: 1 if sh else None, layout)
            out = jax.vmap(on_shard, in_axes=(in_axes,), axis_name=LOCAL_AXIS, axis_size=local)(x)
            state, metrics = out if metrics_out else (out, None)
            state = jax.tree.map(lambda v, sh: _merge(v) if sh else v[0], state, layout)
            if not metrics_out:
                return state
            return state, jax.tree.map(lambda v: v[0], metrics)

        specs = jax.tree.map(spec_of, self.layout)
        in_specs = (P(),) if keys_in else (specs,)
        out_specs = (specs, P()) if metrics_out else specs
        return jax.shard_map(
            on_device,
            mesh=self.mesh,
            in_specs=in_specs,
            out_specs=out_specs,
            # off: with it on, JAX would sum the gradients of the replicated parameters
            # over the devices by itself (the transpose of their implicit broadcast) and
            # the optimisers' explicit mean would be a sum; off, the explicit mean is the
            # only collective, the same as with several shards on one device (vmap).
            # Replicas agreeing is checked at run time (``check_replicas``) instead.
            check_vma=False,
        )

    # ------------------------------------------------------------ the schedule API
    def init_abstract(self) -> TrainState:
        """The global shapes and dtypes of :meth:`init`'s state; nothing is allocated."""
        return global_abstract(self.per_seed, self.shards, self.cfg.slots)

    def init(self, seed: int | None = None) -> TrainState:
        """A fresh state for all seeds (seed i uses ``cfg.seed + i``), on every device."""
        data = np.asarray(jax.random.key_data(self._keys(seed)))
        replicated = NamedSharding(self.mesh, P())
        keys = jax.make_array_from_callback(data.shape, replicated, lambda i: data[i])
        return self._init(keys)

    def place(self, state: TrainState) -> TrainState:
        """Lay ``state`` (global values, e.g. a restored checkpoint) out over the mesh.

        Leaves already laid out are kept; host values (numpy, as from
        :func:`jaxspreeze.setup.distributed.host_copy`; keys as raw key data) must be the same
        in every process: each process keeps its devices' part.
        """
        abstract = self.init_abstract()
        return jax.tree.map(lay_out, state, self.shardings, abstract)

    def _compile_warmup(self, state: TrainState) -> None:
        fn = jax.jit(self._sharded(self._shard_warmup), donate_argnums=0)
        self._warmup = fn.lower(state).compile()

    def _compile_chunk(self, state: TrainState) -> None:
        fn = jax.jit(self._sharded(self._shard_chunk, metrics_out=True), donate_argnums=0)
        self._chunk = fn.lower(state).compile()

    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """Run one chunk of K iterations on every device; metrics ``[K, S]`` (replicated).

        Dispatch is asynchronous unless ``check_replicas`` (which waits for the chunk).
        """
        if self._chunk is None:
            self.compile(state)
        state, metrics = self._chunk(state)
        if self.check_replicas:
            self.assert_replicas_agree(state)
        return state, metrics

    # ------------------------------------------------------------ replicas
    def replicas_agree(self, state: TrainState) -> bool:
        """True when every replicated leaf (agent, key, counters) is bitwise the same on
        every device of every process (one small collective; waits for ``state``)."""
        replicated = jax.tree.map(lambda x, sh: None if sh else x, state, self.layout)
        if self._agree is None:
            self._agree = agreement(self.mesh, replicated)
        return bool(self._agree(replicated))

    def assert_replicas_agree(self, state: TrainState) -> None:
        """RuntimeError unless :meth:`replicas_agree` (the data-parallel invariant)."""
        if not self.replicas_agree(state):
            raise RuntimeError(
                "data-parallel replicas diverged: the agent is no longer the same on every "
                "device (an update that is not averaged over the shards?)"
            )

    def local_agent(self, state: TrainState) -> AgentState:
        """This process's copy of the (replicated) agent, e.g. for its evaluator."""
        return jax.tree.map(lambda x: x.addressable_shards[0].data, state.agent)


def _split(x: jax.Array, local: int) -> jax.Array:
    """``[S, L*n, ...]`` -> ``[S, L, n, ...]``."""
    return x.reshape(x.shape[0], local, x.shape[1] // local, *x.shape[2:])


def _merge(x: jax.Array) -> jax.Array:
    """``[L, S, n, ...]`` (vmap's output) -> ``[S, L*n, ...]``."""
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], *x.shape[3:])


def lay_out(x: Any, sharding: NamedSharding, like: jax.ShapeDtypeStruct) -> jax.Array:
    """``x`` laid out as ``sharding`` (kept if it already is; host values from every process).

    ``like`` gives the leaf's dtype: a PRNG key leaf may arrive as its raw key data.
    """
    is_key = jax.dtypes.issubdtype(like.dtype, jax.dtypes.prng_key)
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        raise ValueError("cannot re-lay out an array that spans other processes")
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    value = np.asarray(x)
    put = jax.make_array_from_callback(value.shape, sharding, lambda i: value[i])
    return jax.random.wrap_key_data(put) if is_key else put
