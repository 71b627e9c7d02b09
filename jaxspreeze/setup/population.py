"""Populations (sweeps): members that differ in hyperparameters, trained in one program.

``jaxspreeze sweep`` (and :func:`jaxspreeze.sweep`) turn ``--grid FIELD=V1,V2,...`` and
``--sample FIELD=log-uniform:LO:HI`` (``uniform:LO:HI``, with ``--members N``) into
``RunConfig.population``: one ``field=value,...`` per member. Only an algorithm's *member
fields* (``AlgoSpec.member_fields``: float hyperparameters whose value is a leaf of the
training state) may vary, so every member runs the same program; the run vmaps
``members x num_seeds`` slots (slot ``m * num_seeds + i`` is member m's seed i, keyed
``seed + i`` like the single run with the same values). The values are written into the
fresh state by :func:`apply_members` before the warm-up; after that they travel in the
state's leaves (checkpoints) and in ``config.json`` (``population``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.algos.base import AgentState, AlgoSpec
from jaxspreeze.core.errors import ConfigError

MAX_MEMBERS = 65_536  # slots of one program: beyond, a population is refused before it is built
LINEAGE = "pbt.jsonl"  # a PBT run's lineage: one line per copy (jaxspreeze.run.pbt)
DISTRIBUTIONS = ("log-uniform", "uniform")
SAMPLE_SALT = 7_919  # the sampler's seed is the run's seed plus this (not an env's key)


def field_name(spec: AlgoSpec, name: str, flag: str) -> str:
    """``sac.actor_lr``, ``sac.actor-lr`` or ``actor_lr`` -> ``actor_lr``, when it is a member
    field of ``spec``; else ConfigError naming it (exit 2): it changes the program or the
    shapes, or it is not a field at all."""
    raw = name.strip()
    section, dot, rest = raw.partition(".")
    if dot and section.replace("-", "_") != spec.name:
        raise ConfigError(
            flag,
            f"{raw} is not a field of --algo {spec.name}: a population varies only the "
            f"chosen algorithm's member fields ({', '.join(spec.member_fields)})",
        )
    short = (rest if dot else raw).replace("-", "_")
    if short in spec.member_fields:
        return short
    raise ConfigError(
        flag,
        f"{raw} is not a member field of {spec.name}: it changes the program or the shapes "
        f"(or is no hyperparameter), so it cannot vary inside one population; run separate "
        f"sweeps for it. Member fields of {spec.name}: {', '.join(spec.member_fields) or 'none'}",
    )


def _split(text: str, flag: str) -> tuple[str, str]:
    name, eq, values = text.partition("=")
    if not eq or not name.strip() or not values.strip():
        raise ConfigError(flag, f"expected FIELD=VALUES, got {text!r}")
    return name, values


def _float(text: str, flag: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(flag, f"{name}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(flag, f"{name}: {text!r} is not finite")
    return value


def parse_grid(spec: AlgoSpec, items: Iterable[str]) -> dict[str, list[float]]:
    """``["actor_lr=1e-3,3e-4", ...]`` -> ``{"actor_lr": [1e-3, 3e-4], ...}`` (in order)."""
    grid: dict[str, list[float]] = {}
    for item in items:
        name, values = _split(item, "grid")
        short = field_name(spec, name, "grid")
        if short in grid:
            raise ConfigError("grid", f"{short} is given twice")
        grid[short] = [_float(v, "grid", short) for v in values.split(",")]
    return grid


def parse_sample(spec: AlgoSpec, items: Iterable[str]) -> dict[str, tuple[str, float, float]]:
    """``["actor_lr=log-uniform:1e-4:1e-2"]`` -> ``{"actor_lr": ("log-uniform", 1e-4, 1e-2)}``."""
    sample: dict[str, tuple[str, float, float]] = {}
    for item in items:
        name, law = _split(item, "sample")
        short = field_name(spec, name, "sample")
        parts = law.split(":")
        if len(parts) != 3 or parts[0] not in DISTRIBUTIONS:
            raise ConfigError(
                "sample", f"{short}: expected log-uniform:LO:HI or uniform:LO:HI, got {law!r}"
            )
        lo, hi = (_float(p, "sample", short) for p in parts[1:])
        if not lo <= hi or (parts[0] == "log-uniform" and lo <= 0):
            raise ConfigError("sample", f"{short}: needs LO <= HI (and LO > 0 for log-uniform)")
        if short in sample:
            raise ConfigError("sample", f"{short} is given twice")
        sample[short] = (parts[0], lo, hi)
    return sample


def check_size(
    grid: dict[str, list[float]], sample: dict[str, tuple[str, float, float]], members: int
) -> None:
    """ConfigError naming the flag that shrinks it for a population of more than
    :data:`MAX_MEMBERS` members, counted before any member is drawn or stored (a population
    of 10^8 would take minutes and gigabytes to build before any later guard saw it)."""
    points = math.prod(len(v) for v in grid.values())
    count = points * (members if sample else 1)
    if count <= MAX_MEMBERS:
        return
    if sample and points <= MAX_MEMBERS:
        fit = MAX_MEMBERS // points
        raise ConfigError(
            "members",
            f"{members:,} draws x {points:,} grid point(s) = {count:,} members; one population "
            f"holds at most {MAX_MEMBERS:,}: give --members {fit:,} or fewer",
        )
    raise ConfigError(
        "grid",
        f"the grids give {points:,} points ({count:,} members); one population holds at "
        f"most {MAX_MEMBERS:,}: give fewer --grid values (or split the sweep)",
    )


def members_of(
    seed: int,
    grid: dict[str, list[float]],
    sample: dict[str, tuple[str, float, float]],
    members: int,
) -> list[dict[str, float]]:
    """Every member's values: the product of the grids, each point with ``members`` samples
    of the sampled fields (drawn from ``seed``: the same population for the same seed)."""
    overlap = set(grid) & set(sample)
    if overlap:
        raise ConfigError("sample", f"{sorted(overlap)[0]} is both in --grid and --sample")
    if members < 1:
        raise ConfigError("members", f"must be >= 1, got {members}")
    check_size(grid, sample, members)
    points = [dict(zip(grid, p, strict=True)) for p in itertools.product(*grid.values())]
    rng = np.random.default_rng(seed + SAMPLE_SALT)
    out = []
    for point in points:
        for _ in range(members if sample else 1):
            drawn = {}
            for name, (law, lo, hi) in sample.items():
                u = float(rng.uniform())
                if law == "uniform":
                    drawn[name] = lo + (hi - lo) * u
                else:
                    drawn[name] = float(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * u))
            out.append({**point, **drawn})
    if not sample and members not in (1, len(out)):
        raise ConfigError("members", "--members N goes with --sample (the grid gives its own)")
    return out


def encode(values: Sequence[dict[str, float]]) -> tuple[str, ...]:
    """Members' values as ``RunConfig.population`` (exact: floats by ``repr``)."""
    return tuple(",".join(f"{k}={float(v)!r}" for k, v in m.items()) for m in values)


def decode(population: Sequence[str]) -> list[dict[str, float]]:
    """``RunConfig.population`` -> every member's values (ConfigError on a bad entry)."""
    out = []
    for m, text in enumerate(population):
        values: dict[str, float] = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            name, eq, value = item.partition("=")
            if not eq:
                raise ConfigError("population", f"member {m}: expected field=value, got {item!r}")
            values[name.strip()] = _float(value, "population", f"member {m}")
        out.append(values)
    return out


def check(cfg: Any, spec: AlgoSpec) -> None:
    """ConfigError naming the first bad member: a field that is not a member field of the
    algorithm, a value its own ``validate`` refuses, members that set different fields."""
    if not cfg.population:
        return
    members = decode(cfg.population)
    if any(set(m) != set(members[0]) for m in members):
        raise ConfigError("population", "every member must set the same fields")
    section = getattr(cfg, spec.name)
    for m, values in enumerate(members):
        for name in values:
            field_name(spec, name, "population")
        try:
            spec.validate(dataclasses.replace(section, **values), f"{spec.name}.", None)
        except ConfigError as e:
            raise ConfigError(e.field, f"member {m}: {str(e).split(': ', 1)[-1]}") from None


def member_table(cfg: Any) -> list[dict[str, float]]:
    """Every member's values, with the config's own for the fields it leaves unset (a plain
    run: one member with no values)."""
    return decode(cfg.population) if cfg.population else [{}]


def apply_members(agent: AgentState, cfg: Any, spec: AlgoSpec) -> AgentState:
    """``agent`` (leaves ``[slots, ...]``) with each member's values written into its slots
    by ``spec``'s setters, ``spec`` the run's algorithm (jitted by the caller; a plain
    run's agent comes back as it is)."""
    if not cfg.population:
        return agent
    members = decode(cfg.population)
    names = list(members[0])
    setters = [spec.member_fields[n] for n in names]
    rows = np.repeat(
        np.asarray([[m[n] for n in names] for m in members], np.float32), cfg.num_seeds, axis=0
    )

    def one(slot: AgentState, row: jax.Array) -> AgentState:
        for j, setter in enumerate(setters):
            slot = setter(slot, row[j])
        return slot

    return jax.vmap(one)(agent, jnp.asarray(rows))


def slot_keys(key: jax.Array, cfg: Any) -> jax.Array:
    """One key per slot: ``key`` split over the seeds, the same for every member (slot
    ``m * num_seeds + i`` gets seed i's key, as the single run's seed i does: its
    evaluation starts from the same envs). A plain run: ``split(key, num_seeds)``."""
    keys = jax.random.split(key, cfg.num_seeds)
    return jnp.concatenate([keys] * cfg.members) if cfg.population else keys


def member_slots(cfg: Any, member: int) -> range:
    """The slots of ``member``: ``member * num_seeds + i``."""
    return range(member * cfg.num_seeds, (member + 1) * cfg.num_seeds)


def check_pbt(cfg: Any, chunk_steps: int) -> None:
    """ConfigError for population-based training that cannot run: fewer than 2 members, an
    interval that is not a whole number of chunks (``chunk_steps`` env steps each), a
    quantile outside (0, 0.5] (the placement: :func:`check_pbt_placement`)."""
    if not cfg.pbt:
        return
    if cfg.members < 2:
        raise ConfigError("pbt", "population-based training needs at least 2 members "
                          "(give --grid or --sample)")  # fmt: skip
    if cfg.pbt_interval < 0 or cfg.pbt_interval % chunk_steps:
        raise ConfigError(
            "pbt_interval",
            f"must be a whole number of chunks: a multiple of {chunk_steps:,} env steps "
            f"(iterations per chunk x num_envs x rollout_steps), got {cfg.pbt_interval:,}",
        )
    if not 0 < cfg.pbt_quantile <= 0.5:
        raise ConfigError("pbt_quantile", f"must be in (0, 0.5], got {cfg.pbt_quantile}")


def check_pbt_placement(cfg: Any, placement: Any) -> None:
    """ConfigError (exit 2) for population-based training on a placement it does not run
    on: every placement of one process (single, split, data, split-data) runs it; a run
    over several processes does not yet. Checked when the plan is placed, before anything
    is compiled or allocated (``--placement auto`` too, once resolved)."""
    if not cfg.pbt or placement is None:
        return
    meshes = [m for m in (placement.mesh, placement.critic_mesh) if m is not None]
    processes = {d.process_index for m in meshes for d in m.devices.flat}
    if len(processes) > 1:
        raise ConfigError(
            "placement",
            f"--pbt runs in one process so far, not over {len(processes)} processes "
            f"({placement.kind}); run the population on one host's devices",
        )


def read_lineage(run_dir: str | Path) -> list[dict[str, Any]]:
    """The PBT lineage events of ``run_dir`` (none without a ``pbt.jsonl``; a line cut
    short by a crash is skipped)."""
    path = Path(run_dir) / LINEAGE
    if not path.exists():
        return []
    events = []
    for line in filter(str.strip, path.read_text().splitlines()):
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
