"""The run plan: a config resolved and checked once, with everything a run derives from it.

:func:`plan` turns a :class:`~jaxspreeze.setup.config.RunConfig` into a :class:`RunPlan`: the
resolved config (run-level sizes left unset come from the algorithm's defaults), the
algorithm's registry entry, the env spec, the placement and the kind of schedule that
runs it, and the sizes derived from them (env steps per iteration, the warm-up, the
iterations to run). Everything past this point (schedules, memory, resume, evaluation,
the policy, autotune, the benchmarks) reads the plan instead of looking the config up
again. Every check that needs the algorithm or the env runs here, before anything is
compiled or allocated; a bad config is one :class:`~jaxspreeze.core.errors.ConfigError`
(exit 2, one line).

A plan without devices (``plan(cfg, on_devices=False)``) serves the tools that only read
sizes or check a config (the CLI's early check, autotune's candidates, the benchmarks'
cases): its ``placement`` is None, and so is ``schedule`` for a device env. A finished
run's saved config is planned by :meth:`RunPlan.saved` (resolved, not checked again), for
its policy and its checkpoints' evaluation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from jaxspreeze import algos, envs, networks
from jaxspreeze.algos.base import RUN_SIZES, Algorithm, AlgoSpec, check_positive
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import EnvSpec, Placement
from jaxspreeze.setup import config, devices, population
from jaxspreeze.setup.config import RunConfig

# how a plan is run (jaxspreeze.schedules: Fused, Split, DataParallel, SplitDataParallel,
# HostAsync, HostRollout)
ScheduleKind = Literal["fused", "split", "data", "split-data", "host-async", "host-rollout"]


@dataclass(frozen=True)
class RunPlan:
    """One run, planned: its checked config and what the run derives from it.

    ``cfg`` is resolved and checked; ``algo_spec`` is its algorithm's registry entry,
    ``env_spec`` its env's spec (with the run's observation keys); ``placement`` the
    devices it runs on (None for a plan made without devices) and ``schedule`` the kind
    of schedule that runs it there (None when that depends on a placement not known).
    Build one with :func:`plan`.
    """

    cfg: RunConfig
    algo_spec: AlgoSpec
    env_spec: EnvSpec
    placement: Placement | None = None
    schedule: ScheduleKind | None = None

    @property
    def on_policy(self) -> bool:
        """True when the algorithm learns from the fresh rollout (no replay, no warm-up)."""
        return self.algo_spec.on_policy

    @property
    def algo_config(self) -> Any:
        """The hyperparameters of the run's algorithm (its section of the config)."""
        return getattr(self.cfg, self.cfg.algo)

    @property
    def steps_per_iteration(self) -> int:
        """Env steps per iteration per seed (num_envs x rollout_steps)."""
        return steps_per_iteration(self.cfg)

    @property
    def warmup_steps(self) -> int:
        """Random-action steps taken before training (a multiple of num_envs; 0 on-policy)."""
        return warmup_steps(self.cfg, self.on_policy)

    @property
    def num_iterations(self) -> int:
        """Iterations after the warm-up needed to reach ``total_steps``."""
        remaining = max(self.cfg.total_steps - self.warmup_steps, 0)
        return math.ceil(remaining / self.steps_per_iteration)

    @classmethod
    def saved(cls, cfg: RunConfig) -> RunPlan:
        """The plan of a saved run's config (its ``config.json``, a checkpoint's), without
        devices: resolved, not checked again (it was when the run started, and a check
        added since must not lock a finished run out of its policy)."""
        spec = algos.get(cfg.algo)
        cfg = config.resolve(cfg, spec)
        env = envs.env_spec(cfg.env, cfg.obs_keys)
        cfg = resolve_torso(cfg, spec, env)
        return cls(cfg, spec, env, schedule=_schedule_kind(cfg, spec, None))

    def make_algorithm(self) -> Algorithm:
        """The run's algorithm bound to its config, env spec and sizes (nothing compiled)."""
        return self.algo_spec.make(self.algo_config, self.env_spec, self.cfg)

    def placed(self, placement: Placement) -> RunPlan:
        """This plan on ``placement`` (its schedule kind follows from it)."""
        population.check_pbt_placement(self.cfg, placement)  # before any compile
        if placement.split and not self.algo_spec.splits:  # one network: nothing to split
            if placement.critic_mesh is not None:
                _refuse_split(self.algo_spec, placement.kind)
            placement = devices.single(placement.actor)  # auto's split: its first device
        memory = getattr(self.algo_config, "memory", "none")  # a recurrent policy's cell
        if memory != "none" and placement.split and self.cfg.placement == "auto":
            placement = devices.single(placement.actor)  # one device carries its rollouts
        kind = _schedule_kind(self.cfg, self.algo_spec, placement)
        if memory != "none" and kind in ("split", "data", "split-data"):
            raise ConfigError(
                f"{self.algo_spec.name}.memory",
                f"a recurrent policy ({memory}) runs on one device so far, not on the {kind} "
                "placement; use --placement single",
            )
        mode = compile_mode(self.cfg, kind, placement, self.num_iterations)
        cfg = self.cfg if mode == self.cfg.compile else dataclasses.replace(self.cfg, compile=mode)
        return dataclasses.replace(self, cfg=cfg, placement=placement, schedule=kind)

    def relocated(self, **location: str) -> RunPlan:
        """This plan with the fields that say where its files live (``logdir``,
        ``run_name``: the ``location`` fields) changed; nothing planned depends on them."""
        others = sorted(set(location) - set(config.fields_of("location")))
        if others:
            raise ValueError(f"relocated changes location fields only, not {others}")
        return dataclasses.replace(self, cfg=dataclasses.replace(self.cfg, **location))


def plan(cfg: RunConfig, placement: Placement | None = None, *, on_devices: bool = True) -> RunPlan:
    """Resolve and check ``cfg`` once; the :class:`RunPlan` of a run of it.

    Resolves the run-level sizes left unset (:func:`jaxspreeze.setup.config.resolve`), checks
    every field (:func:`jaxspreeze.setup.config.check_fields`), then what needs the schedule,
    the algorithm or the env: what the host schedules support (host envs), the off-policy
    limits (buffer, warm-up), the algorithm's own checks (its section with the run's
    sizes; every other section on its own), the budget (the warm-up and one whole
    iteration), and that the algorithm can train the env (the env spec is built here: no
    compile). Raises :class:`~jaxspreeze.core.errors.ConfigError`
    naming the first bad field.

    ``placement``: the devices the run uses; None: ``cfg.placement`` resolved on this
    process's devices (:func:`jaxspreeze.setup.devices.resolve`, PlacementError if they do not
    allow it), or, with ``on_devices=False``, no placement at all (for what needs no
    devices; :meth:`RunPlan.placed` adds one later).
    """
    if not isinstance(cfg, RunConfig):
        raise ConfigError("config", f"expected a RunConfig, got {type(cfg).__name__}")
    spec = algos.get(cfg.algo)
    given = frozenset(n for n in RUN_SIZES if getattr(cfg, n) is not None)  # the user's
    cfg = config.resolve(cfg, spec)
    config.check_fields(cfg)
    env = _check_run(cfg, spec, given)
    cfg = resolve_torso(cfg, spec, env)
    planned = RunPlan(cfg, spec, env, schedule=_schedule_kind(cfg, spec, None))
    if cfg.pbt:  # its interval: whole chunks of schedules.chunking's size
        n = max(planned.num_iterations, 1)
        k = math.ceil(n / math.ceil(n / cfg.chunk_iterations))
        population.check_pbt(cfg, k * planned.steps_per_iteration)
    if placement is None and on_devices:
        placement = devices.resolve(cfg.placement)
    if placement is None:
        return planned
    placed = planned.placed(placement)
    check_compile(cfg.compile, placed)
    return placed


# ``--compile auto`` compiles a run of at most this many chunks for compile speed on a
# CPU: the quick chunk saves about 2 CPU s of compile and costs about 0.05 s a chunk on
# the classic-control rows (DQN CartPole's the slowest: experiments/results/cold_start_cpu.md),
# but 0.1-0.2 s on PQN's flattened MinAtar chunk (20,480 env steps: 0.47-0.57 s against
# 0.36-0.39 s; experiments/results/minatar_cpu.md), where full pays back from about 17
# chunks
AUTO_QUICK_CHUNKS = 32
QUICK_SCHEDULES = ("fused", "split")  # the schedules whose programs take the quick options


def compile_mode(cfg: RunConfig, kind: str, placement: Placement, num_iterations: int) -> str:
    """The run's ``compile`` mode on ``placement``, "full" or "quick": ``auto`` is quick
    for a device env's fused or split run on CPUs of at most :data:`AUTO_QUICK_CHUNKS`
    chunks; ``quick`` is full where it has no meaning (another schedule, or an accelerator:
    its options are XLA CPU's; :func:`plan` refuses a user's config asking for it there,
    a saved run's is placed as it can be)."""
    can = placement.on_cpu and kind in QUICK_SCHEDULES
    if cfg.compile == "auto":
        chunks = math.ceil(max(num_iterations, 1) / cfg.chunk_iterations)
        return "quick" if can and chunks <= AUTO_QUICK_CHUNKS else "full"
    return "quick" if cfg.compile == "quick" and can else "full"


def check_compile(asked: str, placed: RunPlan) -> None:
    """ConfigError("compile") when ``asked`` (the config's ``compile`` before the plan
    resolved it) is ``quick`` and ``placed`` cannot compile quick (an accelerator, host
    envs, a data-parallel schedule): a user's config, before any compile."""
    if asked != "quick" or placed.cfg.compile == "quick" or placed.placement is None:
        return
    on_cpu = getattr(placed.placement.actor, "platform", None) == "cpu"
    where = f"the {placed.schedule} schedule" if on_cpu else "an accelerator"
    raise ConfigError(
        "compile",
        f"--compile quick is for device-env runs on CPUs (one or two devices), not "
        f"{where}; use --compile full or auto",
    )


def resolve_torso(cfg: RunConfig, spec: AlgoSpec, env: EnvSpec) -> RunConfig:
    """``cfg`` with its algorithm's ``torso = "auto"`` replaced by the torso ``auto``
    picks for ``env``'s observation, like the sizes left unset: the run's saved config
    names the networks it built, and a run saved before the field existed (``mlp``)
    resumes beside a new one of the same env."""
    section = getattr(cfg, spec.name)
    if section.torso != "auto":
        return cfg
    torso = networks.choose_torso("auto", env.obs_shape)
    return dataclasses.replace(cfg, **{spec.name: dataclasses.replace(section, torso=torso)})


def steps_per_iteration(cfg: RunConfig) -> int:
    """Env steps per iteration per seed of a resolved ``cfg`` (:attr:`RunPlan.steps_per_iteration`;
    for sizes that are not planned, e.g. a benchmark's candidates)."""
    return cfg.num_envs * cfg.rollout_steps


def warmup_steps(cfg: RunConfig, on_policy: bool) -> int:
    """The warm-up of a resolved ``cfg`` (:attr:`RunPlan.warmup_steps`; for sizes that are
    not planned)."""
    if on_policy or cfg.learning_starts == 0:
        return 0
    return math.ceil(cfg.learning_starts / cfg.num_envs) * cfg.num_envs


def _schedule_kind(cfg: RunConfig, spec: AlgoSpec, placement: Placement | None) -> Any:
    """The kind of schedule that runs ``cfg`` on ``placement`` (None if it needs one)."""
    if envs.is_host_env(cfg.env):
        return "host-rollout" if spec.on_policy else "host-async"
    if placement is None:
        return None
    if placement.critic_mesh is not None:
        return "split-data"
    if placement.data_parallel:
        return "data"
    return "split" if placement.split else "fused"


def _check_run(cfg: RunConfig, spec: AlgoSpec, given: frozenset[str] = frozenset()) -> EnvSpec:
    """The checks that need the schedule, the algorithm or the env (``plan``'s list); the
    env spec."""
    if cfg.population and envs.is_host_env(cfg.env):
        raise ConfigError(
            "env", f"--env {cfg.env}: host envs do not train populations (sweeps) so far; "
            "use a device env (gymnax/, brax/, playground/) or separate runs",
        )
    population.check(cfg, spec)  # a population's members: member fields, values in range
    if envs.is_host_env(cfg.env):
        _check_host(cfg)
    if not spec.on_policy:
        _check_replay(cfg, given)
    if cfg.placement in ("split", "split-data"):
        _refuse_split(spec, cfg.placement)
    spec.validate(getattr(cfg, spec.name), f"{spec.name}.", cfg)
    _check_budget(cfg, warmup_steps(cfg, spec.on_policy))
    for other in algos.all_specs():  # the sections not in use: their own fields only
        if other.name != spec.name:
            other.validate(getattr(cfg, other.name), f"{other.name}.", None)
    env = envs.env_spec(cfg.env, cfg.obs_keys)  # the keys were checked with the fields
    reason = spec.supports(env)
    if reason:
        raise ConfigError("algo", f"{cfg.algo} cannot train {cfg.env}: {reason}")
    torso = getattr(cfg, spec.name).torso  # every algorithm's networks have a torso
    reason = networks.torso_unfit(torso, env.obs_shape, (env.actor_obs, env.critic_obs))
    if reason:
        raise ConfigError(f"{spec.name}.torso", f"{cfg.env}: {reason}")
    return env


def _refuse_split(spec: AlgoSpec, placement: str) -> None:
    """ConfigError naming ``placement`` (``split``, ``split-data``) for an algorithm with no
    critic side to place apart (``AlgoSpec.splits`` False)."""
    if spec.splits:
        return
    raise ConfigError(
        "placement",
        f"{placement} places a critic side apart, and {spec.label} has one network that "
        "acts and learns; use --placement auto, single or data",
    )


def _check_host(cfg: RunConfig) -> None:
    """What the host schedules (gymnasium/, envpool/ envs) support so far."""
    if cfg.num_seeds != 1:
        raise ConfigError(
            "num_seeds", f"host envs ({cfg.env}) train one seed per run so far, got {cfg.num_seeds}"
        )
    if cfg.placement in ("data", "split-data"):
        raise ConfigError(
            "placement",
            f"host envs ({cfg.env}) do not run data-parallel ({cfg.placement}); use auto or single",
        )
    if cfg.num_envs % cfg.host_workers:
        raise ConfigError(
            "num_envs",
            f"{cfg.num_envs} envs do not split evenly over host_workers {cfg.host_workers}",
        )


def _check_replay(cfg: RunConfig, given: frozenset[str] = frozenset()) -> None:
    """The run-level checks of an off-policy algorithm (replay buffer, warm-up, updates).
    ``given``: the sizes the user set (the rest are the algorithm's defaults): a refusal
    names the user's flag, not a default that follows from it."""
    check_positive(cfg, "", ("buffer_size",))
    if cfg.batch_size > cfg.buffer_size:
        raise ConfigError(
            "buffer_size" if "buffer_size" in given and "batch_size" not in given else "batch_size",
            f"{cfg.batch_size} is larger than buffer_size {cfg.buffer_size}; "
            "lower --batch-size or raise --buffer-size",
        )
    spi, warmup = steps_per_iteration(cfg), warmup_steps(cfg, on_policy=False)
    if spi > cfg.buffer_size:
        if "buffer_size" not in given and given & {"num_envs", "rollout_steps"}:
            name = "num_envs" if "num_envs" in given else "rollout_steps"
            raise ConfigError(
                name,
                f"one iteration's {spi:,} transitions (num_envs x rollout_steps) do not fit "
                f"in the replay buffer (buffer_size {cfg.buffer_size:,}); lower --"
                f"{name.replace('_', '-')} or raise --buffer-size",
            )
        raise ConfigError(
            "buffer_size",
            f"must hold one iteration's {spi} transitions (num_envs x rollout_steps)",
        )
    if warmup > cfg.buffer_size:
        raise ConfigError(
            "learning_starts",
            f"the warm-up of {warmup} random steps (learning_starts rounded up "
            f"to a multiple of num_envs) does not fit in buffer_size {cfg.buffer_size}; "
            "lower --learning-starts or raise --buffer-size",
        )
    if cfg.grad_steps == 0:
        raise ConfigError("grad_steps", "off-policy algorithms need at least 1")


def _check_budget(cfg: RunConfig, warmup: int) -> None:
    """The budget must hold the warm-up and at least one whole iteration.

    Otherwise the run would take no gradient step (the warm-up alone uses it up) or spend
    far more env steps than ``total_steps`` on its one iteration. Refused, naming the
    fields to change; nothing is shrunk behind the user's back.
    """
    spi = steps_per_iteration(cfg)
    if cfg.total_steps >= warmup + spi:
        return
    iteration = (
        f"one iteration takes {spi:,} env steps (num_envs {cfg.num_envs} x rollout_steps "
        f"{cfg.rollout_steps})"
    )
    if warmup:
        raise ConfigError(
            "total_steps",
            f"{cfg.total_steps:,} env steps leave no room to train: the warm-up takes "
            f"{warmup:,} random-action steps (learning_starts {cfg.learning_starts:,} rounded "
            f"up to a multiple of num_envs {cfg.num_envs}) and {iteration}; give "
            f"--total-steps of at least {warmup + spi:,}, or lower --learning-starts or "
            "--num-envs",
        )
    raise ConfigError(
        "total_steps",
        f"{cfg.total_steps:,} env steps do not hold one iteration: {iteration}; give "
        f"--total-steps of at least {spi:,}, or lower --num-envs or --rollout-steps",
    )


def shard_sizes(plan: Any, shards: int) -> dict[str, int]:
    """The run-level sizes of one shard of ``shards`` of a run plan (ConfigError unless
    they divide).

    ``num_envs``, ``batch_size`` and (off-policy) ``buffer_size`` must be multiples of
    ``shards``; ``total_steps`` and ``learning_starts`` are divided rounding up (the
    rounding of the plan's ``num_iterations`` and ``warmup_steps`` is then the same).
    """
    cfg = plan.cfg
    must_divide = ["num_envs", "batch_size"]
    if not plan.on_policy:
        must_divide.append("buffer_size")
    for name in must_divide:
        value = getattr(cfg, name)
        if value % shards:
            raise ConfigError(
                name,
                f"{value} does not split evenly over {shards} data-parallel devices; "
                f"use a multiple of {shards} (sizes are global, split over the devices)",
            )
    return {
        "num_envs": cfg.num_envs // shards,
        "batch_size": cfg.batch_size // shards,
        "buffer_size": cfg.buffer_size // shards,
        "total_steps": math.ceil(cfg.total_steps / shards),
        "learning_starts": math.ceil(cfg.learning_starts / shards),
    }


def shard_plan(plan: Any, shards: int) -> Any:
    """The run plan of one shard: ``plan`` with the run-level sizes of one shard of
    ``shards`` (what its algorithm is bound to; checked by :func:`bind_shard`)."""
    shard_cfg = dataclasses.replace(plan.cfg, **shard_sizes(plan, shards))
    return dataclasses.replace(plan, cfg=shard_cfg)
