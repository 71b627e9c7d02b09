"""Guards: turn a chunk's cheap in-chunk finiteness flags into a clear stop message.

Every phase of an algorithm reports a ``finite`` flag (1 when its losses, gradient
norms and, for the actor, the temperature were finite at every gradient step); the
iteration keeps them as ``critic_finite`` / ``actor_finite`` and
:func:`jaxspreeze.run.records.chunk_record` reduces them over the chunk and the seeds. A non-finite parameter makes the next loss
non-finite, so the flag catches it one step later. No debug mode, no host callback.

:class:`Tripwire` carries the first such message from the metrics thread, which builds
the records, to the main thread, which stops training at the next chunk boundary.
"""

from __future__ import annotations

import threading
from typing import Any

from jaxspreeze.core.errors import NonFiniteError
from jaxspreeze.core.types import Record

QUANTITIES = {
    "critic_finite": "critic loss/gradients (or critic parameters)",
    "actor_finite": "actor loss/gradients/temperature (or actor parameters)",
}


def nonfinite_message(record: dict[str, Any]) -> str | None:
    """A one-paragraph error for a chunk record whose guard flags are False, else None.

    Names the quantity, the env step (the end of the chunk in which it happened; the
    previous chunk was still finite), the chunk and, with several seeds, which seeds.
    """
    bad = [name for name in QUANTITIES if record.get(name) is False]
    if not bad:
        return None
    steps = record.get("env_steps")
    chunk = record.get("chunk")
    where = f"in the chunk ending at env step {steps}" if steps is not None else "in a chunk"
    if chunk is not None:
        where += f" (chunk {chunk})"
    parts = []
    for name in bad:
        text = QUANTITIES[name]
        per_seed = record.get(f"{name}_per_seed")
        if isinstance(per_seed, list) and len(per_seed) > 1:
            seeds = [i for i, ok in enumerate(per_seed) if not ok]
            text += f" in seed(s) {', '.join(map(str, seeds))}"
        parts.append(text)
    return (
        f"non-finite {' and '.join(parts)} {where}. Training stopped. Lower the learning "
        "rates or check the environment's rewards and observations."
    )


def checkpoint_note(
    latest: Any, run_dir: Any, checkpoint_every: int = 0, first_chunk: bool = False
) -> str:
    """What a non-finite stop leaves: the newest checkpoint (a path or None) and how to go on
    (``checkpoint_every``: the run's cadence, 0 for a checkpoint only at the end;
    ``first_chunk``: the run's first chunk was already non-finite, so no cadence could
    have kept a checkpoint before it: they are written at chunk boundaries).

    A resumed run takes changed learning rates from its new config, so resuming with
    smaller ones is a real way on.
    """
    if latest is None and first_chunk:
        return (
            "No checkpoint was written before it, nor could be: it came in the run's first chunk, "
            "and checkpoints are written at chunk boundaries (a smaller --chunk-iterations gives "
            "earlier ones); start the run again with smaller learning rates."
        )
    if latest is None and checkpoint_every > 0:
        return (
            f"No checkpoint was written before it (the first was due at {checkpoint_every:,} "
            "env steps: a smaller --checkpoint-every keeps an earlier one); start the run "
            "again with smaller learning rates."
        )
    if latest is None:
        return (
            "No checkpoint was written before it (set --checkpoint-every to keep one); "
            "start the run again with smaller learning rates."
        )
    return (
        f"The last good checkpoint, {latest}, is kept: resume it with smaller learning "
        f"rates (jaxspreeze train --resume {run_dir} --<algo>.<name>-lr ...)."
    )


class Tripwire:
    """The first non-finite chunk, handed from the thread that sees it to the main thread.

    The metrics thread passes every chunk record through :meth:`check`; the main thread
    calls :meth:`raise_if_tripped` at chunk boundaries. The message is written once,
    before the event is set, and only read after it is set.
    """

    def __init__(self) -> None:
        self._tripped = threading.Event()
        self._message: str | None = None
        self._chunk: int | None = None  # the first non-finite chunk
        self._finite_seen = False  # a finite chunk came before it

    def check(self, record: Record) -> Record:
        """Trip on the first record whose guard flags are False; returns ``record``."""
        message = nonfinite_message(record)
        if message is not None and not self._tripped.is_set():
            self._message = message
            self._chunk = record.get("chunk")
            self._tripped.set()
        elif message is None and record.get("kind", "chunk") == "chunk":
            self._finite_seen = True
        return record

    def tripped_by(self, chunk: int) -> bool:
        """True once a non-finite chunk at or before ``chunk`` was seen (a chunk record
        without its number counts as before any)."""
        if not self._tripped.is_set():
            return False
        return self._chunk is None or self._chunk <= chunk

    def raise_if_tripped(self) -> None:
        """Raise :class:`~jaxspreeze.core.errors.NonFiniteError` with the message, once tripped."""
        if self._tripped.is_set():
            error = NonFiniteError(self._message)
            error.first_chunk = not self._finite_seen  # no checkpoint could come before it
            raise error
