"""What every schedule shares: the run's env, algorithm and per-seed pieces, init, placing.

A schedule runs :class:`~jaxspreeze.schedules.iteration.Iteration` for all seeds, chunk by chunk;
the subclasses differ in how one chunk of K iterations reaches the devices.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp

from jaxspreeze.algos.base import AgentState, Algorithm
from jaxspreeze.core.compiles import start_beside
from jaxspreeze.core.programs import ProgramCache, compile_options
from jaxspreeze.core.types import Placement, PyTree
from jaxspreeze.envs import VecEnv, make_env
from jaxspreeze.schedules.iteration import Iteration, Metrics, TrainState

if TYPE_CHECKING:
    from jaxspreeze.setup.config import RunConfig
    from jaxspreeze.setup.plan import RunPlan


def chunking(plan: RunPlan) -> tuple[int, int]:
    """(iterations per chunk, number of chunks) covering the plan's ``num_iterations``.

    Chunks are equal-sized so one program serves the whole run; the total is rounded up
    by fewer than ``num_chunks`` iterations.
    """
    n = max(plan.num_iterations, 1)
    num_chunks = math.ceil(n / plan.cfg.chunk_iterations)
    return math.ceil(n / num_chunks), num_chunks


def compile_beside(fn: Callable[..., None], *args: Any) -> Future:
    """Run ``fn(*args)`` (a lowering and compile) on a thread; the future gives its end.

    On one CPU (:func:`~jaxspreeze.core.compiles.compiles_overlap` False) it runs here,
    before this returns: compiles on threads would only take turns there, at a cost."""
    future: Future = Future()

    def work() -> None:
        try:
            fn(*args)
        except BaseException as e:  # handed to whoever waits on the future
            future.set_exception(e)
        else:
            future.set_result(None)

    start_beside(work, "jaxspreeze-compile")
    return future


def abstract_on(tree: PyTree, device: jax.Device, weak_types: bool = False) -> PyTree:
    """Abstract arrays shaped like ``tree``, committed to ``device`` (for AOT lowering).

    ``weak_types``: typed exactly as the leaves (weak types kept), so a program lowered
    for them is the one lowered for arrays of those types placed on ``device``."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    weak = lambda x: weak_types and bool(getattr(x, "weak_type", False))
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding, weak_type=weak(x)),
        tree,
    )


@dataclass(eq=False)
class Schedule(ABC):
    """The jitted pieces of training for one run plan (its config and placement).

    ``algo`` defaults to the plan's algorithm (``plan.make_algorithm()`` on the envs'
    spec); pass one to train a custom
    :class:`~jaxspreeze.algos.base.Algorithm`. ``programs`` keeps the compiled programs
    across processes (:class:`~jaxspreeze.core.programs.ProgramCache`; the trainer sets it for
    its run): off by default, every program is traced and compiled, with the XLA options
    of the run's ``compile`` mode.
    """

    split: ClassVar[bool] = False  # True: the host dispatches the two-device schedule
    host: ClassVar[bool] = False  # True: host envs, stepped by sampling workers

    plan: RunPlan
    algo: Algorithm | None = None
    cfg: RunConfig = field(init=False)  # the plan's
    placement: Placement = field(init=False)  # the plan's
    env: VecEnv = field(init=False)
    per_seed: Iteration = field(init=False)
    iterations_per_chunk: int = field(init=False)
    num_chunks: int = field(init=False)
    programs: ProgramCache = field(init=False, default_factory=ProgramCache.off)

    def __post_init__(self) -> None:
        cfg = self._take_plan()
        self.env = make_env(cfg.env, cfg.num_envs, cfg.obs_keys)
        if self.algo is None:
            self.algo = self.plan.algo_spec.make(self.plan.algo_config, self.env.spec, cfg)
        self.per_seed = Iteration.from_plan(self.plan, self.algo, self.env, self.split)
        self.iterations_per_chunk, self.num_chunks = chunking(self.plan)
        # the run's mode (and the init's options on a CPU)
        self.programs = ProgramCache.off(compile_options(cfg.compile, self.placement.on_cpu))
        self._init_jit: Any = None  # one program, however often called (see _init)
        self._init_program: jax.stages.Compiled | None = None

    def _take_plan(self) -> RunConfig:
        """Set ``cfg`` and ``placement`` from the plan (which must have a placement)."""
        if self.plan.placement is None:
            raise ValueError("a schedule runs a plan with a placement: plan(cfg) or plan.placed(p)")
        self.cfg, self.placement = self.plan.cfg, self.plan.placement
        return self.cfg

    @property
    def policy_lag(self) -> int:
        """Actor updates between the parameters that act and the newest ones (the rule)."""
        return self.algo.actor_steps_per_iteration

    def _keys(self, seed: int | None) -> jax.Array:
        seed = self.cfg.seed if seed is None else seed
        # slot j is seed j % num_seeds of member j // num_seeds (a plain run: one member)
        n = self.cfg.num_seeds
        return jnp.stack([jax.random.key(seed + j % n) for j in range(self.cfg.slots)])

    def init(self, seed: int | None = None) -> TrainState:
        """A fresh state for all seeds (seed i uses ``cfg.seed + i``), placed on devices."""
        keys = self._keys(seed)
        if self._init_program is None:
            self._init_program = self.programs.compile("init", self._init(), self._init_keys())
        return self.place(self._init_program(keys))

    def _init(self) -> Any:
        """The init program, jitted once: the memory estimate's trace is its compile's."""
        if self._init_jit is None:
            self._init_jit = self.programs.jit("init", jax.vmap(self.per_seed.init))
        return self._init_jit

    def _init_keys(self) -> jax.ShapeDtypeStruct:
        """The init program's argument: the seeds' keys, abstract, on the default device."""
        keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), self.cfg.slots))
        device = jax.config.jax_default_device
        if not isinstance(device, jax.Device):
            device = jax.local_devices()[0]
        return abstract_on(keys, device)

    def init_abstract(self) -> TrainState:
        """The shapes and dtypes of :meth:`init`'s state; nothing is allocated.

        The init program's kept executable's outputs when :attr:`programs` has it (no
        trace), else the init program's own trace: its compile reuses it (one trace of the
        reset and the networks' init, shared with the memory estimate)."""
        keys = self._init_keys()
        if self._init_program is None:
            self._init_program = self.programs.load("init", keys)
        if self._init_program is not None:
            return self._init_program.out_info
        return self._init().eval_shape(keys)

    def place(self, state: TrainState) -> TrainState:
        """Commit each part of ``state`` to its device."""
        return self._placed(state, jax.device_put)

    def placed_abstract(self, abstract: TrainState) -> TrainState:
        """:meth:`place` of a state shaped like ``abstract`` (e.g. :meth:`init_abstract`),
        as abstract arrays: what :meth:`compile` needs, nothing allocated."""
        return self._placed(abstract, functools.partial(abstract_on, weak_types=True))

    def init_compiled(self) -> TrainState:
        """:meth:`init`, and :meth:`compile` for its state.

        When the init compiles from its trace (no kept program), the compile starts first,
        on a thread, for the trace's shapes where the schedule can (:meth:`compile_ahead`):
        the init then compiles and runs beside it (XLA compiles without the GIL). The
        programs are the same. (A kept init's outputs do not say their weak types, so
        after one the compile waits for the state.)
        """
        abstract = self.init_abstract()  # the trace's shapes, or the kept program's
        compiling = self.compile_ahead(abstract) if self._init_program is None else None
        try:
            state = self.init()
        except BaseException:
            if compiling is not None:
                wait([compiling])  # no thread left compiling; the init's error is raised
            raise
        if compiling is None:
            self.compile(state)
        else:
            compiling.result()  # the compile's error, if any, is raised here
        return state

    def compile_ahead(self, abstract: TrainState) -> Future | None:
        """Start :meth:`compile` for a state shaped like ``abstract`` on a thread; the
        future gives its end. None when this schedule compiles from the state itself
        (its arrays, not only their shapes)."""
        del abstract
        return None

    def _placed(self, state: TrainState, put: Callable[[PyTree, Any], PyTree]) -> TrainState:
        p = self.placement
        return TrainState(
            AgentState(put(state.agent.actor, p.actor), put(state.agent.critic, p.critic)),
            put(state.env, p.actor),
            put(state.buffer, p.critic),
            put(state.obs_buffer, p.actor),
            put(state.key, p.actor),
            put(state.env_steps, p.actor),
            put(state.iteration, p.actor),
            put(state.actor_updates, p.actor),
        )

    def _warms_up(self) -> bool:
        """True when the run starts with a random-action warm-up (off-policy, steps > 0)."""
        return bool(self.plan.warmup_steps) and not self.algo.on_policy

    def close(self) -> list[str]:
        """Release what the schedule runs beside the devices (worker threads, host envs).

        Idempotent; returns the names of threads that did not stop. Nothing to do here.
        """
        return []

    # the schedule-specific part
    @abstractmethod
    def warmup(self, state: TrainState) -> TrainState:
        """Random-action warm-up (off-policy; a no-op otherwise)."""

    @abstractmethod
    def compile(self, state: TrainState) -> None:
        """Ahead-of-time compile the chunk (and the warm-up) for ``state``'s shapes."""

    @abstractmethod
    def chunk(self, state: TrainState) -> tuple[TrainState, Metrics]:
        """Run one chunk of K iterations; returns the new state and the metrics ``[K, S]``."""


class DeviceSchedule(Schedule):
    """A schedule whose envs step on the devices: a warm-up program and a chunk program."""

    _warmup: Any = None  # the compiled warm-up program (set by _compile_warmup)

    def warmup(self, state: TrainState) -> TrainState:
        """Random-action warm-up (off-policy; a no-op otherwise), one donating program
        (``self._warmup``, compiled here if :meth:`compile` has not)."""
        if not self._warms_up():
            return state
        if self._warmup is None:
            self._compile_warmup(state)
        return self._warmup(state)

    def compile(self, state: TrainState) -> None:
        """Ahead-of-time compile the chunk and the warm-up for ``state``'s shapes.

        The warm-up compiles on a thread beside the chunk (XLA compiles without the GIL:
        on a machine with two cores or more the two overlap; the programs are the same).
        """
        if not self._warms_up():
            self._compile_chunk(state)
            return
        warmup = compile_beside(self._compile_warmup, state)
        try:
            self._compile_chunk(state)
        except BaseException:
            wait([warmup])  # no thread left compiling; the chunk's error is the one raised
            raise
        warmup.result()  # the warm-up's error, if any, is raised here

    def compile_ahead(self, abstract: TrainState) -> Future | None:
        """:meth:`compile` on a thread for the placed ``abstract`` state: the programs are
        those of the state's arrays (same shapes, types and devices). A data-parallel
        schedule lays its state over a mesh and compiles from the state (None)."""
        if self.placement.data_parallel:
            return None
        return compile_beside(self.compile, self.placed_abstract(abstract))

    @abstractmethod
    def _compile_chunk(self, state: TrainState) -> None:
        """Ahead-of-time compile the chunk's program(s) for ``state``'s shapes."""

    @abstractmethod
    def _compile_warmup(self, state: TrainState) -> None:
        """Ahead-of-time compile the warm-up's program(s) for ``state``'s shapes."""
