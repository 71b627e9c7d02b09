"""FastSAC's config and registry entry, without JAX (the maths: :mod:`jaxspreeze.algos.fastsac`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jaxspreeze.algos import fasttd3_config as fasttd3
from jaxspreeze.algos import spec as base
from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec

# The run-level defaults: FastTD3's (2 gradient steps of 256 per 8-env step, replay ratio
# 64: the paper's 2 x 32,768 / 1,024 scaled to a 2-core CPU; on a GPU or TPU the paper's
# 1,024 envs and batch 32,768). For the paper's widths on an accelerator add
# --fastsac.actor-hidden 512 256 128 --fastsac.critic-hidden 1024 512 256 (and a value
# range fitting the task's returns), as the GPU presets do.
DEFAULTS = dict(fasttd3.DEFAULTS)


@dataclass(frozen=True)
class FastSACConfig(fasttd3.RecipeConfig):
    """FastSAC's own hyperparameters: the recipe's, and SAC's entropy temperature."""

    alpha_lr: float = 3e-4
    """Entropy-temperature learning rate (Adam)."""
    init_alpha: float = 0.01
    """Initial entropy temperature (low: the many parallel envs explore too)."""
    target_entropy_scale: float = 1.0
    """Target entropy is ``-scale * action_dim``."""


def supports(spec: EnvSpec) -> str | None:
    """Why FastSAC cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return (
            "FastSAC needs a continuous action space; use --algo ppo or --algo pqn for "
            "discrete actions"
        )
    return None


def validate(cfg: FastSACConfig, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad FastSAC field (and run-level sizes n_step needs)."""
    base.check_positive(
        cfg, prefix, ("actor_lr", "critic_lr", "alpha_lr", "init_alpha", "num_atoms")
    )
    base.check_unit(cfg, prefix, ("gamma", "tau"))
    for name in ("weight_decay", "target_entropy_scale"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{prefix}{name}", f"must be >= 0, got {value!r}")
    fasttd3.check_num_atoms(cfg, prefix)
    fasttd3.check_value_range(cfg, prefix)
    fasttd3.check_n_step(cfg, prefix, run)
    fasttd3.check_widths(cfg, prefix)


SPEC = base.AlgoSpec(
    name="fastsac",
    config_cls=FastSACConfig,
    on_policy=False,
    defaults=DEFAULTS,
    supports=supports,
    validate=validate,
    maths="jaxspreeze.algos.fastsac",
    label="FastSAC",
    accelerator_defaults=fasttd3.ACCELERATOR_DEFAULTS,
    # the same leaves as SAC: its actor side, a critic's gamma and tau
    member_fields=(
        "actor_lr",
        "critic_lr",
        "gamma",
        "alpha_lr",
        "init_alpha",
        "target_entropy_scale",
        "tau",
    ),
)
