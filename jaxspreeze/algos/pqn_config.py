"""PQN's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.pqn`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jaxspreeze.algos import epsilon_config
from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec

# the optimisers --pqn.optimizer names (purejaxql's PQN uses RAdam)
OPTIMIZERS = ("radam", "adam")
# the recurrent cells of --pqn.memory ("none": feed-forward)
MEMORIES = base.MEMORIES


@dataclass(frozen=True)
class PQNConfig(epsilon_config.EpsilonGreedy):
    """PQN's own hyperparameters (rollout = num_envs x rollout_steps of RunConfig; each
    epoch cuts it into minibatches of batch_size; epsilon falls over the run's updates)."""

    lr: float = 1e-3
    """Learning rate of the Q-network."""
    gamma: float = 0.99
    """Discount factor."""
    q_lambda: float = 0.9
    """Lambda of the Q(lambda) targets: 0 = one-step Q-learning, 1 = Monte Carlo returns
    (bootstrapped where the rollout or an episode is cut short)."""
    epochs: int = 4
    """Passes over each rollout."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip."""
    optimizer: Literal["radam", "adam"] = field(default="radam", metadata=base.kinds("shape"))
    """RAdam (purejaxql's PQN) or Adam."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over training (give --pqn.no-anneal-lr to keep
    it constant)."""
    reward_scaling: float = 0.1
    """Rewards are multiplied by this in the targets (purejaxql's CartPole scale); the
    reported returns are the env's own."""
    hidden: tuple[int, ...] = field(default=(128, 128), metadata=base.kinds("shape"))
    """Hidden layer widths of the Q-network."""
    layer_norm: bool = field(default=True, metadata=base.kinds("shape"))
    """A LayerNorm after each hidden layer (PQN's stabiliser in place of a target network)."""
    torso: base.Torso = field(default="auto", metadata=base.kinds("shape"))
    """The Q-network's torso before the hidden layers: auto = minatar for an image
    observation (H, W, C) under 32 a side, nature for a larger one, mlp otherwise; mlp
    flattens the observation (docs/algorithms.md, Network torsos)."""
    memory: Literal["none", "gru", "lstm"] = field(
        default="none", metadata=base.kinds("shape", absent="none")
    )
    """A recurrent Q-network: none = feed-forward; gru or lstm = the torso's features go
    through a cell whose state is the policy's carry (reset at every episode's first step)
    before the hidden layers; each minibatch holds whole envs' rollouts, replayed from the
    carry they started with (docs/algorithms.md, Recurrent PQN)."""
    memory_size: int = field(default=128, metadata=base.kinds("shape", absent=128))
    """Width of the recurrent cell (--pqn.memory gru|lstm)."""
    last_action: bool = field(default=False, metadata=base.kinds("shape", absent=False))
    """Feed the previous action (one-hot; zeros at an episode's first step) to the cell
    beside the torso's features, as purejaxql's PQN-RNN (--pqn.memory gru|lstm)."""


def supports(spec: EnvSpec) -> str | None:
    """PQN picks among discrete actions (a Q-value per action)."""
    if not spec.discrete:
        return (
            "PQN needs a discrete action space (a Q-value per action); use --algo ppo, sac "
            "or td3 for continuous actions"
        )
    return None


def validate(cfg: PQNConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad PQN field (and batch_size when ``run`` is given)."""
    base.check_positive(cfg, prefix, ("lr", "epochs", "max_grad_norm", "reward_scaling"))
    base.check_unit(cfg, prefix, ("gamma", "q_lambda"))
    epsilon_config.check(cfg, prefix)
    if not isinstance(cfg.epochs, int) or isinstance(cfg.epochs, bool):
        raise ConfigError(f"{prefix}epochs", f"must be an integer, got {cfg.epochs!r}")
    if cfg.optimizer not in OPTIMIZERS:
        choices = ", ".join(OPTIMIZERS)
        raise ConfigError(f"{prefix}optimizer", f"choose one of {choices}, got {cfg.optimizer!r}")
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)
    _check_memory(cfg, prefix)
    if run is not None:
        rollout = run.num_envs * run.rollout_steps
        if run.batch_size > rollout or rollout % run.batch_size:
            raise ConfigError(
                "batch_size",
                f"PQN minibatch {run.batch_size} must divide the rollout of {rollout} "
                "transitions (num_envs x rollout_steps)",
            )
        if cfg.memory != "none":
            _check_sequences(cfg, prefix, run)


def _check_memory(cfg: PQNConfig, prefix: str) -> None:
    """ConfigError naming the first bad recurrent field (--pqn.memory and its settings)."""
    base.check_memory(cfg, prefix)
    if not isinstance(cfg.last_action, bool):
        raise ConfigError(f"{prefix}last_action", f"must be true or false, got {cfg.last_action!r}")


def _check_sequences(cfg: PQNConfig, prefix: str, run: Any) -> None:
    """What a recurrent PQN needs of the run: minibatches of whole envs' rollouts, and one
    device (the data-parallel pieces do not carry the rollout's start)."""
    if run.batch_size % run.rollout_steps:
        raise ConfigError(
            "batch_size",
            f"a recurrent PQN minibatch holds whole envs' rollouts of rollout_steps "
            f"{run.rollout_steps}; {run.batch_size} is not a multiple",
        )
    placement = getattr(run, "placement", "auto")
    if placement in ("data", "split-data"):
        raise ConfigError(
            f"{prefix}memory",
            f"a recurrent policy ({cfg.memory}) runs on one device so far, not on the "
            f"{placement} placement; use --placement single or --pqn.memory none",
        )


# run-level sizes when the user sets none: 32 envs x 32 steps = 1,024 transitions per
# rollout in 4 minibatches of 256, with PQNConfig's defaults (4 epochs: 16 gradient steps
# per rollout). PQN has no replay buffer, warm-up or per-iteration grad_steps (its updates
# per iteration are epochs x minibatches): those sizes are 0. Measured on CPU, seeds 0-2:
# experiments/results/pqn_cpu.md.
DEFAULTS = {
    "total_steps": 200_000,
    "num_envs": 32,
    "rollout_steps": 32,
    "grad_steps": 0,
    "batch_size": 256,
    "buffer_size": 0,
    "learning_starts": 0,
    "chunk_iterations": 20,
}

SPEC = base.AlgoSpec(
    name="pqn",
    config_cls=PQNConfig,
    on_policy=True,
    defaults=DEFAULTS,
    supports=supports,
    validate=validate,
    maths="jaxspreeze.algos.pqn",
    member_fields=("lr", "gamma", "q_lambda", *epsilon_config.FIELDS, "reward_scaling"),
    splits=False,
)
