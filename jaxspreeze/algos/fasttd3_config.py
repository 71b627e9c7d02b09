"""FastTD3's config, the fast recipes' shared fields and checks, and FastTD3's registry
entry, without JAX (the maths: :mod:`jaxspreeze.algos.fasttd3`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jaxspreeze.algos import deterministic_config
from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec

# The run-level defaults: FastTD3's shape, 2 gradient steps per vectorised env step at a
# replay ratio of 2 x 256 / 8 = 64 (the paper's 2 x 32,768 / 1,024), sized so that
# ``jaxspreeze train --algo fasttd3`` on gymnax/Pendulum-v1 finishes in a few minutes on a
# 2-core CPU (20k env steps, 5,000 critic updates; it reached -87 there). On an accelerator
# use the paper's sizes: --num-envs 1024 --batch-size 32768 --fasttd3.actor-hidden 512 256
# 128 --fasttd3.critic-hidden 1024 512 256 (and a value range fitting the task's returns).
DEFAULTS = {
    "total_steps": 20_000,
    "num_envs": 8,
    "rollout_steps": 1,
    "grad_steps": 2,
    "batch_size": 256,
    "buffer_size": 100_000,
    "learning_starts": 1_000,
    "chunk_iterations": 100,
}
# on a GPU or TPU: the paper's sizes (1,024 envs, 2 gradient steps of 32,768 per env
# step, a 1M-transition buffer); the widths stay the CPU's (set --fasttd3.critic-hidden
# 1024 512 256 --fasttd3.actor-hidden 512 256 128 for the paper's, as the GPU presets do)
ACCELERATOR_DEFAULTS = {
    "total_steps": 10_000_000,
    "num_envs": 1024,
    "batch_size": 32_768,
    "buffer_size": 1_048_576,
    "learning_starts": 10_240,
    "chunk_iterations": 50,
}


@dataclass(frozen=True)
class RecipeConfig:
    """What the fast recipes (FastTD3, FastSAC) share: AdamW, a fast target update,
    n-step returns and a categorical twin critic wider than the actor."""

    actor_lr: float = 3e-4
    """Actor learning rate (AdamW)."""
    critic_lr: float = 3e-4
    """Critic learning rate (AdamW)."""
    weight_decay: float = 0.1
    """AdamW's decoupled weight decay (actor and critic)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.1
    """Polyak coefficient of the target updates."""
    n_step: int = 1
    """Rewards summed per critic target (n-step returns; 1: one-step TD)."""
    num_atoms: int = field(default=101, metadata=base.kinds("shape"))
    """Atoms of the categorical critic's support."""
    v_min: float = -1000.0
    """Lowest atom: the smallest discounted return the critic can represent."""
    v_max: float = 1000.0
    """Highest atom (the default range holds returns of |reward| <= 10 at gamma 0.99; the
    ``target_outside`` metric is the fraction of targets that fall outside it)."""
    actor_hidden: tuple[int, ...] = field(default=(128, 128), metadata=base.kinds("shape"))
    """Hidden layer widths of the actor (the paper's on a GPU: 512 256 128)."""
    critic_hidden: tuple[int, ...] = field(default=(256, 256), metadata=base.kinds("shape"))
    """Hidden layer widths of each critic, wider than the actor (on a GPU: 1024 512 256)."""
    torso: base.Torso = field(
        default="auto", metadata=base.kinds("shape", absent="mlp")
    )
    """The networks' torso before the hidden layers: auto = minatar for an image
    observation (H, W, C) under 32 a side, nature for a larger one, mlp otherwise; mlp
    flattens the observation (docs/algorithms.md, Network torsos)."""
    critic_layer_norm: bool = field(default=False, metadata=base.kinds("shape"))
    """A LayerNorm after each hidden layer of the critics (before the ReLU)."""
    normalize_obs: bool = field(default=True, metadata=base.kinds("shape", absent=False))
    """Normalise observations by running statistics (mean, variance) of those collected,
    kept on the actor side and saved with the policy (the buffer keeps raw ones); on in
    FastTD3's recipe (a saved run from before the option trained without)."""


@dataclass(frozen=True)
class FastTD3Config(RecipeConfig):
    """FastTD3's own hyperparameters: the recipe's, and TD3's smoothing, delay and
    per-env exploration noise."""

    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise (fraction of the half-width)."""
    target_noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (fraction of the half-width)."""
    noise_min: float = 0.001
    """Smallest per-env exploration noise std (fraction of the half-width)."""
    noise_max: float = 0.4
    """Largest per-env exploration noise std; each env's is uniform in [noise_min, noise_max]."""


def supports(spec: EnvSpec) -> str | None:
    """Why FastTD3 cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return (
            "FastTD3 needs a continuous action space; use --algo ppo or --algo pqn for "
            "discrete actions"
        )
    return None


def _check_widths(value: Any, name: str) -> None:
    if (
        not isinstance(value, tuple)
        or not value
        or any(isinstance(w, bool) or not isinstance(w, int) or w <= 0 for w in value)
    ):
        raise ConfigError(name, f"must be positive layer widths, got {value!r}")


def _check_integer(value: Any, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(name, f"must be an integer, got {value!r}")


def check_num_atoms(cfg: Any, prefix: str) -> None:
    """ConfigError unless ``cfg.num_atoms`` is an integer >= 2."""
    _check_integer(cfg.num_atoms, f"{prefix}num_atoms")
    if cfg.num_atoms < 2:
        raise ConfigError(f"{prefix}num_atoms", f"must be at least 2, got {cfg.num_atoms}")


def check_value_range(cfg: Any, prefix: str) -> None:
    """ConfigError unless ``cfg.v_min < cfg.v_max`` are numbers (the atoms' range)."""
    for name in ("v_min", "v_max"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{prefix}{name}", f"must be a number, got {value!r}")
    if not cfg.v_min < cfg.v_max:
        raise ConfigError(
            f"{prefix}v_min", f"must be < {prefix}v_max ({cfg.v_max}), got {cfg.v_min}"
        )


def check_n_step(cfg: Any, prefix: str, run: Any) -> None:
    """ConfigError unless ``cfg.n_step`` is an integer >= 1 that the run's buffer can serve.

    With ``run`` (the algorithm in use): the warm-up must hold a run of ``n_step``
    transitions of every env (``learning_starts >= (n_step - 1) * num_envs``), and one
    host worker must write the buffer (several interleave their envs' blocks, so an env's
    next transition is not ``num_envs`` slots on: :func:`~jaxspreeze.data.replay.sample_sequences`).
    """
    _check_integer(cfg.n_step, f"{prefix}n_step")
    if cfg.n_step < 1:
        raise ConfigError(f"{prefix}n_step", f"must be at least 1, got {cfg.n_step}")
    if run is None or cfg.n_step == 1:
        return
    if run.learning_starts < (cfg.n_step - 1) * run.num_envs:
        raise ConfigError(
            "learning_starts",
            f"must be at least ({prefix}n_step - 1) x num_envs = "
            f"{(cfg.n_step - 1) * run.num_envs} so every env has {cfg.n_step} transitions "
            f"to sample; got {run.learning_starts}",
        )
    if run.host_workers != 1:
        raise ConfigError(
            f"{prefix}n_step",
            f"n-step returns ({cfg.n_step}) need host_workers 1 (the workers' blocks "
            f"interleave in the buffer); got host_workers {run.host_workers}",
        )


def check_widths(cfg: Any, prefix: str) -> None:
    """ConfigError unless ``actor_hidden`` and ``critic_hidden`` are positive layer widths
    and ``torso`` is a known torso."""
    _check_widths(cfg.actor_hidden, f"{prefix}actor_hidden")
    _check_widths(cfg.critic_hidden, f"{prefix}critic_hidden")
    base.check_torso(cfg, prefix)


def validate(cfg: FastTD3Config, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad FastTD3 field (and grad_steps when ``run`` is given)."""
    deterministic_config.check_config(
        cfg,
        prefix,
        ("actor_lr", "critic_lr", "policy_delay", "num_atoms"),
        ("weight_decay", "target_noise", "target_noise_clip", "noise_min", "noise_max"),
    )
    _check_integer(cfg.policy_delay, f"{prefix}policy_delay")
    check_num_atoms(cfg, prefix)
    if cfg.noise_min > cfg.noise_max:
        raise ConfigError(
            f"{prefix}noise_min",
            f"must be <= {prefix}noise_max ({cfg.noise_max}), got {cfg.noise_min}",
        )
    check_value_range(cfg, prefix)
    check_n_step(cfg, prefix, run)
    if run is not None and run.grad_steps % cfg.policy_delay:
        raise ConfigError(
            "grad_steps",
            f"must be a multiple of {prefix}policy_delay ({cfg.policy_delay}) so the actor "
            f"updates every policy_delay critic updates; got {run.grad_steps}",
        )
    check_widths(cfg, prefix)


def grad_step_multiple(cfg: FastTD3Config) -> int:
    """Gradient steps per iteration must be a multiple of ``policy_delay``."""
    return cfg.policy_delay


SPEC = base.AlgoSpec(
    name="fasttd3",
    config_cls=FastTD3Config,
    on_policy=False,
    defaults=DEFAULTS,
    supports=supports,
    validate=validate,
    maths="jaxspreeze.algos.fasttd3",
    grad_step_multiple=grad_step_multiple,
    label="FastTD3",
    accelerator_defaults=ACCELERATOR_DEFAULTS,
    member_fields=(
        "actor_lr",
        "critic_lr",
        "gamma",
        "tau",
        "noise_min",
        "noise_max",
        "target_noise",
        "target_noise_clip",
    ),
)
