"""Population-based training (``jaxspreeze sweep --pbt``): exploit and explore between chunks.

Every ``pbt_interval`` env steps (a whole number of chunks; at the first chunk boundary at
or past each multiple, the last chunk's included) the members are ranked by their
training episode return over the interval (the mean over the episodes each slot finished
since the last PBT step, then over the member's seeds; a member with no finished episode
ranks last; when no member finished one, the step is skipped). Each member of the bottom ``pbt_quantile`` (at least one member) copies the
whole agent state (parameters, optimiser states, targets, hyperparameter leaves,
observation statistics) of a member drawn from the top quantile, seed i from seed i; its
replay buffer, envs and keys stay its own. Then each copied member-field value is
multiplied by 0.8 or 1.25 (clipped to [0, 1] for gamma, tau and gae_lambda) and written
with the algorithm's member setters. ``init_alpha`` is a start value: the copied
temperature (``log_alpha``) is kept and the value is not perturbed.

The draws come from a numpy Generator seeded with ``(seed, salt, interval index)``, so PBT
holds no state of its own: the members' values live in the state's leaves, and the host's
table of them is the config's population replayed through the lineage file ``pbt.jsonl``
(one line per copy: ``env_steps``, ``member``, ``copied``, ``old``, ``new``, ``scores``).
A resume truncates the lineage to the checkpoint's step and appends from there.
"""

from __future__ import annotations

import json
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze import algos
from jaxspreeze.algos.base import AgentState
from jaxspreeze.core.types import Record
from jaxspreeze.setup import distributed, population

LINEAGE = population.LINEAGE
read_lineage = population.read_lineage
SALT = 104_729  # the PBT draws' seed is (seed, SALT, interval index)
FACTORS = (0.8, 1.25)
RANGES = {"gamma": (0.0, 1.0), "tau": (0.0, 1.0), "gae_lambda": (0.0, 1.0)}
KEPT = ("init_alpha",)  # start values: copied with the state, never perturbed
# pairs perturbed apart that must stay ordered (low <= high): FastTD3's noise bounds
ORDERED = (("noise_min", "noise_max"),)


def interval(cfg: Any, chunk_steps: int) -> int:
    """The env steps between PBT steps (``pbt_interval``, 0: ten chunks)."""
    return cfg.pbt_interval or 10 * chunk_steps


def replay(cfg: Any, events: list[Record]) -> list[dict[str, float]]:
    """Every member's values after ``events`` (the config's population, then each copy)."""
    values = population.member_table(cfg)
    for e in events:
        values[e["member"]] = dict(e["new"])
    return values


def scores_of(cfg: Any, ret_sum: np.ndarray, episodes: np.ndarray) -> list[float]:
    """Each member's training return: per slot the mean over its finished episodes, then
    the mean over the member's seeds (NaN where no seed finished one)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        per_slot = np.where(episodes > 0, ret_sum / np.maximum(episodes, 1), np.nan)
    out = []
    for m in range(cfg.members):
        s = per_slot[list(population.member_slots(cfg, m))]
        out.append(float(np.nanmean(s)) if np.isfinite(s).any() else math.nan)
    return out


def choose(
    cfg: Any, values: list[dict[str, float]], scores: list[float], index: int, env_steps: int
) -> list[Record]:
    """The lineage events of PBT step ``index``: who copies whom, the old and new values."""
    if all(math.isnan(s) for s in scores):
        return []  # no member finished an episode in the interval: nothing to rank
    n = max(1, int(cfg.members * cfg.pbt_quantile))
    rank = sorted(range(cfg.members), key=lambda m: (_key(scores[m]), m))  # worst first
    bottom, top = rank[:n], rank[-n:]
    rng = np.random.default_rng([cfg.seed, SALT, index])
    events = []
    for loser in bottom:
        winner = int(top[int(rng.integers(len(top)))])
        new, factors = {}, {}
        for name, value in values[winner].items():
            if name in KEPT:
                new[name] = value
                continue
            factors[name] = FACTORS[int(rng.integers(len(FACTORS)))]
            lo, hi = RANGES.get(name, (-math.inf, math.inf))
            new[name] = float(np.float32(min(max(value * factors[name], lo), hi)))
        for low, high in ORDERED:
            if low in new and high in new and new[low] > new[high]:
                new[low] = new[high]  # the bounds met: every env explores at one scale
        events.append(
            {"env_steps": env_steps, "interval": index, "member": loser, "copied": winner,
             "old": values[loser], "new": new, "factors": factors,
             "scores": [None if math.isnan(s) else s for s in scores]}
        )  # fmt: skip
    return events


def _key(score: float) -> float:
    return -math.inf if math.isnan(score) else score


def exploit_explore(agent: AgentState, cfg: Any, events: list[Record]) -> AgentState:
    """``agent`` (leaves ``[slots, ...]``) with each event's member holding its copied
    member's state, seed by seed, and the event's new values written by the setters."""
    spec = algos.get(cfg.algo)
    s = cfg.num_seeds
    src, mask = np.arange(cfg.slots), np.zeros(cfg.slots, bool)
    names = [n for n in population.member_table(cfg)[0] if n not in KEPT]
    rows = np.zeros((cfg.slots, len(names)), np.float32)
    for e in events:
        for i in range(s):
            src[e["member"] * s + i] = e["copied"] * s + i
            mask[e["member"] * s + i] = True
            rows[e["member"] * s + i] = [e["new"][n] for n in names]
    copied = jax.tree.map(lambda x: x[src], agent)
    setters = [spec.member_fields[n] for n in names]

    def one(slot: AgentState, row: jax.Array) -> AgentState:
        for j, setter in enumerate(setters):
            slot = setter(slot, row[j])
        return slot

    written = jax.vmap(one)(copied, jnp.asarray(rows))

    def pick(old: jax.Array, new: jax.Array) -> jax.Array:
        if jax.dtypes.issubdtype(old.dtype, jax.dtypes.prng_key):
            return old  # keys: no setter writes one, the copy is all
        return jnp.where(mask.reshape((-1,) + (1,) * (old.ndim - 1)), new, old)

    return jax.tree.map(pick, copied, written)


def placed_exploit_explore(agent: AgentState, cfg: Any, events: list[Record], place: Any) -> Any:
    """:func:`exploit_explore` of an agent laid out over several devices (split: each side
    on its own; data-parallel: replicated over a mesh): its whole value gathered to the
    host, the copies made there (on the default device) and ``place(agent)`` (the
    schedule's, which lays each leaf out as the run's state is) puts it back."""
    host = distributed.host_copy(agent)  # numpy; PRNG keys as their raw data
    done = distributed.host_copy(exploit_explore(host, cfg, events))

    def typed(new: Any, old: jax.Array) -> Any:
        if jax.dtypes.issubdtype(old.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(new, impl=jax.random.key_impl(old))
        return new

    return place(jax.tree.map(typed, done, agent))


class PBT:
    """A run's PBT between chunks: :meth:`step` after every chunk (a no-op without --pbt).

    On one device the copies are made where the state lives; on a split or data-parallel
    placement the agent goes through the host (:func:`placed_exploit_explore`), so every
    placement makes the same copies of the same values. Only process 0 writes the lineage.
    """

    def __init__(self, setup: Any):
        cfg = self.cfg = setup.cfg
        self.every = 0
        if not cfg.pbt:
            return
        self.schedule = setup.schedule
        self.spread = setup.placement.split or setup.placement.data_parallel
        self.main = distributed.is_main()
        k = setup.schedule.iterations_per_chunk
        self.every = interval(cfg, k * setup.plan.steps_per_iteration)
        self.path = setup.run.path / LINEAGE
        at = setup.point.env_steps if setup.point is not None else None
        events = read_lineage(setup.run.path) if at is not None else []
        kept = [e for e in events if e["env_steps"] <= at] if at is not None else []
        if self.main and (len(kept) != len(events) or at is None):  # a resume: drop the newer
            self.path.write_text("".join(json.dumps(e) + "\n" for e in kept))
        self.values = replay(cfg, kept)
        self.sums: list[tuple[jax.Array, jax.Array]] = []

    def step(self, state: Any, metrics: dict[str, Any], before: int, after: int) -> Any:
        """``state`` after chunk ``metrics`` (env steps ``before`` -> ``after``): at an
        interval boundary (the last chunk's too, so that a run that ends there resumes as
        the uninterrupted one goes on), the bottom members replaced."""
        if not self.every:
            return state
        self.sums.append((metrics["episode_return_sum"], metrics["episodes"]))
        if after // self.every == before // self.every:
            return state
        got = jax.device_get(self.sums)
        self.sums = []
        ret = np.sum([r.sum(0) for r, _ in got], axis=0)
        eps = np.sum([e.sum(0) for _, e in got], axis=0)
        scores = scores_of(self.cfg, ret, eps)
        events = choose(self.cfg, self.values, scores, after // self.every, after)
        for e in events:
            self.values[e["member"]] = e["new"]
        if self.main:
            with self.path.open("a") as f:
                f.write("".join(json.dumps(e) + "\n" for e in events))
        if not events:
            return state
        if not self.spread:
            return state._replace(agent=exploit_explore(state.agent, self.cfg, events))
        place = lambda agent: self.schedule.place(state._replace(agent=agent)).agent
        return state._replace(agent=placed_exploit_explore(state.agent, self.cfg, events, place))


def with_lineage(summary: Record, setup: Any, steps: int | None = None) -> Record:
    """A PBT run's summary: each member's values as it trained with them (``values``: the
    copies made after training ended, at ``steps``, excepted: a member they perturbed never
    trained with its new values, which ``next_values`` holds, the checkpoint's for a longer
    run), its first values (``initial_values``) and ``pbt`` (interval, quantile, copies,
    those made after training, the lineage file)."""
    cfg = setup.cfg
    if not cfg.pbt or "members" not in summary:
        return summary
    events = read_lineage(setup.run.path)
    every = interval(cfg, setup.schedule.iterations_per_chunk * setup.plan.steps_per_iteration)
    during = [e for e in events if steps is None or e["env_steps"] < steps]
    trained, after, first = replay(cfg, during), replay(cfg, events), population.member_table(cfg)
    rows = [{**row, "values": trained[row["member"]], "initial_values": first[row["member"]],
             "next_values": after[row["member"]]}
            for row in summary["members"]]  # fmt: skip
    info = {"interval": every, "quantile": cfg.pbt_quantile, "copies": len(events),
            "copies_after_training": len(events) - len(during), "lineage": LINEAGE}  # fmt: skip
    return {**summary, "members": rows, "pbt": info}
