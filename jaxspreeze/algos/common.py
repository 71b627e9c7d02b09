"""Maths shared by the algorithms: one gradient step, Polyak averaging, GAE.

Data parallelism hooks in here and nowhere else in the algorithms: while a data-parallel
schedule traces one shard's step inside :func:`data_parallel`, every optimiser made by
:func:`adam` averages its incoming gradients over the data axes before the update, and
:func:`stats_update` merges the observation statistics of all shards. Outside that
context both are exactly the single-device code (the traced program is unchanged).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxspreeze.core.types import PyTree, Transition
from jaxspreeze.networks.torsos import as_float

# the named axes a data-parallel schedule is tracing one shard's step under (None: none)
_DATA_AXES: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "jaxspreeze_data_axes", default=None
)


@contextlib.contextmanager
def data_parallel(axes: tuple[str, ...]) -> Iterator[None]:
    """Trace the code inside as one shard of a data-parallel step over the named ``axes``."""
    token = _DATA_AXES.set(tuple(axes))
    try:
        yield
    finally:
        _DATA_AXES.reset(token)


def cross_device_mean(tree: PyTree) -> PyTree:
    """The mean of ``tree`` over the data-parallel shards; ``tree`` itself outside one."""
    axes = _DATA_AXES.get()
    return tree if axes is None else jax.lax.pmean(tree, axes)


def _averaged(tx: optax.GradientTransformation) -> optax.GradientTransformationExtraArgs:
    """``tx`` whose update first averages the gradients over the data-parallel shards.

    The state is ``tx``'s own (same structure), so states and checkpoints do not change.
    """

    def update(updates: PyTree, state: PyTree, params: PyTree = None, **extra: Any):
        return tx.update(cross_device_mean(updates), state, params, **extra)

    return optax.GradientTransformationExtraArgs(tx.init, update)


def adam(lr: float, max_grad_norm: float | None = None) -> optax.GradientTransformation:
    """Adam whose learning rate is a state leaf (``inject_hyperparams``), optionally clipped.

    Under :func:`data_parallel` the gradients are averaged over the shards first (before
    clipping), so every shard applies the same update.
    """
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=lr)
    if max_grad_norm is not None:
        opt = optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)
    return _averaged(opt)


def radam(lr: float, max_grad_norm: float | None = None) -> optax.GradientTransformation:
    """RAdam (rectified Adam, PQN's) whose learning rate is a state leaf, optionally clipped,
    like :func:`adam` (under :func:`data_parallel` the gradients are averaged first)."""
    opt = optax.inject_hyperparams(optax.radam)(learning_rate=lr)
    if max_grad_norm is not None:
        opt = optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)
    return _averaged(opt)


def adamw(lr: float, weight_decay: float) -> optax.GradientTransformation:
    """AdamW (decoupled weight decay) whose learning rate is a state leaf, like :func:`adam`.

    Under :func:`data_parallel` the gradients are averaged over the shards first.
    """
    opt = optax.inject_hyperparams(optax.adamw)(learning_rate=lr, weight_decay=weight_decay)
    return _averaged(opt)


def gradient_step(
    tx: optax.GradientTransformation,
    params: PyTree,
    opt_state: PyTree,
    loss_fn: Callable[[PyTree], tuple[jax.Array, Any]],
) -> tuple[PyTree, PyTree, jax.Array, Any, jax.Array]:
    """One optimiser step on ``loss_fn(params) -> (loss, aux)``.

    Returns ``(params, opt_state, loss, aux, grad_norm)``.
    """
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, aux, optax.global_norm(grads)


def polyak(target: PyTree, online: PyTree, tau: jax.Array) -> PyTree:
    """Soft target update: ``target <- (1 - tau) * target + tau * online``."""
    return jax.tree.map(lambda t, o: t + tau * (o - t), target, online)


def gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: jax.Array | float,
    lam: jax.Array | float,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over ``[T, N]`` arrays.

    ``next_values`` is V(next_obs), where ``next_obs`` is the final observation at an
    episode end: a truncated step bootstraps from it, a terminated one from 0. The
    recursion stops at every episode end. Returns ``(advantages, returns)``.
    """
    not_term = 1.0 - terminated.astype(jnp.float32)
    not_done = not_term * (1.0 - truncated.astype(jnp.float32))
    deltas = rewards + gamma * not_term * next_values - values

    def step(next_adv, xs):
        delta, cont = xs
        adv = delta + gamma * lam * cont * next_adv
        return adv, adv

    _, adv = jax.lax.scan(step, jnp.zeros_like(deltas[0]), (deltas, not_done), reverse=True)
    return adv, adv + values


def nstep(seq: Transition, gamma: jax.Array | float) -> tuple[Transition, jax.Array]:
    """Fold runs of ``n`` consecutive transitions ``[B, n, ...]`` into n-step ones ``[B]``.

    Returns ``(batch, discount)``: ``batch.obs`` and ``batch.action`` are the first
    step's, ``batch.reward`` the discounted sum ``sum_k gamma^k r_k`` of the rewards up to
    and including the first step that ends an episode (terminated or truncated; later
    steps belong to the next episode and are cut), ``next_obs``, ``terminated`` and
    ``truncated`` those of that last kept step ``m``, and ``discount = gamma^(m+1) (1 -
    terminated)``: a termination bootstraps from 0, a truncation from its kept final
    observation, a run with no episode end from the n-th next observation. The target is
    ``batch.reward + discount * V(batch.next_obs)``.
    """
    ended = jnp.logical_or(seq.terminated, seq.truncated).astype(jnp.int32)  # [B, n]
    kept = (jnp.cumsum(ended, axis=1) - ended) == 0  # no episode end before step k
    n = seq.reward.shape[1]
    powers = jnp.cumprod(jnp.concatenate([jnp.ones((1,)), jnp.full((n - 1,), gamma)]))
    reward = jnp.sum(jnp.where(kept, powers * seq.reward, 0.0), axis=1)
    last = kept.sum(1) - 1  # [B] the last kept step

    def at_last(x: jax.Array) -> jax.Array:
        index = last.reshape(-1, *([1] * (x.ndim - 1)))
        return jnp.take_along_axis(x, index, axis=1)[:, 0]

    terminated, truncated, next_obs = map(at_last, (seq.terminated, seq.truncated, seq.next_obs))
    discount = powers[last] * gamma * (1.0 - terminated.astype(jnp.float32))
    batch = Transition(seq.obs[:, 0], seq.action[:, 0], reward, terminated, truncated, next_obs)
    return batch, discount


def all_finite(*trees: PyTree) -> jax.Array:
    """True when every leaf of every tree is finite (a cheap guard flag)."""
    leaves = [jnp.all(jnp.isfinite(x)) for t in trees for x in jax.tree.leaves(t)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def explore(
    action: jax.Array,
    key: jax.Array,
    std: jax.Array | float,
    scale: jax.Array,
    bias: jax.Array,
) -> jax.Array:
    """A deterministic action in ``[-1, 1]`` plus Gaussian noise, clipped and scaled to bounds.

    ``std`` is a fraction of the half-width of the action range (``[-1, 1]`` units).
    """
    noisy = action + std * jax.random.normal(key, action.shape)
    return jnp.clip(noisy, -1.0, 1.0) * scale + bias


class RunningStats(NamedTuple):
    """Running mean and variance of observations (parallel Welford), ``count`` a float."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def stats_init(shape: tuple[int, ...]) -> RunningStats:
    """Mean 0, variance 1 and a tiny prior count (so the first batch dominates)."""
    return RunningStats(
        jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.asarray(1e-4)
    )


def stats_update(stats: RunningStats, x: jax.Array) -> RunningStats:
    """Merge a batch ``x [B, *shape]`` into the running statistics.

    ``x`` in the env's own dtype is read as the networks read it (:func:`as_float`: a
    uint8 frame scaled to [0, 1], a bool grid as 0/1; float32 as it is). Under
    :func:`data_parallel` the batch is the union of every shard's ``x``.
    """
    x = as_float(x)
    b_mean, b_var, b_count = x.mean(0), x.var(0), jnp.asarray(x.shape[0], jnp.float32)
    axes = _DATA_AXES.get()
    if axes is not None:  # the moments of all shards' batches together (equal sizes)
        shard_mean = b_mean
        b_mean = jax.lax.pmean(shard_mean, axes)
        b_var = jax.lax.pmean(b_var + (shard_mean - b_mean) ** 2, axes)
        b_count = jax.lax.psum(b_count, axes)
    delta = b_mean - stats.mean
    total = stats.count + b_count
    mean = stats.mean + delta * b_count / total
    m2 = stats.var * stats.count + b_var * b_count + delta**2 * stats.count * b_count / total
    return RunningStats(mean, m2 / total, total)


def normalize(stats: RunningStats, x: jax.Array, clip: float = 10.0) -> jax.Array:
    """``(x - mean) / std`` clipped to ``[-clip, clip]``, float32 whatever ``x``'s dtype
    (:func:`as_float`, as :func:`stats_update` read it)."""
    x = as_float(x)
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + 1e-8), -clip, clip)


def _inject_state(opt_state: PyTree) -> Any:
    nodes = jax.tree.leaves(opt_state, is_leaf=lambda x: hasattr(x, "hyperparams"))
    return next(n for n in nodes if hasattr(n, "hyperparams"))


def opt_step_count(opt_state: PyTree) -> jax.Array:
    """Optimiser steps taken so far by an :func:`adam` state."""
    return _inject_state(opt_state).count


def set_learning_rate(opt_state: PyTree, lr: jax.Array) -> PyTree:
    """An :func:`adam` state whose next step uses learning rate ``lr``."""
    return optax.tree_utils.tree_set(opt_state, learning_rate=jnp.asarray(lr, jnp.float32))


def minibatch_epochs(
    update: Callable[[PyTree, Any], tuple[PyTree, dict[str, jax.Array]]],
    state: PyTree,
    data: Any,
    key: jax.Array,
    epochs: int,
    batch_size: int,
) -> tuple[PyTree, dict[str, jax.Array]]:
    """``epochs`` shuffled passes of ``update`` over ``data`` (leaves ``[M * B, ...]``) in
    minibatches of ``batch_size`` (PPO's and PQN's updates); the metrics are means over
    every step, ``finite`` whether all were."""
    size = jax.tree.leaves(data)[0].shape[0]
    num_mb = size // batch_size

    def epoch(state, key):
        perm = jax.random.permutation(key, size).reshape(num_mb, batch_size)
        return jax.lax.scan(
            lambda s, idx: update(s, jax.tree.map(lambda x: x[idx], data)), state, perm
        )

    state, metrics = jax.lax.scan(epoch, state, jax.random.split(key, epochs))
    metrics = {k: jnp.mean(v) for k, v in metrics.items()}
    metrics["finite"] = metrics["finite"] > 0.999  # all steps finite
    return state, metrics
