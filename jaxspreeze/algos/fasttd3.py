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
consecutive transitions of one env (:func:`~jaxspreeze.data.replay.sample_sequences`) and folds
them (:func:`~jaxspreeze.algos.common.nstep`: rewards summed with discount up to the first
episode end; a termination bootstraps from 0, a truncation from its kept final
observation) into a target ``R + gamma^m (1 - terminated) Z``. FastTD3 uses 1-step returns
on most tasks.

Not here (the codebase has no general off-policy version of it yet): observation
normalisation.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import base, common, deterministic, members, off_policy
from jaxspreeze.algos.fasttd3_config import (  # noqa: F401
    ACCELERATOR_DEFAULTS,
    DEFAULTS,
    SPEC,
    FastTD3Config,
    RecipeConfig,
    check_n_step,
    check_num_atoms,
    check_value_range,
    check_widths,
    grad_step_multiple,
    supports,
    validate,
)
from jaxspreeze.core.types import EnvSpec, PyTree, Transition
from jaxspreeze.data import replay


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
        torso=networks.choose_torso(cfg.torso, spec.obs_shape),
    )


def noise_scales(seed: jax.Array, num_envs: int, low: jax.Array, high: jax.Array) -> jax.Array:
    """Each env's exploration noise std ``[num_envs, 1]``, uniform in ``[low, high]``.

    A pure function of ``seed``: the same envs get the same scales at every step.
    """
    key = jax.random.PRNGKey(seed)
    return jax.random.uniform(key, (num_envs, 1), minval=low, maxval=high)


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
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    actor = networks.DeterministicActor(cfg.actor_hidden, spec.action_dim, spec.actor_obs, torso)
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
        layer_norm=cfg.critic_layer_norm,
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
