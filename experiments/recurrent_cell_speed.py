"""Where a recurrent PPO gradient step's time goes on CPU: the cell's loop, step by step.

One gradient step of recurrent PPO's policy loss is a ``lax.scan`` over the sequence's
``L`` steps at a batch of ``S`` sequences (PPO's defaults: 4 sequences of 64 steps per
minibatch of 256). This times, per gradient of a categorical policy's log-likelihood over
one minibatch (value and policy losses have the same shape):

- ``network``: :class:`jaxspreeze.networks.RecurrentNet` as recurrent PPO calls it (since
  2026-12-05 late: the input projections of all ``L`` steps before the loop, one hidden
  matmul a step, the loop's gradient hand-written, ``networks.recurrent.UNROLL`` steps per
  loop iteration);
- ``flax``: flax's ``GRUCell``/``OptimizedLSTMCell`` stepped by ``jax.lax.scan``
  (``networks.unroll``, the same parameters, then the same head; what ``RecurrentNet`` ran
  before, there under ``nn.scan``): six (GRU) or eight (LSTM) separate matmuls per step,
  JAX's automatic gradient of the loop;
- ``fused``: the same parameters and the same maths, with the input projections of all
  ``L`` steps done before the loop (one matmul ``[L * S, D] x [D, 3F]``) and the hidden
  projections fused into one matmul per step (``[S, F] x [F, 3F]``, ``4F`` for an LSTM),
  JAX's automatic gradient of the loop;
- ``feed-forward``: PPO's feed-forward network on the same ``L * S`` rows (no loop).

Each is jitted, compiled and warmed, then timed over ``--repeats`` calls (median; wall and
process CPU seconds: on a shared machine the CPU seconds are the steadier figure).

    python experiments/recurrent_cell_speed.py --cell gru --features 128 --seqs 4 --length 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from jaxspreeze import networks
from jaxspreeze.core.types import reset_carry


def _cell_params(params):
    return params["params"]["memory"]["cell"]["cell"]


def _head(params, y):
    """The categorical head's MLP (relu hidden layers, then the logits) on ``y``."""
    mlp = params["params"]["MLP_0"]
    names = sorted(mlp, key=lambda n: int(n.split("_")[1]))
    for name in names[:-1]:
        y = jax.nn.relu(y @ mlp[name]["kernel"] + mlp[name]["bias"])
    last = mlp[names[-1]]
    return y @ last["kernel"] + last["bias"]


def fused_gru(params, carry, xs, resets):
    """flax's GRUCell over ``xs [L, S, D]``, input projections hoisted, hidden fused."""
    p = _cell_params(params)
    wi = jnp.concatenate([p["ir"]["kernel"], p["iz"]["kernel"], p["in"]["kernel"]], axis=1)
    bi = jnp.concatenate([p["ir"]["bias"], p["iz"]["bias"], p["in"]["bias"]])
    wh = jnp.concatenate([p["hr"]["kernel"], p["hz"]["kernel"], p["hn"]["kernel"]], axis=1)
    F = p["hn"]["bias"].shape[0]
    bh = jnp.concatenate([jnp.zeros((2 * F,), wh.dtype), p["hn"]["bias"]])
    gi = xs @ wi + bi  # [L, S, 3F], all steps at once

    def step(h, inputs):
        g, reset = inputs
        h = reset_carry(h, jnp.zeros_like(h), reset)
        gh = h @ wh + bh
        r = jax.nn.sigmoid(g[:, :F] + gh[:, :F])
        z = jax.nn.sigmoid(g[:, F : 2 * F] + gh[:, F : 2 * F])
        n = jnp.tanh(g[:, 2 * F :] + r * gh[:, 2 * F :])
        h = (1.0 - z) * n + z * h
        return h, h

    return jax.lax.scan(step, carry, (gi, resets), unroll=networks.recurrent.UNROLL)


def fused_lstm(params, carry, xs, resets):
    """flax's OptimizedLSTMCell over ``xs``, input projections hoisted, hidden fused."""
    p = _cell_params(params)
    gates = ("i", "f", "g", "o")
    wi = jnp.concatenate([p[f"i{k}"]["kernel"] for k in gates], axis=1)
    wh = jnp.concatenate([p[f"h{k}"]["kernel"] for k in gates], axis=1)
    bh = jnp.concatenate([p[f"h{k}"]["bias"] for k in gates])
    F = wh.shape[0]
    gi = xs @ wi  # [L, S, 4F]

    def step(c_h, inputs):
        g, reset = inputs
        c, h = reset_carry(c_h, jax.tree.map(jnp.zeros_like, c_h), reset)
        y = g + h @ wh + bh
        i, f = jax.nn.sigmoid(y[:, :F]), jax.nn.sigmoid(y[:, F : 2 * F])
        gg, o = jnp.tanh(y[:, 2 * F : 3 * F]), jax.nn.sigmoid(y[:, 3 * F :])
        c = f * c + i * gg
        h = o * jnp.tanh(c)
        return (c, h), h

    return jax.lax.scan(step, carry, (gi, resets), unroll=networks.recurrent.UNROLL)


def timed(fn, args, repeats: int) -> tuple[float, float]:
    """(median wall s, median process CPU s) of ``fn(*args)`` after a compile and a warm call."""
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(*args))
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", choices=("gru", "lstm"), default="gru")
    p.add_argument("--features", type=int, default=128, help="--ppo.memory-size")
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--obs", type=int, default=4, help="observation width (CartPole: 4)")
    p.add_argument("--actions", type=int, default=2)
    p.add_argument("--seqs", type=int, default=4, help="sequences per minibatch")
    p.add_argument("--length", type=int, default=64, help="steps per sequence")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument(
        "--unroll", type=int, default=0, help="time steps per loop iteration (0: UNROLL)"
    )
    args = p.parse_args()
    if args.unroll:
        networks.recurrent.UNROLL = args.unroll
    L, S, D = args.length, args.seqs, args.obs
    net = networks.RecurrentNet(
        "categorical", tuple(args.hidden), args.actions, args.cell, args.features
    )
    k = jax.random.split(jax.random.key(0), 4)
    obs = jax.random.normal(k[0], (L, S, D))
    resets = jax.random.uniform(k[1], (L, S)) < 0.05
    actions = jax.random.randint(k[2], (L * S,), 0, args.actions)
    params = net.init(k[3], net.initialize_carry(1), obs[:1, :1], resets[:1, :1])
    carry = net.initialize_carry(S)

    def logp(logits):
        return jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], 1).mean()

    def net_loss(params):
        return logp(net.apply(params, carry, obs, resets)[1])

    cell = networks.RecurrentCell(args.cell, args.features)

    def flax_loss(params):
        cell_params = {"params": params["params"]["memory"]["cell"]}
        _, ys = networks.unroll(cell, cell_params, carry, obs, resets)
        return logp(_head(params, ys.reshape(L * S, -1)))

    fused = fused_gru if args.cell == "gru" else fused_lstm

    def fused_loss(params):
        _, ys = fused(params, carry, obs, resets)
        return logp(_head(params, ys.reshape(L * S, -1)))

    ga = jax.grad(flax_loss)(params)
    for name, fn in (("network", net_loss), ("fused", fused_loss)):
        gb = jax.grad(fn)(params)
        gap = max(
            float(jnp.max(jnp.abs(x - y)))
            for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb), strict=True)
        )
        print(
            f"loss flax {float(flax_loss(params)):.6f} {name} {float(fn(params)):.6f}; "
            f"largest gradient difference {gap:.2e}"
        )
    rows = {
        "network": jax.grad(net_loss),
        "flax": jax.grad(flax_loss),
        "fused": jax.grad(fused_loss),
    }
    flat_obs = obs.reshape(L * S, D)

    def ff_loss(ps):  # PPO's feed-forward policy network: obs -> hidden -> logits
        params, w0 = ps
        return logp(_head(params, jnp.tanh(flat_obs @ w0)))

    w0 = jax.random.normal(k[0], (D, args.features)) * 0.1
    rows["feed-forward"] = lambda params: jax.grad(ff_loss)((params, w0))
    for name, fn in rows.items():
        wall, cpu = timed(fn, (params,), args.repeats)  # params an argument: no constant folding
        print(
            f"{name:13s} {wall * 1e3:8.2f} ms wall  {cpu * 1e3:8.2f} ms cpu per gradient",
            flush=True,
        )
    print(f"load {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
