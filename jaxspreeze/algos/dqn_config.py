"""DQN's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.dqn`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jaxspreeze.algos import epsilon_config, fasttd3_config
from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec

# the losses --dqn.loss names: half the squared TD error, or Huber's (delta 1: the same
# inside |error| <= 1, linear outside)
LOSSES = ("mse", "huber")


@dataclass(frozen=True)
class DQNConfig(epsilon_config.EpsilonGreedy):
    """DQN's own hyperparameters (the loop's sizes live in RunConfig: grad_steps gradient
    steps of batch_size per iteration of num_envs x rollout_steps env steps)."""

    # epsilon-greedy's fields are EpsilonGreedy's (first in the table); DQN's own decay:
    eps_decay: float = 0.5
    """The fraction of the run's gradient steps over which epsilon falls linearly from
    eps_start to eps_end (the warm-up acts uniformly at random)."""
    lr: float = 1e-3
    """Learning rate of the Q-network (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.01
    """Target network update: target <- (1 - tau) target + tau online, every
    target_update_every gradient steps (1.0: a hard copy, as Nature DQN and CleanRL with
    --dqn.target-update-every 500 or so; < 1: Polyak averaging)."""
    target_update_every: int = 1
    """Gradient steps between target network updates (1 with tau < 1: Polyak every step)."""
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it
    (give --dqn.no-double for the max of the target network)."""
    n_step: int = 3
    """n-step returns: rewards of n consecutive transitions of one env summed with discount
    up to the first episode end, then the bootstrap (needs host_workers 1 for host envs)."""
    loss: Literal["mse", "huber"] = "mse"
    """The TD loss: mse (half the squared error) or huber (delta 1)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip."""
    hidden: tuple[int, ...] = field(default=(128, 128), metadata=base.kinds("shape"))
    """Hidden layer widths of the Q-network."""
    layer_norm: bool = field(default=False, metadata=base.kinds("shape"))
    """A LayerNorm after each hidden layer."""
    torso: base.Torso = field(default="auto", metadata=base.kinds("shape"))
    """The Q-network's torso before the hidden layers: auto = minatar for an image
    observation (H, W, C) under 32 a side, nature for a larger one, mlp otherwise; mlp
    flattens the observation (docs/algorithms.md, Network torsos)."""


def supports(spec: EnvSpec) -> str | None:
    """DQN picks among discrete actions (a Q-value per action)."""
    if not spec.discrete:
        return (
            "DQN needs a discrete action space (a Q-value per action); use --algo ppo, sac "
            "or td3 for continuous actions"
        )
    return None


def validate(cfg: DQNConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad DQN field (and the run-level sizes n-step
    returns need when ``run`` is given)."""
    base.check_positive(cfg, prefix, ("lr", "max_grad_norm", "tau"))
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    epsilon_config.check(cfg, prefix)
    every = cfg.target_update_every
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ConfigError(f"{prefix}target_update_every", f"must be an integer >= 1, got {every!r}")
    if cfg.loss not in LOSSES:
        raise ConfigError(f"{prefix}loss", f"choose one of {', '.join(LOSSES)}, got {cfg.loss!r}")
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)
    fasttd3_config.check_n_step(cfg, prefix, run)
    if run is not None and run.grad_steps < 1:
        raise ConfigError("grad_steps", f"DQN needs at least 1 per iteration, got {run.grad_steps}")


# run-level sizes when the user sets none: 8 envs x 1 step and 4 gradient steps of 128
# per iteration (64 update samples per env step; rejax's CartPole DQN 50), a buffer of
# 10k transitions after 1k random ones, 100k env steps. Chosen and measured on CPU, seeds
# 0-2: experiments/results/dqn_cpu.md.
DEFAULTS = {
    "total_steps": 100_000,
    "num_envs": 8,
    "rollout_steps": 1,
    "grad_steps": 4,
    "batch_size": 128,
    "buffer_size": 10_000,
    "learning_starts": 1_000,
    "chunk_iterations": 250,
}

SPEC = base.AlgoSpec(
    name="dqn",
    config_cls=DQNConfig,
    on_policy=False,
    defaults=DEFAULTS,
    supports=supports,
    validate=validate,
    maths="jaxspreeze.algos.dqn",
    member_fields=("lr", "gamma", "tau", *epsilon_config.FIELDS),
)
