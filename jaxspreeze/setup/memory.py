"""The memory estimate: the bytes a run will hold on its device(s), before allocating any.

Computed from a run plan (:class:`~jaxspreeze.setup.plan.RunPlan`): its env spec, the replay item (:func:`jaxspreeze.data.replay.example_transition`,
:func:`jaxspreeze.data.replay.nbytes`) and the abstract shapes of the env states and the
agent: nothing is compiled, allocated or stepped. The trainer passes those shapes from
its schedule's init program (``Schedule.init_abstract``: that program's own trace, which
its first call reuses), so the estimate traces nothing of its own; called without them,
it traces the env's reset and the algorithm's ``init`` (``jax.eval_shape``), never the
env step. :func:`check_memory` turns the estimate into a ConfigError naming the option
to lower.

Observations count at their own itemsize (``EnvSpec.obs_dtype``): a uint8 frame or a bool
grid is one byte a value in the replay buffer, the obs-only buffer and the rollout, a
quarter of its float32 copy; the sampled batch counts its float32 copy too (the networks
widen observations at their input).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxspreeze import envs
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import ObsOnly, Placement, PyTree
from jaxspreeze.data import replay, rollout
from jaxspreeze.setup import devices
from jaxspreeze.setup.plan import shard_plan

if TYPE_CHECKING:
    from jaxspreeze.setup.config import RunConfig
    from jaxspreeze.setup.plan import RunPlan

GiB = 2**30

# which option to lower when a component of the memory estimate does not fit
_MEMORY_FIELDS = {
    "replay_buffer": "buffer_size",
    "obs_buffer": "buffer_size",
    "env_states": "num_envs",
    "rollout": "num_envs",
    "batch": "batch_size",
    "actor_params": "hidden",
    "critic_params": "hidden",
}
_MEMORY_LABELS = {
    "replay_buffer": "replay buffer",
    "obs_buffer": "obs-only buffer",
    "env_states": "env states",
    "rollout": "rollout",
    "batch": "update batch",
    "actor_params": "actor+optimiser",
    "critic_params": "critic+targets+optimiser",
}
_ACTOR_SIDE = ("obs_buffer", "env_states", "rollout", "actor_params")
_CRITIC_SIDE = ("replay_buffer", "batch", "critic_params")


def tree_nbytes(tree: Any) -> int:
    """Bytes of the arrays (or ``ShapeDtypeStruct``\\ s) of a pytree; PRNG keys count 8."""
    total = 0
    for x in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            itemsize = 8  # threefry key data: 2 x uint32
        else:
            itemsize = np.dtype(x.dtype).itemsize
        total += math.prod(x.shape) * itemsize
    return total


def buffer_nbytes(plan: RunPlan) -> int:
    """Bytes of the replay buffer(s) for all seeds (0 on-policy), computed before allocation."""
    if plan.on_policy:
        return 0
    cfg = plan.cfg
    example = replay.example_transition(plan.env_spec, abstract=True)
    return replay.nbytes(example, cfg.buffer_size) * cfg.slots


def estimate_memory(
    plan: RunPlan, *, split: bool | None = None, state: PyTree | None = None
) -> dict[str, int]:
    """Bytes the run will hold on its device(s), for all seeds, computed without allocating.

    Components: ``replay_buffer`` (:func:`buffer_nbytes`), ``obs_buffer`` (split only),
    ``env_states``, ``actor_params`` / ``critic_params`` (parameters, targets, optimiser
    states; from ``jax.eval_shape`` of the algorithm's init), ``rollout`` (one iteration's
    ``[T, N]`` transitions) and ``batch`` (sampled batches, their observations widened to
    float32, plus a rough 3x activation allowance per hidden layer, fwd and bwd); ``total``
    sums them. Observations count at ``spec.obs_dtype``'s itemsize (one byte for uint8 and
    bool). ``split`` defaults to ``cfg.placement`` being ``split`` or ``split-data``. XLA's
    temporaries beyond these are not counted.

    ``state``: the abstract training state of all seeds (``Schedule.init_abstract()``,
    :class:`~jaxspreeze.schedules.iteration.TrainState` of ``jax.ShapeDtypeStruct``); its env and
    agent shapes are used as they are (nothing traced here). Without it the env's reset
    and the algorithm's init are traced for their shapes.
    """
    cfg, spec = plan.cfg, plan.env_spec
    split = cfg.placement in ("split", "split-data") if split is None else split
    s = cfg.slots  # every member's seeds
    if state is not None:
        agent, env_states = state.agent, state.env
    else:
        algo = plan.make_algorithm()
        env = envs.make_env(cfg.env, cfg.num_envs, cfg.obs_keys)
        keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), s))
        agent = jax.eval_shape(jax.vmap(algo.init), keys)
        carry = lambda: algo.initial_carry(cfg.num_envs)
        env_states = jax.eval_shape(jax.vmap(lambda k: rollout.env_init(env, k, carry())), keys)
    example = replay.example_transition(spec, abstract=True)
    item = tree_nbytes(example)
    obs_item = 4 * math.prod(spec.obs_shape)  # the batch's observations widened to float32
    off_policy = not plan.on_policy
    hidden = getattr(plan.algo_config, "hidden", (256, 256))
    activations = 4 * sum(hidden) * 3 * 2  # float32, fwd+bwd, actor and critic
    est = {
        "replay_buffer": buffer_nbytes(plan) if off_policy else 0,
        "obs_buffer": (
            replay.nbytes(ObsOnly(example.obs), cfg.buffer_size) * s if off_policy and split else 0
        ),
        "env_states": tree_nbytes(env_states),
        "actor_params": tree_nbytes(agent.actor),
        "critic_params": tree_nbytes(agent.critic),
        "rollout": item * plan.steps_per_iteration * s,
        "batch": cfg.batch_size * (item + obs_item + activations) * s,
    }
    est["total"] = sum(est.values())
    return est


def format_memory(est: dict[str, int]) -> str:
    """One line: the total and each non-zero component, in human units."""

    def human(n: int) -> str:
        for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
            if n >= size:
                return f"{n / size:.1f} {unit}"
        return f"{n} B"

    parts = [f"{_MEMORY_LABELS[k]} {human(v)}" for k, v in est.items() if k != "total" and v]
    return f"memory estimate {human(est['total'])} ({', '.join(parts)})"


def available_memory(device: Any) -> tuple[int | None, str]:
    """(bytes free for new arrays on ``device`` or None if unknown, where that was read).

    Accelerators: ``bytes_limit - bytes_in_use`` of ``device.memory_stats()``. CPU: the
    host's ``MemAvailable`` (``/proc/meminfo``), else ``os.sysconf`` available pages.
    """
    if getattr(device, "platform", "cpu") != "cpu":
        try:
            stats = device.memory_stats() or {}
        except Exception:  # pragma: no cover - backends without stats
            stats = {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), str(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "host memory"
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "host memory"
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None, "unknown"


def _get_field(cfg: RunConfig, dotted: str) -> Any:
    """The value of ``a.b`` style field ``dotted`` of ``cfg``."""
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def obs_note(spec: Any) -> str:
    """What the estimate counts an observation value as: ``observations as uint8, 1 B a
    value`` (``spec``: the run's :class:`~jaxspreeze.core.types.EnvSpec`)."""
    itemsize = np.dtype(spec.obs_dtype).itemsize
    return f"observations as {spec.obs_dtype}, {itemsize} B a value"


def _fit(
    cfg: RunConfig, est: dict[str, int], keys: tuple[str, ...], device: Any, note: str = ""
) -> None:
    """ConfigError naming the option to lower when ``keys`` of ``est`` exceed ``device``
    (``note``: what the estimate counted, said after its parts)."""
    need = sum(est[k] for k in keys)
    free, where = available_memory(device)
    if free is None or need <= free:
        return
    fields = _fields_to_lower(cfg, est, keys, free)
    field_name = fields[0]
    lower = " and ".join(f"--{f.replace('_', '-')} (now {_get_field(cfg, f)!r})" for f in fields)
    if len(fields) > 1:  # the biggest share alone cannot make room: say what the rest needs
        rest = sum(est[k] for k in keys if _field(cfg, k) != field_name)
        lower += (
            f" (lowering --{field_name.replace('_', '-')} alone cannot fit the run: the rest "
            f"needs {rest / GiB:.2f} GiB)"
        )
    shown = [f"{_MEMORY_LABELS[k]} {est[k] / GiB:.2f}" for k in keys if est[k] >= 0.01 * need]
    parts = ", ".join(shown) + " GiB" + (f"; {note}" if note else "")
    seeds = f" or --num-seeds (now {cfg.num_seeds})" if cfg.num_seeds > 1 else ""
    if cfg.population:  # the members scale every part: say how many fit
        fit = int(free // (need / cfg.members))
        raise ConfigError(
            "population",
            f"a population of {cfg.members} members needs about {need / GiB:.2f} GiB ({parts}"
            f") but {where} has {free / GiB:.2f} GiB available: {fit} members would fit; "
            f"sweep fewer members, or lower {lower}{seeds}",
        )
    raise ConfigError(
        field_name,
        f"the run needs about {need / GiB:.2f} GiB ({parts}) but {where} has "
        f"{free / GiB:.2f} GiB available; lower {lower}{seeds}",
    )


def _field(cfg: RunConfig, key: str) -> str:
    """The config field that sizes the estimate's part ``key`` (``sac.hidden``, ...)."""
    name = _MEMORY_FIELDS[key]
    return f"{cfg.algo}.{name}" if name == "hidden" else name


def _fields_to_lower(
    cfg: RunConfig, est: dict[str, int], keys: tuple[str, ...], free: int
) -> list[str]:
    """The fields to lower, biggest share first, until what the others size fits in
    ``free``: one field when lowering it alone can make room, else the ones that can."""
    shares: dict[str, int] = {}
    for k in keys:
        shares[_field(cfg, k)] = shares.get(_field(cfg, k), 0) + est[k]
    order = sorted(shares, key=lambda f: -shares[f])
    left = sum(shares.values())
    fields = []
    for f in order:
        fields.append(f)
        left -= shares[f]
        if left <= free:
            break
    return fields


def check_memory(
    plan: RunPlan, device: Any = None, *, split: bool | None = None, state: PyTree | None = None
) -> dict[str, int]:
    """Raise ConfigError (naming the option to lower) when the run would not fit; else the estimate.

    ``device`` is a ``jax.Device`` (everything on it) or a :class:`~jaxspreeze.core.types.Placement`
    (a split placement checks the actor side on the actor device and the critic side on
    the critic device; CPU devices share the host's memory, so their sum is checked).
    A data-parallel placement (a mesh) holds one shard's share of the global sizes on each
    device (:func:`~jaxspreeze.setup.plan.shard_plan`): the estimate
    returned is *per device*, checked on each of this process's devices (their sum on
    CPU). Call it before the run's state is allocated. ``state``: the abstract training
    state, as for :func:`estimate_memory` (not used by a data-parallel check).
    """
    cfg = plan.cfg
    placement = device if isinstance(device, Placement) else None
    if placement is not None and placement.data_parallel:
        return _check_data_parallel(plan, placement)
    if placement is not None:
        split = placement.split if split is None else split
    est = estimate_memory(plan, split=split, state=state)
    everything = tuple(k for k in est if k != "total")
    note = obs_note(plan.env_spec)
    if placement is None:
        _fit(cfg, est, everything, device if device is not None else devices.single().actor, note)
    elif not placement.split or placement.actor.platform == "cpu":
        _fit(cfg, est, everything, placement.actor, note)
    else:
        _fit(cfg, est, _ACTOR_SIDE, placement.actor, note)
        _fit(cfg, est, _CRITIC_SIDE, placement.critic, note)
    return est


def _check_data_parallel(plan: RunPlan, placement: Placement) -> dict[str, int]:
    """The per-device estimate of a data-parallel run, checked on this process's devices.

    ``split-data`` (a critic mesh too): one shard's actor side on each actor-side device,
    its critic side on the paired critic-side device; the estimate is one pair's.
    """
    assert placement.mesh is not None
    cfg = plan.cfg
    shard = shard_plan(plan, placement.data_devices)  # ConfigError unless sizes split evenly
    split = placement.critic_mesh is not None
    est = estimate_memory(shard, split=split)
    everything = tuple(k for k in est if k != "total")
    mine = [d for d in placement.mesh.devices.flat if d.process_index == jax.process_index()]
    note = obs_note(plan.env_spec)
    if placement.actor.platform == "cpu" and len(mine) > 1:  # fake devices share the host
        each = {k: v * len(mine) for k, v in est.items()}
        _fit(cfg, each, everything, placement.actor, note)
    elif split and placement.actor.platform != "cpu":
        _fit(cfg, est, _ACTOR_SIDE, placement.actor, note)
        _fit(cfg, est, _CRITIC_SIDE, placement.critic, note)
    else:
        _fit(cfg, est, everything, placement.actor, note)
    return est
