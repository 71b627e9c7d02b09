"""PPO's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.ppo`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec

# the continuous policies (--ppo.policy) and the tanh policy's std forms (--ppo.tanh-std)
CONTINUOUS = ("clipped", "tanh")
TANH_STDS = ("state", "scalar")
# the recurrent cells of --ppo.memory ("none": feed-forward), and the placements a
# recurrent policy does not run on yet (their pieces do not carry the rollout's start)
MEMORIES = base.MEMORIES
MEMORY_PLACEMENTS_REFUSED = ("split", "data", "split-data")


@dataclass(frozen=True)
class PPOConfig:
    """PPO's own hyperparameters (rollout = num_envs x rollout_steps of RunConfig)."""

    lr: float = 1e-3
    """Learning rate of the policy and the value function (Adam)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_eps: float = 0.2
    """Clip range of the probability ratio."""
    vf_coef: float = 0.5
    """Value-loss coefficient."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    epochs: int = 10
    """Passes over each rollout."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over training (on by default; give
    --ppo.no-anneal-lr to keep it constant)."""
    normalize_obs: bool = field(default=False, metadata=base.kinds("shape"))
    """Normalise observations with running statistics."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch."""
    hidden: tuple[int, ...] = field(default=(64, 64), metadata=base.kinds("shape"))
    """Hidden layer widths of the policy and the value network."""
    torso: base.Torso = field(
        default="auto", metadata=base.kinds("shape", absent="mlp")
    )
    """The networks' torso before the hidden layers: auto = minatar for an image
    observation (H, W, C) under 32 a side, nature for a larger one, mlp otherwise; mlp
    flattens the observation (docs/algorithms.md, Network torsos)."""
    policy: Literal["clipped", "tanh"] | None = field(
        default=None, metadata=base.kinds("shape", absent="clipped")
    )
    """Continuous actions: clipped = a Gaussian with a state-independent std (starting at
    1), clipped to the bounds; tanh = brax's Gaussian squashed by tanh (log-probability
    corrected for the squash, std from --ppo.tanh-std, sample-based entropy); default: the
    env family's (tanh on brax, clipped elsewhere). Discrete actions are categorical
    either way."""
    tanh_std: Literal["state", "scalar"] = field(default="state", metadata=base.kinds("shape"))
    """The tanh policy's std: state = softplus of a network head + min_std (brax's); scalar =
    softplus of one learned parameter per action dimension + min_std."""
    min_std: float = 1e-3
    """The tanh policy's smallest std (brax's min_std)."""
    reward_scaling: float = 1.0
    """Rewards are multiplied by this in the value targets and advantages (brax's
    reward_scaling); the reported returns are the env's own."""
    memory: Literal["none", "gru", "lstm"] = field(
        default="none", metadata=base.kinds("shape", absent="none")
    )
    """A recurrent policy: none = feed-forward; gru or lstm = the actor and the value
    function each read the torso's features through their own cell (the policy's carry,
    reset at every episode's first step) before their hidden layers (docs/algorithms.md,
    Recurrent PPO)."""
    memory_size: int = field(default=128, metadata=base.kinds("shape", absent=128))
    """Width of each recurrent cell (--ppo.memory gru|lstm)."""
    recurrent_chunk: int = 0
    """Truncated backpropagation through time: the rollout's env sequences are cut into
    chunks of this many steps (each starting from the carry the rollout had there),
    shuffled whole in the minibatches; 0 = the whole rollout. It must divide
    rollout_steps and batch_size."""


def supports(spec: EnvSpec) -> str | None:
    """PPO handles discrete (categorical) and continuous (Gaussian) actions."""
    return None


def validate(cfg: PPOConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad PPO field (and batch_size when ``run`` is given).

    Fields left unset (None: the env family's default) are checked with the value they
    take: the family's of ``run``'s env, else the default's.
    """
    cfg = base.filled(SPEC, cfg, base.family_of(run.env) if run is not None else "")

    base.check_positive(
        cfg,
        prefix,
        ("lr", "clip_eps", "vf_coef", "epochs", "max_grad_norm", "min_std", "reward_scaling"),
    )
    if cfg.policy not in CONTINUOUS:
        choices = ", ".join(CONTINUOUS)
        raise ConfigError(f"{prefix}policy", f"choose one of {choices}, got {cfg.policy!r}")
    if cfg.tanh_std not in TANH_STDS:
        choices = ", ".join(TANH_STDS)
        raise ConfigError(f"{prefix}tanh_std", f"choose one of {choices}, got {cfg.tanh_std!r}")
    base.check_unit(cfg, prefix, ("gamma", "gae_lambda"))
    if not isinstance(cfg.epochs, int) or isinstance(cfg.epochs, bool):
        raise ConfigError(f"{prefix}epochs", f"must be an integer, got {cfg.epochs!r}")
    ent = cfg.ent_coef
    if isinstance(ent, bool) or not isinstance(ent, (int, float)) or ent < 0:
        raise ConfigError(f"{prefix}ent_coef", f"must be >= 0, got {ent!r}")
    base.check_hidden(cfg, prefix)
    base.check_torso(cfg, prefix)
    _check_memory(cfg, prefix)
    if run is not None:
        rollout = run.num_envs * run.rollout_steps
        if run.batch_size > rollout or rollout % run.batch_size:
            raise ConfigError(
                "batch_size",
                f"PPO minibatch {run.batch_size} must divide the rollout of {rollout} "
                "transitions (num_envs x rollout_steps)",
            )
        if cfg.memory != "none":
            _check_sequences(cfg, prefix, run)


def _check_memory(cfg: PPOConfig, prefix: str) -> None:
    """ConfigError naming the first bad recurrent field (--ppo.memory and its sizes)."""
    base.check_memory(cfg, prefix)
    chunk = cfg.recurrent_chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise ConfigError(
            f"{prefix}recurrent_chunk", f"must be an integer >= 0 (0: the whole rollout), got {chunk!r}"
        )


def sequence_length(cfg: PPOConfig, rollout_steps: int) -> int:
    """The env steps of one training sequence of a recurrent PPO (--ppo.recurrent-chunk,
    0: the whole rollout)."""
    return cfg.recurrent_chunk or rollout_steps


def _check_sequences(cfg: PPOConfig, prefix: str, run: Any) -> None:
    """What a recurrent PPO needs of the run: whole sequences in the rollout and in each
    minibatch, and a placement that carries the rollout's start."""
    length = sequence_length(cfg, run.rollout_steps)
    if run.rollout_steps % length:
        raise ConfigError(
            f"{prefix}recurrent_chunk",
            f"{length} must divide rollout_steps {run.rollout_steps}",
        )
    if run.batch_size % length:
        raise ConfigError(
            "batch_size",
            f"a recurrent PPO minibatch holds whole sequences of {length} steps "
            f"(--ppo.recurrent-chunk, else rollout_steps); {run.batch_size} is not a multiple",
        )
    refused_placement(cfg, prefix, getattr(run, "placement", "auto"))


def refused_placement(cfg: PPOConfig, prefix: str, placement: str) -> None:
    """ConfigError naming --ppo.memory on a placement a recurrent policy does not run on."""
    if cfg.memory != "none" and placement in MEMORY_PLACEMENTS_REFUSED:
        raise ConfigError(
            f"{prefix}memory",
            f"a recurrent policy ({cfg.memory}) runs on one device so far, not on the "
            f"{placement} placement; use --placement single or --ppo.memory none",
        )


# run-level sizes when the user sets none: 16 envs x 64 steps = 1024 transitions per
# rollout in 4 minibatches of 256, with PPOConfig's defaults (lr 1e-3 annealed, 10
# epochs). Measured on 6 seeds each (6 vmapped seeds, CPU) at 200k env steps: CartPole-v1
# 500 on every seed from about 40k steps on, Acrobot-v1 -76 to -87 (random: -500).
# PPO has no replay buffer, warm-up or per-iteration grad_steps (its updates per
# iteration are epochs x minibatches): those sizes are 0.
DEFAULTS = {
    "total_steps": 200_000,
    "num_envs": 16,
    "rollout_steps": 64,
    "grad_steps": 0,
    "batch_size": 256,
    "buffer_size": 0,
    "learning_starts": 0,
    "chunk_iterations": 20,
}

# PPOConfig's fields whose default depends on the env's family (None: the family's), with
# their value where no family says otherwise, and what differs per family. brax: the
# tanh-squashed Gaussian (with the rest of the defaults, seed 0 at 200k env steps: 1,533
# on halfcheetah where the clipped Gaussian scores 258 and brax's own PPO 867 (median of
# 3), 1,000 on inverted_pendulum as clipped, -101 on reacher against clipped's -52);
# Playground keeps clipped (CartpoleBalance learns with it). The runs:
# experiments/results/ppo_family_defaults_cpu.md.
FIELD_DEFAULTS = {"policy": "clipped"}
FAMILY_DEFAULTS = {"brax": {"policy": "tanh"}}

SPEC = base.AlgoSpec(
    name="ppo",
    config_cls=PPOConfig,
    on_policy=True,
    defaults=DEFAULTS,
    supports=supports,
    validate=validate,
    maths="jaxspreeze.algos.ppo",
    member_fields=(
        "lr",
        "gamma",
        "gae_lambda",
        "clip_eps",
        "ent_coef",
        "vf_coef",
        "reward_scaling",
    ),
    field_defaults=FIELD_DEFAULTS,
    family_defaults=FAMILY_DEFAULTS,
)
