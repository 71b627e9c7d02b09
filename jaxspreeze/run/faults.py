"""What a run's failures become: one-line messages, and every process stopping together.

:func:`explained` wraps the chunk loop: a NaN/inf names the newest checkpoint, a host
env's failure what is kept and how to go on, a failed collective of a multi-process run
the peer that died (the process then exits at once); every failure first closes the
metrics thread, so that the sinks keep what they have. :func:`agree` makes a step that
each process takes on its own a collective: when one process fails it, all stop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import jax

from jaxspreeze.core.errors import HostEnvError, NonFiniteError, ProcessError
from jaxspreeze.host.workers import WorkerStalledError
from jaxspreeze.run.guards import checkpoint_note
from jaxspreeze.run.lines import host_env_note
from jaxspreeze.setup import distributed
from jaxspreeze.sinks.metrics import MetricsThread
from jaxspreeze.store import checkpoint

PEER_WAIT_S = 30.0  # how long a process whose collective failed asks who died


@contextlib.contextmanager
def explained(
    run_dir: Path, metrics_thread: MetricsThread | None, checkpoint_every: int = 0
) -> Iterator[None]:
    """Run the chunks (or the start: no ``metrics_thread`` yet): their failures re-raised
    with what the run directory keeps (``checkpoint_every``: the run's checkpoint
    cadence, for the advice)."""
    close = metrics_thread.close if metrics_thread is not None else lambda timeout: None
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if distributed.process_count() == 1:
            close(timeout=10.0)
            raise
        # a collective failed: a peer died (or the coordinator went away). End at once,
        # naming it, rather than wait in the next collective or the shutdown barrier
        distributed.abort(distributed.peer_failure_message(e, wait_s=PEER_WAIT_S))
        raise
    except NonFiniteError as e:
        close(timeout=10.0)
        first = getattr(e, "first_chunk", False)
        note = checkpoint_note(checkpoint.latest(run_dir), run_dir, checkpoint_every, first)
        raise NonFiniteError(f"{e} {note}") from None
    except HostEnvError as e:
        # a host env's worker failed or stalled: the message names them; add what is kept
        close(timeout=10.0)
        slow = " (an env that is only slow: raise --host-stall-timeout-s)"
        note = host_env_note(checkpoint.latest(run_dir), run_dir)
        e.args = (f"{e}{slow if isinstance(e, WorkerStalledError) else ''}; {note}",)
        raise
    except BaseException:
        # an error or Ctrl-C: flush what the sinks have and stop the live console (the
        # evaluator is a daemon thread and is left to the interpreter's exit)
        close(timeout=10.0)
        raise


def agree(error: BaseException | None, what: str) -> None:
    """Raise ``error`` if this process failed ``what``; ProcessError if another did.

    Every process of a multi-process run calls it at the same point (a collective), so
    that all of them stop when one fails a step they took on their own. In one process it
    only raises ``error``.
    """
    failed = distributed.failed_processes(error is None)
    if error is not None:
        raise error
    if failed:
        raise ProcessError(
            f"process {failed[0]} of {distributed.process_count()} could not {what} (its "
            "own message says why); stopping"
        )
