"""FastSAC: SAC with FastTD3's recipe (Seo et al., 2025), run massively parallel.

SAC's squashed-Gaussian actor and automatic entropy temperature
(:mod:`jaxspreeze.algos.sac`: its ``sample``, ``act``, ``actor_step`` and
``update_temperature``) with the critic and optimisers of FastTD3
(:mod:`jaxspreeze.algos.fasttd3`):

- a *categorical distributional twin critic* (C51): the soft Bellman target
  ``r + gamma (1 - terminated) (Z - alpha log pi(a'|s'))`` at a sampled next action
  ``a'`` is the target critics' lower-mean distribution (clipped double Q on
  distributions, :func:`~jaxspreeze.algos.fasttd3.lower_mean`), shifted by the reward and
  the entropy bonus and projected back onto the atoms
  (:func:`~jaxspreeze.algos.fasttd3.project`); the critic minimises the cross-entropy to it;
- the actor minimises ``alpha log pi(a|s) - min_i E[Z_i(s, a)]`` (the smaller of the two
  critics' means), and the temperature is tuned towards the target entropy as in SAC;
- a critic wider than the actor, AdamW (weight decay 0.1) for the actor and the critic
  (Adam for the temperature), tau 0.1 at every critic update;
- 2 gradient steps per vectorised env step at a replay ratio of 64 (:data:`DEFAULTS`, the
  same CPU-sized shape as FastTD3's);
- n-step returns (``n_step``), as FastTD3.

Exploration is the policy's own sampling (no per-env noise scales): evaluation acts with
the squashed mean. Not here: observation normalisation (as FastTD3).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.algos import base, common, fasttd3, off_policy, sac
from jaxspreeze.algos.fastsac_config import (  # noqa: F401
    DEFAULTS,
    SPEC,
    FastSACConfig,
    supports,
    validate,
)
from jaxspreeze.core.types import EnvSpec, PyTree


def _init(cfg: FastSACConfig, spec: EnvSpec, nets: Any, txs: Any, key: jax.Array):
    """A fresh agent: SAC's actor side (policy, temperature) and FastTD3's critic side."""
    actor, critic = nets
    actor_tx, critic_tx, alpha_tx = txs
    actor_params, critic_params = off_policy.init_params(key, actor, critic, spec)
    a = sac.init_actor(cfg, actor_params, actor_tx, alpha_tx)
    c = fasttd3.RecipeCritic(
        critic_params,
        critic_params,
        critic_tx.init(critic_params),
        jnp.asarray(cfg.gamma, jnp.float32),
        jnp.asarray(cfg.tau, jnp.float32),
        jnp.zeros((), jnp.int32),
    )
    return base.AgentState(a, c)


def make(cfg: FastSACConfig, spec: EnvSpec, run: Any) -> base.Algorithm:
    """Bind FastSAC to its config, env spec and the run's per-iteration update sizes."""
    v_min, v_max = float(cfg.v_min), float(cfg.v_max)
    torso = networks.choose_torso(cfg.torso, spec.obs_shape)
    actor = networks.TanhGaussianActor(cfg.actor_hidden, spec.action_dim, spec.actor_obs, torso)
    critic = fasttd3.critic_network(cfg, spec)
    scale, bias = networks.action_scale(spec.action_low, spec.action_high)
    actor_tx = common.adamw(cfg.actor_lr, cfg.weight_decay)
    critic_tx = common.adamw(cfg.critic_lr, cfg.weight_decay)
    alpha_tx = common.adam(cfg.alpha_lr)
    atoms = fasttd3.support(v_min, v_max, cfg.num_atoms)
    policy = functools.partial(sac.sample, actor, scale=scale, bias=bias)
    init = functools.partial(_init, cfg, spec, (actor, critic), (actor_tx, critic_tx, alpha_tx))

    def update_critic(c: fasttd3.RecipeCritic, view: sac.ActorView, data: Any, key: jax.Array):
        # the n-step batch (a plain batch and gamma (1 - terminated) when n_step is 1)
        batch, discount = fasttd3.critic_batch(data, c.gamma, cfg.n_step)
        # the target critics' lower-mean distribution at a sampled next action; the soft
        # target r + discount (Z - alpha logp) is Z shifted by r - discount alpha logp
        next_action, next_logp = policy(view.params, batch.next_obs, key)
        next_logits = critic.apply(c.target_params, batch.next_obs, next_action)
        next_probs = fasttd3.lower_mean(jax.nn.softmax(next_logits, axis=-1), atoms)
        reward = batch.reward - discount * jnp.exp(view.log_alpha) * next_logp
        target, outside = fasttd3.categorical_target(
            next_probs, reward, discount, atoms, v_min, v_max
        )
        params, opt_state, loss, q, gnorm = fasttd3.fit_categorical(
            critic, critic_tx, c.params, c.opt_state, batch, target, atoms
        )
        target_params = common.polyak(c.target_params, params, c.tau)
        c = c._replace(
            params=params, target_params=target_params, opt_state=opt_state, steps=c.steps + 1
        )
        return c, fasttd3.critic_metrics(loss, q, gnorm, target_outside=outside)

    def update_actor(a: sac.SACActor, critic_params: PyTree, obs: jax.Array, key: jax.Array):
        def q_fn(o: jax.Array, action: jax.Array) -> jax.Array:
            probs = jax.nn.softmax(critic.apply(critic_params, o, action), axis=-1)
            return fasttd3.mean_value(probs, atoms).min(0)

        return sac.actor_step(actor_tx, alpha_tx, a, policy, q_fn, obs, key, spec.action_dim)

    return off_policy.replay_algorithm(
        "fastsac",
        init=init,
        act=functools.partial(sac.act, actor, scale, bias),
        actor_view=lambda a: sac.ActorView(a.params, a.log_alpha),
        critic_view=lambda c: c.params,
        update_critic=update_critic,
        update_actor=update_actor,
        critic_steps=run.grad_steps,
        actor_steps=run.grad_steps,
        batch_size=run.batch_size,
        normalize_obs=spec.obs_shape if cfg.normalize_obs else None,
        critic_sample=fasttd3.sampler(cfg.n_step, run),
        layer_norm=cfg.critic_layer_norm,
    )


# the fields a population may vary: the same leaves as SAC (its actor side, a critic's
# gamma and tau)
MEMBER_FIELDS = sac.MEMBER_FIELDS
