"""What an evaluation does beyond its record: keep the best policy, stop at a target.

On the evaluator thread (process 0), after each evaluation: the actor of the best
evaluation so far is written to ``policy-best.msgpack`` beside ``policy.msgpack``; an
evaluation at or above ``--stop-at-return`` (the mean over seeds), or a Python callback
``on_eval(record)`` that returns True, asks the run to stop. The main thread reads
:attr:`EvalWatch.reason` at chunk boundaries and stops there as it does for a signal: a
checkpoint, the policy, the summary (``stopped``: the reason).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jaxspreeze.agent.evaluate import EvalResult, Snapshot
from jaxspreeze.agent.policy import save_policy
from jaxspreeze.run.stopping import GracefulStop, stop_at
from jaxspreeze.setup import distributed

BEST_POLICY_FILE = "policy-best.msgpack"
REACHED = "reached"  # a stop reason the watch gives starts with it
OnEval = Callable[[dict[str, Any]], Any]


class EvalWatch:
    """Sees every evaluation of a run (``run_dir``): keeps the best policy, and the reason
    to stop once one reaches ``stop_at_return`` or ``on_eval`` returns True."""

    def __init__(
        self,
        run_dir: str | Path,
        stop_at_return: float | None = None,
        on_eval: OnEval | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.stop_at_return = stop_at_return
        self.on_eval = on_eval
        self.report = report or (lambda message: None)
        self.best: float | None = None
        self._reason: str | None = None
        self._lock = threading.Lock()

    @property
    def reason(self) -> str | None:
        """Why the run should stop (None: go on)."""
        with self._lock:
            return self._reason

    def seen(self, snap: Snapshot, result: EvalResult) -> None:
        """One evaluation (on the evaluator thread)."""
        mean = float(np.mean(np.asarray(result.return_mean)))
        if np.isfinite(mean) and (self.best is None or mean > self.best):
            self.best = mean
            save_policy(self.run_dir, snap.actor, BEST_POLICY_FILE)
        why = None
        if self.stop_at_return is not None and mean >= self.stop_at_return:
            why = (
                f"{REACHED} --stop-at-return {self.stop_at_return:g}: return {mean:.1f} at the "
                f"evaluation of {snap.env_steps:,} env steps"
            )
        if self.on_eval is not None:
            record = {
                "env_steps": snap.env_steps,
                "chunk": snap.chunk,
                "final": snap.final,
                "eval_return": mean,
                "eval_return_std": float(np.mean(np.asarray(result.return_std))),
                "eval_length": float(np.mean(np.asarray(result.length_mean))),
            }
            try:
                verdict = self.on_eval(record)
            except Exception as e:  # the user's code: reported, the run goes on
                self.report(f"on_eval raised {type(e).__name__}: {e}")
                verdict = None
            if verdict is True and why is None:
                why = f"{REACHED} on_eval's stop at the evaluation of {snap.env_steps:,} env steps"
        if why is not None and not snap.final:
            with self._lock:
                self._reason = self._reason or why


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
