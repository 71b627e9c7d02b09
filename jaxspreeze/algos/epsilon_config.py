"""What the value-based learners (PQN, DQN) share without JAX: epsilon-greedy's config
fields and checks (the schedule itself: :func:`jaxspreeze.algos.pqn.epsilon`)."""

from __future__ import annotations

from dataclasses import dataclass

from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

# the epsilon-greedy fields: each a float32 leaf of the actor side a population may vary
FIELDS = ("eps_start", "eps_end", "eps_decay")


@dataclass(frozen=True)
class EpsilonGreedy:
    """Epsilon-greedy exploration: the probability of a uniformly random action falls
    linearly from ``eps_start`` to ``eps_end`` over the first ``eps_decay`` of the run
    (each learner says what it counts the run in and sets its own ``eps_decay``)."""

    eps_start: float = 1.0
    """Epsilon-greedy: the probability of a random action at the start of the run."""
    eps_end: float = 0.05
    """Epsilon-greedy: the probability of a random action after the decay."""
    eps_decay: float = 0.25
    """The fraction of the run over which epsilon falls linearly from eps_start to eps_end."""


def check(cfg: EpsilonGreedy, prefix: str) -> None:
    """ConfigError naming the first bad epsilon field: each in [0, 1], ``eps_decay`` > 0."""
    base.check_unit(cfg, prefix, FIELDS)
    if cfg.eps_decay == 0:
        raise ConfigError(f"{prefix}eps_decay", "must be > 0 (a fraction of the run), got 0")
