"""What an evaluation does beyond its record: keep the best policy, stop at a target.

On the metrics thread (process 0), after each evaluation's record (so after the record of
the chunk its snapshot was taken at, which the non-finite guard has seen): the actor of
the best evaluation so far is kept, an evaluation at or above ``--stop-at-return`` (the
mean over seeds), or a Python callback ``on_eval(record)`` that returns True, asks the
run to stop. Once a chunk has failed its finiteness check no evaluation becomes the best
nor stops the run (the run stops for the non-finite values). The main thread reads
:attr:`EvalWatch.reason` and stops as it does for a signal: a checkpoint, the policy, the
summary (``stopped``: the reason). One process reads it at each evaluation point, once the
previous evaluation is seen (none skipped: the stop is at the evaluation point after the
one that reached, the same env step every time); several processes at every chunk
boundary.

The best policy is part of the run's state (:class:`BestPolicies`): a run's best is the
mean return over its seeds, a population's (``jaxspreeze sweep``) each member's over the
member's seeds. Each new best is written to ``best/`` (its actor, and a line of
``best/best.jsonl``: unit, env steps, return, standard error, episodes, starts, file)
and copied to the file users read (``policy-best.msgpack``; a member's
``policy-<m>-best.msgpack``). A resume from a checkpoint at step ``c`` keeps the lines at
or before ``c`` (not the final evaluation's, taken again when the run ends) and restores
each unit's best from them: value, step and file. Files no kept checkpoint can need are
removed as the run goes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxspreeze.agent import policy as policy_lib
from jaxspreeze.agent.evaluate import EvalResult, Snapshot
from jaxspreeze.core.types import Record
from jaxspreeze.run.records import STARTS, seeds_se
from jaxspreeze.run.stopping import GracefulStop, stop_at
from jaxspreeze.setup import distributed, population
from jaxspreeze.store import checkpoint

BEST_POLICY_FILE = "policy-best.msgpack"
BEST_DIR = "best"
JOURNAL = "best.jsonl"
REACHED = "reached"  # a stop reason the watch gives starts with it
OnEval = Callable[[dict[str, Any]], Any]
# write(path, actor, unit): a unit's best actor (leaves [slots, ...]) as a policy file
Write = Callable[[Path, Any, "int | None"], None]


def best_file(unit: int | None) -> str:
    """The file users read for a unit's best: ``policy-best.msgpack`` (a run, ``None``) or
    ``policy-<m>-best.msgpack`` (member ``m`` of a population)."""
    return BEST_POLICY_FILE if unit is None else f"policy-{unit}-best.msgpack"


@dataclass(frozen=True)
class Best:
    """One unit's best evaluation: a line of ``best/best.jsonl``."""

    unit: int | None  # None: the run (mean over its seeds); m: member m of a population
    env_steps: int
    eval_return: float
    eval_return_se: float | None
    episodes: int | None
    starts: str
    final: bool
    file: str  # under best/

    def record(self) -> Record:
        """The JSON form (summary.json's ``best_eval``, a journal line)."""
        return {**asdict(self), "policy": best_file(self.unit)}


class BestPolicies:
    """The best evaluation of each unit of a run in ``run_dir``, kept on disk.

    ``slots``: per unit the slots whose mean is its return (one unit ``None`` over every
    slot for a run; one per member for a population); ``write`` writes a unit's actor.
    """

    def __init__(self, run_dir: str | Path, slots: dict[int | None, range], write: Write):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / BEST_DIR
        self.slots = slots
        self.write = write
        self.lines: list[Best] = []
        self.best: dict[int | None, Best] = {}

    def start_new(self) -> None:
        """A new run: no best yet (a previous run's in this directory, ``--overwrite``, go)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        for unit in self.slots:
            (self.run_dir / best_file(unit)).unlink(missing_ok=True)

    def restore(self, env_steps: int) -> None:
        """Keep the bests of evaluations at or before ``env_steps`` (a resume's checkpoint),
        the final evaluation's excepted; each unit's best, value, step and file, from them.
        A run from before the journal (none on disk) keeps its files as they are."""
        if not (self.dir / JOURNAL).is_file():
            return
        self.lines = [
            b for b in _read(self.dir / JOURNAL) if b.env_steps <= env_steps and not b.final
        ]
        _replace_text(self.dir / JOURNAL, "".join(_line(b) for b in self.lines))
        self.best = {b.unit: b for b in self.lines}  # (in step order: the last is the best)
        for unit in self.slots:
            public = self.run_dir / best_file(unit)
            if unit in self.best and (self.dir / self.best[unit].file).is_file():
                _copy(self.dir / self.best[unit].file, public)
            elif public.exists():  # from evaluations past the checkpoint: not this run's
                public.unlink()
        self.prune()

    def offer(self, snap: Snapshot, actor: Any, result: EvalResult, episodes: int | None) -> None:
        """An evaluation of ``actor`` (leaves ``[slots, ...]``): each unit it betters
        becomes that unit's best (its file written, then the public copy)."""
        means = np.asarray(result.return_mean, np.float64).reshape(-1)
        se = np.asarray(
            result.return_se if result.return_se is not None else np.full(means.shape, np.nan),
            np.float64,
        ).reshape(-1)
        changed = False
        for unit, slots in self.slots.items():
            value = float(means[slots.start : slots.stop].mean())
            old = self.best.get(unit)
            if not np.isfinite(value) or (old is not None and value <= old.eval_return):
                continue
            unit_se = seeds_se(se[slots.start : slots.stop])
            name = f"{'run' if unit is None else f'm{unit}'}-{snap.env_steps:012d}.msgpack"
            self.dir.mkdir(exist_ok=True)
            self.write(self.dir / name, actor, unit)
            best = Best(unit, snap.env_steps, value, unit_se if np.isfinite(unit_se) else None,
                        episodes, STARTS, snap.final, name)  # fmt: skip
            with (self.dir / JOURNAL).open("a") as f:
                f.write(_line(best))
            self.lines.append(best)
            self.best[unit] = best
            _copy(self.dir / name, self.run_dir / best_file(unit))
            changed = True
        if changed:
            self.prune()

    def prune(self) -> None:
        """Remove the files of bests no kept checkpoint and no unit needs: what a resume
        from a checkpoint at step c restores is each unit's last best at or before c."""
        steps = [int(p.name) for p in checkpoint.list_checkpoints(self.run_dir)]
        needed = {b.file for b in self.best.values()}
        for c in steps:
            at: dict[int | None, Best] = {}
            for b in self.lines:
                if b.env_steps <= c and not b.final:
                    at[b.unit] = b
            needed |= {b.file for b in at.values()}
        if not self.dir.is_dir():
            return
        for path in self.dir.glob("*.msgpack"):
            if path.name not in needed:
                path.unlink(missing_ok=True)

    def records(self) -> dict[str, Record]:
        """Each unit's best (``"run"`` or the member's number as a string), JSON-ready."""
        return {("run" if u is None else str(u)): b.record() for u, b in self.best.items()}


def units(cfg: Any) -> dict[int | None, range]:
    """The units a run keeps a best policy for: the run (``None``, every slot), or each
    member of a population (its slots)."""
    if not cfg.population:
        return {None: range(cfg.slots)}
    return {m: population.member_slots(cfg, m) for m in range(cfg.members)}


def policy_writer(cfg: Any, algo: Any) -> Write:
    """How a run writes a unit's best: the whole actor as ``policy.msgpack`` is (a run), or
    a member's slots as a standalone file with the member's own config (a population)."""

    def write(path: Path, actor: Any, unit: int | None) -> None:
        if unit is None:
            policy_lib.save_policy(path.parent, actor, path.name)
            return
        slots = population.member_slots(cfg, unit)
        own = jax.tree.map(lambda x: np.asarray(x)[slots.start : slots.stop], actor)
        one = dataclasses.replace(cfg, population=(cfg.population[unit],))
        policy_lib.save_policy_file(path, policy_lib.Policy(one, algo, own))

    return write


class EvalWatch:
    """Sees every evaluation of a run (``run_dir``): keeps the best policy (``bests``;
    none if not given), and the reason to stop once one reaches ``stop_at_return`` or
    ``on_eval`` returns True."""

    def __init__(
        self,
        run_dir: str | Path,
        stop_at_return: float | None = None,
        on_eval: OnEval | None = None,
        report: Callable[[str], None] | None = None,
        bests: BestPolicies | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.stop_at_return = stop_at_return
        self.on_eval = on_eval
        self.report = report or (lambda message: None)
        self.bests = bests
        self._reason: str | None = None
        self._lock = threading.Lock()

    @property
    def stops(self) -> bool:
        """Whether an evaluation may stop the run (a target, or an ``on_eval``)."""
        return self.stop_at_return is not None or self.on_eval is not None

    @property
    def best(self) -> float | None:
        """The run's best evaluation return so far (None before the first)."""
        best = self.bests.best.get(None) if self.bests is not None else None
        return None if best is None else best.eval_return

    @property
    def reason(self) -> str | None:
        """Why the run should stop (None: go on)."""
        with self._lock:
            return self._reason

    def restore(self, env_steps: int, history: list[Record]) -> None:
        """A resumed run: the bests kept at or before ``env_steps`` (its checkpoint), and
        the reason to stop if an evaluation kept in ``history`` already reached the target."""
        if self.bests is not None:
            self.bests.restore(env_steps)
        if self.stop_at_return is None:
            return
        for r in history:
            ret = r.get("eval_return")
            if r.get("kind") == "eval" and isinstance(ret, (int, float)) and not r.get("final"):
                if ret >= self.stop_at_return:
                    self._stop(
                        f"{REACHED} --stop-at-return {self.stop_at_return:g}: return {ret:.1f} "
                        f"at the evaluation of {r['env_steps']:,} env steps (before the resume)"
                    )
                    return

    def seen(
        self,
        snap: Snapshot,
        result: EvalResult,
        record: Record | None = None,
        actor: Any = None,
        tripped: bool = False,
    ) -> None:
        """One evaluation (its ``record``, the ``actor`` evaluated: the snapshot's if not
        given); ``tripped``: a chunk failed its finiteness check (no best, no stop from it)."""
        record = record or {}
        actor = snap.actor if actor is None else actor
        mean = float(np.mean(np.asarray(result.return_mean)))
        if tripped:
            return
        if self.bests is not None and actor is not None:
            self.bests.offer(snap, actor, result, record.get("eval_episodes"))
        why = None
        if self.stop_at_return is not None and mean >= self.stop_at_return:
            se = record.get("eval_return_se")
            with_se = f" ± {se:.1f} s.e." if isinstance(se, float) and np.isfinite(se) else ""
            why = (
                f"{REACHED} --stop-at-return {self.stop_at_return:g}: return {mean:.1f}{with_se} "
                f"({_protocol(record)}) at the evaluation of {snap.env_steps:,} env steps"
            )
        if self.on_eval is not None:
            keys = ("eval_return_se", "eval_episodes", "eval_starts")
            call = {
                "env_steps": snap.env_steps,
                "chunk": snap.chunk,
                "final": snap.final,
                "eval_return": mean,
                "eval_return_std": float(np.mean(np.asarray(result.return_std))),
                "eval_length": float(np.mean(np.asarray(result.length_mean))),
                **{k: record[k] for k in keys if k in record},
            }
            try:
                verdict = self.on_eval(call)
            except Exception as e:  # the user's code: reported, the run goes on
                self.report(f"on_eval raised {type(e).__name__}: {e}")
                verdict = None
            if verdict is True and why is None:
                why = f"{REACHED} on_eval's stop at the evaluation of {snap.env_steps:,} env steps"
        if why is not None and not snap.final:
            self._stop(why)

    def _stop(self, why: str) -> None:
        with self._lock:
            self._reason = self._reason or why


def _protocol(record: Record) -> str:
    """``128 episodes per seed, fresh starts`` (what an evaluation's record says)."""
    episodes = record.get("eval_episodes")
    each = f"{episodes} episodes per seed, " if episodes else ""
    return f"{each}{record.get('eval_starts', STARTS)} starts"


def _line(best: Best) -> str:
    return json.dumps(asdict(best)) + "\n"


def _read(path: Path) -> list[Best]:
    """The journal's lines (a line cut short by a crash is dropped)."""
    out = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            out.append(Best(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def _replace_text(path: Path, text: str) -> None:
    """Write ``path`` atomically (its directory made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _copy(src: Path, dst: Path) -> None:
    """Copy ``src`` over ``dst`` atomically."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def stop_reason(stop: GracefulStop | None, watch: EvalWatch | None, chunk: int) -> str | None:
    """Why the run stops after chunk ``chunk``: a signal (:func:`jaxspreeze.run.stopping.stop_at`)
    or a target an evaluation reached (``watch``, process 0's). Several processes: process
    0 proposes the stop and every process stops at the same, agreed chunk."""
    reached = watch.reason if watch is not None else None
    several = distributed.process_count() > 1
    if reached and several and distributed.agreed_stop() is None:
        distributed.propose_stop(chunk, reached)
    return stop_at(stop, chunk) or (None if several else reached)


def stopped_line(stopped: str | None, run_dir: Path) -> str | None:
    """The console's last line of a run a reached target stopped (None for any other)."""
    if stopped is None or not stopped.startswith(REACHED):
        return None
    return f"stopped: {stopped}; checkpoint and policy written in {run_dir}"
