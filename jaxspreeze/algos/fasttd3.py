"""FastTD3 (Seo et al., 2025): TD3 with a distributional critic, run massively parallel.

TD3 (:mod:`jaxspreeze.algos.deterministic`) with FastTD3's recipe:

- a *categorical distributional critic* (C51, Bellemare et al., 2017): each of the two
  critics outputs logits over ``num_atoms`` fixed atoms on ``[v_min, v_max]``; the
  Bellman target ``r + gamma (1 - terminated) z`` of the target critic's distribution is
  projected back onto the atoms (:func:`project`) and the critic minimises the
  cross-entropy to it (:func:`cross_entropy`);
- *clipped double Q* on distributions: per sample, the target distribution is the one of
  the target critic whose mean is lower (:func:`lower_mean`); the actor ascends the
  smaller of the two critics' means;
- a critic wider than the actor, AdamW (weight decay 0.1) for both, tau 0.1;
- TD3's target policy smoothing and delayed actor and target updates (``policy_delay``);
- *per-env exploration noise*: every env acts with its own Gaussian noise scale, drawn
  uniformly in ``[noise_min, noise_max]`` (:func:`noise_scales`);
- 2 gradient steps per vectorised env step at a replay ratio of 64 (the registry's
  run-level defaults, :data:`DEFAULTS`: the paper's 1,024 envs and batch 32,768 scaled
  down to a CPU; on a GPU or TPU the paper's, :data:`ACCELERATOR_DEFAULTS`).

Per-env noise scales: the actor side holds one ``noise_seed`` (drawn at init), and
``act`` draws the scales of its ``N`` envs from it, so env ``i`` keeps its scale for
the whole run (FastTD3 re-draws an env's scale when its episode ends; keeping it per run
needs no episode signal in ``act`` and gives the same spread of scales over the envs).
Evaluation acts deterministically and uses none.

*n-step returns* (``n_step``, default 1): the critic samples runs of ``n_step``
consecutive transitions of one env (:func:`~jaxspreeze.replay.sample_sequences`) and folds
them (:func:`~jaxspreeze.algos.common.nstep`: rewards summed with discount up to the first
episode end; a termination bootstraps from 0, a truncation from its kept final
observation) into a target ``R + gamma^m (1 - terminated) Z``. FastTD3 uses 1-step returns
on most tasks.

Not here (the codebase has no general off-policy version of it yet): observation
normalisation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import networks, replay
from jaxspreeze.algos import base, common, deterministic, members, off_policy
from jaxspreeze.errors import ConfigError
from jaxspreeze.types import EnvSpec, PyTree, Transition

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


class FastTD3Actor(NamedTuple):
    """Actor side: policy, its target, optimiser state, the count and the noise seed; the
    per-env noise scales' bounds are leaves."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    tau: jax.Array
    steps: jax.Array  # actor updates so far
    noise_seed: jax.Array  # uint32: the per-env exploration noise scales' seed
    noise_min: jax.Array
    noise_max: jax.Array


class RecipeCritic(NamedTuple):
    """Critic side: the two categorical critics, their target, optimiser state and counter
    (FastSAC's)."""

    params: PyTree
    target_params: PyTree
    opt_state: PyTree
    gamma: jax.Array
    tau: jax.Array
    steps: jax.Array  # critic updates so far


# FastTD3's critic side: TD3's leaves (the recipe's and the target policy smoothing's std
# and clip) around the two categorical critics
FastTD3Critic = deterministic.TD3Critic


# --- the categorical critic's maths ------------------------------------------------------


def support(v_min: float, v_max: float, num_atoms: int) -> jax.Array:
    """The atoms ``[num_atoms]``, evenly spaced on ``[v_min, v_max]``: ``v_min + j * delta``."""
    delta = (v_max - v_min) / (num_atoms - 1)
    return v_min + delta * jnp.arange(num_atoms, dtype=jnp.float32)


def project(
    probs: jax.Array, reward: jax.Array, discount: jax.Array, v_min: float, v_max: float
) -> jax.Array:
    """The distribution of ``reward + discount * Z`` projected onto the atoms: ``[B, K]``.

    ``probs [B, K]`` is Z's distribution on the ``K`` atoms of ``[v_min, v_max]``,
    ``reward [B]`` and ``discount [B]`` (``gamma * (1 - terminated)``; 0 at a terminal
    transition puts all mass at the reward). Each shifted atom is clipped to
    ``[v_min, v_max]`` and its mass split between its two neighbouring atoms in
    proportion to closeness (all of it to one atom it lands on exactly): the total mass
    is kept.
    """
    num_atoms = probs.shape[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    atoms = support(v_min, v_max, num_atoms)
    shifted = jnp.clip(reward[:, None] + discount[:, None] * atoms, v_min, v_max)
    pos = (shifted - v_min) / delta  # [B, K] fractional index of each shifted atom
    # weight of source atom i on target atom j: the triangle max(0, 1 - |pos_i - j|)
    weight = jnp.clip(1.0 - jnp.abs(pos[..., None] - jnp.arange(num_atoms)), 0.0, 1.0)
    return jnp.einsum("bi,bij->bj", probs, weight)


def mean_value(probs: jax.Array, atoms: jax.Array) -> jax.Array:
    """The expected value ``[...]`` of distributions ``probs [..., K]`` on ``atoms [K]``."""
    return (probs * atoms).sum(-1)


def lower_mean(probs: jax.Array, atoms: jax.Array) -> jax.Array:
    """Clipped double Q on distributions: per sample, the one whose mean is lowest.

    ``probs [Q, B, K] -> [B, K]`` (ties: the first critic).
    """
    pick = jnp.argmin(mean_value(probs, atoms), axis=0)  # [B]
    return jnp.take_along_axis(probs, pick[None, :, None], axis=0)[0]


def cross_entropy(logits: jax.Array, target: jax.Array) -> jax.Array:
    """``-sum_k target_k log softmax(logits)_k``, averaged over the batch, summed over critics.

    ``logits [Q, B, K]``, ``target [B, K]`` (held fixed by the caller).
    """
    return -(target * jax.nn.log_softmax(logits, axis=-1)).sum(-1).mean(-1).sum()


def categorical_target(
    next_probs: jax.Array,
    reward: jax.Array,
    discount: jax.Array,
    atoms: jax.Array,
    v_min: float,
    v_max: float,
) -> tuple[jax.Array, jax.Array]:
    """The critic's target distribution ``[B, K]`` (held fixed) and the fraction of targets
    outside the atoms' range.

    ``next_probs [B, K]`` is the next state's (lower-mean) distribution on ``atoms``;
    ``discount [B]`` is ``gamma * (1 - terminated)`` (``gamma ** n`` for an n-step batch).
    """
    target = jax.lax.stop_gradient(project(next_probs, reward, discount, v_min, v_max))
    scalar = reward + discount * mean_value(next_probs, atoms)
    outside = jnp.mean((scalar < v_min) | (scalar > v_max)).astype(jnp.float32)
    return target, outside


def fit_categorical(
    critic: networks.DistributionalQEnsemble,
    tx: Any,
    params: PyTree,
    opt_state: PyTree,
    batch: Transition,
    target: jax.Array,
    atoms: jax.Array,
) -> tuple[PyTree, PyTree, jax.Array, jax.Array, jax.Array]:
    """One gradient step of the categorical critics towards ``target [B, K]`` (cross-entropy).

    Returns ``(params, opt_state, loss, q, grad_norm)``, ``q [Q, B]`` the critics' means.
    """

    def loss_fn(params: PyTree) -> tuple[jax.Array, jax.Array]:
        logits = critic.apply(params, batch.obs, batch.action)
        return cross_entropy(logits, target), logits

    params, opt_state, loss, logits, gnorm = common.gradient_step(tx, params, opt_state, loss_fn)
    return params, opt_state, loss, mean_value(jax.nn.softmax(logits, axis=-1), atoms), gnorm


def critic_metrics(
    loss: jax.Array, q: jax.Array, gnorm: jax.Array, **extra: jax.Array
) -> dict[str, jax.Array]:
    """A categorical critic step's metrics: loss, mean value, gradient norm, ``extra``, finite."""
    return {
        "critic_loss": loss,
        "q_mean": q.mean(),
        "critic_grad_norm": gnorm,
        **extra,
        "finite": common.all_finite(loss, gnorm).astype(jnp.float32),
    }


def critic_network(cfg: RecipeConfig, spec: EnvSpec) -> networks.DistributionalQEnsemble:
    """The recipe's twin categorical critic for ``spec``'s critic observation."""
    return networks.DistributionalQEnsemble(
        cfg.critic_hidden,
        cfg.num_atoms,
        num_qs=2,
        obs_cols=spec.critic_obs,
        layer_norm=cfg.critic_layer_norm,
    )


def noise_scales(seed: jax.Array, num_envs: int, low: jax.Array, high: jax.Array) -> jax.Array:
    """Each env's exploration noise std ``[num_envs, 1]``, uniform in ``[low, high]``.

    A pure function of ``seed``: the same envs get the same scales at every step.
    """
    key = jax.random.PRNGKey(seed)
    return jax.random.uniform(key, (num_envs, 1), minval=low, maxval=high)


# --- the registry's entry ----------------------------------------------------------------


def supports(spec: EnvSpec) -> str | None:
    """Why FastTD3 cannot run on ``spec`` (None when it can)."""
    if spec.discrete:
        return "FastTD3 needs a continuous action space; use --algo ppo for discrete actions"
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
    next transition is not ``num_envs`` slots on: :func:`~jaxspreeze.replay.sample_sequences`).
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


def sampler(n_step: int, run: Any) -> Any:
    """The critic's replay read: :func:`replay.sample` (``n_step`` 1), else runs of
    ``n_step`` consecutive transitions per env ``[B, n_step, ...]``."""
    if n_step == 1:
        return replay.sample
    return functools.partial(replay.sample_sequences, length=n_step, stride=run.num_envs)


def critic_batch(data: Transition, gamma: jax.Array, n_step: int) -> tuple[Transition, jax.Array]:
    """The critic's batch ``[B]`` and its bootstrap discount ``[B]`` from a :func:`sampler` read.

    ``n_step`` 1: the batch itself and ``gamma (1 - terminated)``; else the n-step fold
    (:func:`~jaxspreeze.algos.common.nstep`) of the runs ``[B, n_step]``.
    """
    if n_step == 1:
        return data, gamma * (1.0 - data.terminated.astype(jnp.float32))
    return common.nstep(data, gamma)


def check_widths(cfg: Any, prefix: str) -> None:
    """ConfigError unless ``actor_hidden`` and ``critic_hidden`` are positive layer widths."""
    _check_widths(cfg.actor_hidden, f"{prefix}actor_hidden")
    _check_widths(cfg.critic_hidden, f"{prefix}critic_hidden")


def validate(cfg: FastTD3Config, prefix: str, run: Any) -> None:
    """Raise ConfigError naming the first bad FastTD3 field (and grad_steps when ``run`` is given)."""
    deterministic.check_config(
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


def _init(
    cfg: FastTD3Config,
    spec: EnvSpec,
    actor: Any,
    critic: Any,
    actor_tx: Any,
    critic_tx: Any,
    key: jax.Array,
) -> base.AgentState:
    """A fresh agent: both sides' parameters, targets equal to them, optimiser states, and
    the seed of the per-env exploration noise."""
    k_params, k_noise = jax.random.split(key)
    obs = jnp.zeros((1, *spec.obs_shape))
    act = jnp.zeros((1, spec.action_dim))
    k_actor, k_critic = jax.random.split(k_params)
    actor_params = actor.init(k_actor, obs)
    critic_params = critic.init(k_critic, obs, act)
    f32 = lambda name: jnp.asarray(getattr(cfg, name), jnp.float32)
    tau, zero = f32("tau"), jnp.zeros((), jnp.int32)
    seed = jax.random.bits(k_noise, (), jnp.uint32)
    a = FastTD3Actor(
        actor_params, actor_params, actor_tx.init(actor_params), tau, zero, seed,
        f32("noise_min"), f32("noise_max"),
    )  # fmt: skip
    c = FastTD3Critic(
        critic_params, critic_params, critic_tx.init(critic_params), f32("gamma"), tau, zero,
        f32("target_noise"), f32("target_noise_clip"),
    )  # fmt: skip
    return base.AgentState(a, c)


def make(cfg: FastTD3Config, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind FastTD3 to its config, env spec and the run's per-iteration update sizes."""
    delay, v_min, v_max = cfg.policy_delay, float(cfg.v_min), float(cfg.v_max)
    actor = networks.DeterministicActor(cfg.actor_hidden, spec.action_dim, spec.actor_obs)
    critic = critic_network(cfg, spec)
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    actor_tx = common.adamw(cfg.actor_lr, cfg.weight_decay)
    critic_tx = common.adamw(cfg.critic_lr, cfg.weight_decay)
    atoms = support(v_min, v_max, cfg.num_atoms)

    init = functools.partial(_init, cfg, spec, actor, critic, actor_tx, critic_tx)

    def act(state: FastTD3Actor, obs: jax.Array, key: jax.Array, deterministic: bool):
        action = actor.apply(state.params, obs)
        if deterministic:
            return common.explore(action, key, 0.0, scale, bias)
        std = noise_scales(state.noise_seed, action.shape[0], state.noise_min, state.noise_max)
        return common.explore(action, key, std, scale, bias)

    def update_critic(c: FastTD3Critic, target_actor: PyTree, data: Transition, key):
        # the n-step batch (a plain batch and gamma (1 - terminated) when n_step is 1)
        batch, discount = critic_batch(data, c.gamma, cfg.n_step)
        # the smoothed target action, the target critics' distributions there, the lower-mean
        # one per sample, shifted by the reward and discount and projected onto the atoms
        action = actor.apply(target_actor, batch.next_obs)
        action = deterministic.smoothed(action, key, deterministic.smoothing_of(c))
        next_logits = critic.apply(c.target_params, batch.next_obs, action * scale + bias)
        next_probs = lower_mean(jax.nn.softmax(next_logits, axis=-1), atoms)
        target, outside = categorical_target(
            next_probs, batch.reward, discount, atoms, v_min, v_max
        )
        params, opt_state, loss, q, gnorm = fit_categorical(
            critic, critic_tx, c.params, c.opt_state, batch, target, atoms
        )
        steps = c.steps + 1
        target_params, due = deterministic.delayed_polyak(
            c.target_params, params, c.tau, steps, delay
        )
        metrics = critic_metrics(
            loss, q, gnorm, target_outside=outside, target_updates=due.astype(jnp.float32)
        )
        c = c._replace(params=params, target_params=target_params, opt_state=opt_state)
        return c._replace(steps=steps), metrics

    def update_actor(a: FastTD3Actor, critic_params: PyTree, obs: jax.Array, key: jax.Array):
        del key  # deterministic policy gradient: ascend the smaller critic mean at pi(s)

        def loss_fn(params: PyTree) -> tuple[jax.Array, None]:
            action = actor.apply(params, obs) * scale + bias
            probs = jax.nn.softmax(critic.apply(critic_params, obs, action), axis=-1)
            return -mean_value(probs, atoms).min(0).mean(), None

        params, opt_state, loss, _, gnorm = common.gradient_step(
            actor_tx, a.params, a.opt_state, loss_fn
        )
        target_params = common.polyak(a.target_params, params, a.tau)
        a = a._replace(
            params=params, target_params=target_params, opt_state=opt_state, steps=a.steps + 1
        )
        return a, {
            "actor_loss": loss,
            "actor_grad_norm": gnorm,
            "finite": common.all_finite(loss, gnorm).astype(jnp.float32),
        }

    return off_policy.replay_algorithm(
        "fasttd3",
        init=init,
        act=act,
        actor_view=lambda a: a.target_params,
        critic_view=lambda c: c.params,
        update_critic=update_critic,
        update_actor=update_actor,
        critic_steps=run.grad_steps,
        actor_steps=run.grad_steps // delay,
        batch_size=run.batch_size,
        normalize_obs=spec.obs_shape if cfg.normalize_obs else None,
        critic_sample=sampler(cfg.n_step, run),
    )


# the fields a population may vary per member: each is a leaf of the state (tau of both
# sides' targets, the per-env noise scales' bounds on the actor side, the smoothing's on
# the critic side)
MEMBER_FIELDS = {
    **members.ACTOR_CRITIC_LR,
    "tau": deterministic.MEMBER_FIELDS["tau"],
    **members.leaves("actor", "noise_min", "noise_max"),
    **deterministic.SMOOTHING_FIELDS,
}

SPEC = base.AlgoSpec(
    name="fasttd3",
    config_cls=FastTD3Config,
    on_policy=False,
    defaults=DEFAULTS,
    supports=supports,
    validate=validate,
    make=make,
    grad_step_multiple=grad_step_multiple,
    label="FastTD3",
    accelerator_defaults=ACCELERATOR_DEFAULTS,
    member_fields=MEMBER_FIELDS,
)
