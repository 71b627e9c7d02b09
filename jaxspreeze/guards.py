"""Guards: turn the loop's cheap in-chunk finiteness flags into a clear stop message.

Every phase of an algorithm reports a ``finite`` flag (1 when its losses, gradient norms
and, for the actor, the temperature were finite at every gradient step); the loop keeps
them as ``critic_finite`` / ``actor_finite`` and :func:`jaxspreeze.trainer.chunk_record`
reduces them over the chunk and the seeds. A non-finite parameter makes the next loss
non-finite, so the flag catches it one step later. No debug mode, no host callback.
"""

from __future__ import annotations

from typing import Any

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
        f"non-finite {' and '.join(parts)} {where}. Training stopped; the last good "
        "checkpoint is kept. Lower the learning rates, check the environment's rewards "
        "and observations, or resume from the checkpoint with a smaller learning rate."
    )
