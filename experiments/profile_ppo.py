"""Where one PPO iteration spends its time: jaxspreeze vs brax's PPO trainer, A/B in one process.

    python experiments/profile_ppo.py --env brax/ant --rounds 7
    python experiments/profile_ppo.py --env playground/CartpoleBalance --rounds 7

Sizes are the ``trainer-ppo`` bench row's (``jaxspreeze.bench.suite.trainer_config``: 256
envs x 16 steps, 4 minibatches, 10 epochs, 256x256 ReLU networks on both sides). Each
program below is compiled ahead of time and called round-robin, every call blocked, so
load hits all of them alike; medians per call (one iteration = one brax training step)
are reported, with each program's XLA cost analysis (flops, bytes accessed) and a count
of the ops in its optimised HLO:

- ``ours_iteration``: jaxspreeze's whole iteration (collect + critic phase + actor
  phase), the body of the fused chunk;
- ``ours_collect`` / ``ours_update``: its two halves, cut at the rollout;
- ``ours_collect_1draw``: the collect with the auto-reset drawing one fresh initial
  state per step instead of ``ceil(N / 16)`` (a local variant built with
  ``auto_reset(..., refresh_every=10**9)``; jaxspreeze/envs/base.py is untouched);
- ``brax_step``: brax's ``training_step`` rebuilt from brax's own pieces
  (``acting.generate_unroll`` under brax's (or Playground's) training wrappers, the
  normaliser update, ``num_updates_per_batch`` x ``sgd_step`` of
  ``ppo_losses.compute_ppo_loss``), the arguments brax's trainer gets in the bench row;
- ``brax_collect`` / ``brax_update``: its two halves.

Writes experiments/results/profile_ppo_<env>_<backend>.json.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

from jaxspreeze import algos
from jaxspreeze.bench import brax_compat, references, suite
from jaxspreeze.bench.record import versions
from jaxspreeze.envs import FAMILIES, VecEnv
from jaxspreeze.envs import base as env_base
from jaxspreeze.schedules.iteration import Iteration, update_step
from jaxspreeze.setup.config import resolve
from jaxspreeze.setup.plan import plan

ROOT = Path(__file__).resolve().parents[1]
OPS = (
    "fusion",
    "dot",
    "convolution",
    "gather",
    "scatter",
    "sort",
    "copy",
    "transpose",
    "convert",
    "dynamic-slice",
    "dynamic-update-slice",
    "while",
    "conditional",
    "rng-bit-generator",
    "custom-call",
)


def hlo_ops(text: str) -> dict[str, int]:
    """Count the instructions of each kind in an optimised HLO module's text."""
    counts: collections.Counter[str] = collections.Counter()
    for m in re.finditer(r"=\s*[^=]*?\s([a-z][a-z0-9\-]*)\(", text):
        counts[m.group(1)] += 1
    return {op: counts.get(op, 0) for op in OPS}


def cost(compiled) -> dict[str, float | None]:
    """XLA's flops and bytes accessed of a compiled program (None where not reported)."""
    try:
        c = compiled.cost_analysis()
        c = c[0] if isinstance(c, list) else c
        return {"flops": c.get("flops"), "bytes": c.get("bytes accessed")}
    except Exception:  # not every backend reports
        return {"flops": None, "bytes": None}


class Program:
    """A compiled program, a state holder and the seconds of each timed call."""

    skip: tuple[str, ...] = ()  # program names not to compile (--skip)

    def __init__(self, name, fn, args, step, donate=()):
        # every program gets buffers of its own (a donated buffer is gone for the others;
        # the eager inits and brax's auto-reset hold one array at several leaves)
        args = [jax.tree.map(jnp.copy, a) for a in args]
        self.name, self.args, self.step, self.times = name, args, step, []
        if name in Program.skip:
            return
        t0 = time.perf_counter()
        lowered = jax.jit(fn, donate_argnums=donate).lower(*args)
        self.compiled = lowered.compile()
        self.compile_s = time.perf_counter() - t0

    def call(self) -> None:
        t0 = time.perf_counter()
        out = jax.block_until_ready(self.compiled(*self.args))
        self.times.append(time.perf_counter() - t0)
        self.args = self.step(self.args, out)


# ----------------------------------------------------------------------------- ours
def ours(env_name: str, cfg, refresh_every: int | None = None) -> Iteration:
    """jaxspreeze's per-seed pieces for ``cfg`` (optionally a local auto-reset variant)."""
    prefix, _, name = env_name.partition("/")
    family = FAMILIES[prefix]
    real = family.auto_reset
    if refresh_every is not None:
        family.auto_reset = functools.partial(env_base.auto_reset, refresh_every=refresh_every)
    try:
        parts = family.make(name)  # the family's adapter, outside make_env's cache
    finally:
        family.auto_reset = real
    venv = VecEnv(parts.spec, cfg.num_envs, parts.reset_one, parts.step_batch)
    algo = algos.get("ppo").make(cfg.ppo, venv.spec, cfg)
    return Iteration.from_plan(plan(cfg, on_devices=False), algo, venv, False)


def our_programs(env_name: str, cfg) -> list[Program]:
    it = ours(env_name, cfg)
    s = it.init(jax.random.key(0))
    zero = jnp.zeros((), jnp.int32)

    def collect(actor, env, key):
        env, key, _, _, c, m = it.collect(actor, env, key, zero, zero, zero)
        return env, key, c.traj, m

    traj = jax.jit(collect)(s.agent.actor, s.env, s.key)[2]
    progs = [
        Program(
            "ours_iteration",
            lambda st: it(st),
            (s,),
            lambda a, out: [out[0]],
            donate=(0,),
        ),
        Program(
            "ours_collect",
            collect,
            (s.agent.actor, s.env, s.key),
            lambda a, out: [a[0], out[0], out[1]],
            donate=(1,),
        ),
        Program(
            "ours_update",
            lambda agent, traj, key: update_step(it.algo, agent, traj, key),
            (s.agent, traj, s.key),
            lambda a, out: [out[0], a[1], jax.random.fold_in(a[2], 1)],
            donate=(0,),
        ),
    ]
    if "ours_collect_1draw" in Program.skip:
        return progs
    it1 = ours(env_name, cfg, refresh_every=10**9)
    s1 = it1.init(jax.random.key(0))

    def collect1(actor, env, key):
        env, key, _, _, c, m = it1.collect(actor, env, key, zero, zero, zero)
        return env, key, c.traj, m

    progs.append(
        Program(
            "ours_collect_1draw",
            collect1,
            (s1.agent.actor, s1.env, s1.key),
            lambda a, out: [a[0], out[0], out[1]],
            donate=(1,),
        )
    )
    return progs


# ----------------------------------------------------------------------------- brax's
def brax_programs(env_name: str, kw: dict, hidden) -> list[Program]:
    """brax's training_step for the bench row's trainer arguments, from brax's pieces."""
    brax_compat.install()
    from brax import envs as brax_envs
    from brax.training import acting, gradients
    from brax.training.acme import running_statistics, specs
    from brax.training.agents.ppo import losses as ppo_losses
    from brax.training.agents.ppo import networks as ppo_networks

    n, t = kw["num_envs"], kw["unroll_length"]
    num_mb, epochs = kw["num_minibatches"], kw["epochs"]
    batch_size = n // num_mb
    e = references.brax_environment(env_name)
    wrap = e.get("wrap_env_fn", brax_envs.training.wrap)
    env = wrap(
        e["environment"],
        episode_length=e["episode_length"],
        action_repeat=e.get("action_repeat", 1),
    )
    k_env, k_pol, k_val, key = jax.random.split(jax.random.PRNGKey(0), 4)
    state = jax.jit(env.reset)(jax.random.split(k_env, n))
    # the auto-reset wrappers keep the first state in ``info``: the same buffers twice,
    # which a donating call refuses; one copy of each leaf of its own
    state = jax.tree.map(jnp.copy, state)
    obs_size = state.obs.shape[-1]
    net = ppo_networks.make_ppo_networks(
        obs_size,
        env.action_size,
        policy_hidden_layer_sizes=tuple(hidden),
        value_hidden_layer_sizes=tuple(hidden),
        activation=jax.nn.relu,  # as in the bench row
    )
    make_policy = ppo_networks.make_inference_fn(net)
    params = ppo_losses.PPONetworkParams(
        policy=net.policy_network.init(k_pol), value=net.value_network.init(k_val)
    )
    optimizer = optax.adam(1e-4)  # brax's defaults: lr 1e-4, no gradient clipping
    norm0 = running_statistics.init_state(specs.Array((obs_size,), jnp.dtype("float32")))
    opt0 = optimizer.init(params)
    loss_fn = functools.partial(ppo_losses.compute_ppo_loss, ppo_network=net)
    grad_fn = gradients.loss_and_pgrad(loss_fn, pmap_axis_name=None, has_aux=True)
    extra = ("truncation", "episode_metrics", "episode_done")

    def collect(ts, state, key):
        norm, params = ts[0], ts[2]
        policy = make_policy((norm, params.policy, params.value))
        state, data = acting.generate_unroll(env, state, policy, key, t, extra_fields=extra)
        # brax's layout: [num_envs, unroll_length, ...]
        data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), data)
        return state, data

    def update(ts, data, key):
        norm, opt, params = ts
        norm = running_statistics.update(norm, data.observation)

        def minibatch(carry, mb):
            opt, params, key = carry
            key, k = jax.random.split(key)
            (_, m), g = grad_fn(params, norm, mb, k)
            upd, opt = optimizer.update(g, opt)
            return (opt, optax.apply_updates(params, upd), key), m

        def sgd(carry, _):
            opt, params, key = carry
            key, k_perm, k_grad = jax.random.split(key, 3)
            shuffled = jax.tree.map(
                lambda x: jax.random.permutation(k_perm, x).reshape(num_mb, -1, *x.shape[1:]),
                data,
            )
            (opt, params, _), m = jax.lax.scan(minibatch, (opt, params, k_grad), shuffled)
            return (opt, params, key), m

        (opt, params, _), m = jax.lax.scan(sgd, (opt, params, key), None, length=epochs)
        return (norm, opt, params), jax.tree.map(jnp.mean, m)

    def training_step(ts, state, key):
        k_unroll, k_sgd = jax.random.split(key)
        state, data = collect(ts, state, k_unroll)
        ts, m = update(ts, data, k_sgd)
        return ts, state, m

    assert batch_size * num_mb == n  # one unroll per env per step, as in the bench row
    ts = (norm0, opt0, params)
    data = jax.jit(collect)(ts, state, key)[1]
    nxt = lambda k: jax.random.fold_in(k, 1)
    return [
        Program(
            "brax_step",
            training_step,
            (ts, state, key),
            lambda a, out: [out[0], out[1], nxt(a[2])],
            donate=(0, 1),
        ),
        Program(
            "brax_collect",
            collect,
            (ts, state, key),
            lambda a, out: [a[0], out[0], nxt(a[2])],
            donate=(1,),
        ),
        Program(
            "brax_update",
            update,
            (ts, data, key),
            lambda a, out: [out[0], a[1], nxt(a[2])],
            donate=(0,),
        ),
    ]


PAIRS = (
    ("ours_iteration", "brax_step"),
    ("ours_collect", "brax_collect"),
    ("ours_update", "brax_update"),
    ("ours_collect_1draw", "ours_collect"),
)


def table(paths: list[str]) -> str:
    """A markdown table of written profiles: medians and paired per-round ratios."""
    lines = [
        "| env | program | median s | env steps/s | load (1 min) |",
        "|---|---|---|---|---|",
    ]
    ratios = ["", "| env | time ratio (paired median) | value |", "|---|---|---|"]
    for path in paths:
        d = json.loads(Path(path).read_text())
        progs, load = d["programs"], "-".join(f"{x:.0f}" for x in d["load_avg_1min"])
        for name, v in progs.items():
            lines.append(
                f"| {d['env']} | {name} | {v['median_s']:.3f} | {v['env_steps_per_s']:,.0f} "
                f"| {load} |"
            )
        for a, b in PAIRS:
            if a in progs and b in progs:
                r = statistics.median(
                    x / y for x, y in zip(progs[a]["times_s"], progs[b]["times_s"], strict=True)
                )
                ratios.append(f"| {d['env']} | {a} / {b} | {r:.2f} |")
    return "\n".join(lines + ratios)


def main(argv: list[str] | None = None) -> int:
    """Measure and write the profile."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="brax/ant")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out-dir", default=str(ROOT / "experiments" / "results"))
    ap.add_argument("--skip", action="append", default=[], help="program names to leave out")
    ap.add_argument("--cache-dir", default="/tmp/jaxspreeze_profile_ppo_cache")
    ap.add_argument("--table", nargs="+", help="print a markdown table of these JSONs and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)  # reruns skip compiles
    cfg, kw = suite.trainer_config("ppo", args.env, "cpu")
    cfg = resolve(cfg)
    hidden = cfg.ppo.hidden
    print(f"{args.env}: {cfg.num_envs} envs x {cfg.rollout_steps} steps, batch {cfg.batch_size}")
    Program.skip = tuple(args.skip)
    progs: list[Program] = []
    for make in (
        lambda: our_programs(args.env, cfg),
        lambda: brax_programs(args.env, kw, hidden),
    ):
        for p in make():
            if p.name not in args.skip:
                print(f"  compiled {p.name} in {p.compile_s:.0f} s", flush=True)
                progs.append(p)
    for p in progs:  # warm-up call, not timed
        p.call()
        p.times.clear()
    load0 = os.getloadavg()
    for r in range(args.rounds):
        for p in progs:
            p.call()
        print(f"  round {r + 1}: " + ", ".join(f"{p.name} {p.times[-1]:.3f}" for p in progs))
    load1 = os.getloadavg()
    steps = cfg.num_envs * cfg.rollout_steps
    rows = {}
    for p in progs:
        med = statistics.median(p.times)
        rows[p.name] = {
            "median_s": med,
            "env_steps_per_s": steps / med,
            "times_s": p.times,
            "compile_s": p.compile_s,
            **cost(p.compiled),
            "hlo_ops": hlo_ops(p.compiled.as_text()),
        }
    out = {
        "env": args.env,
        "num_envs": cfg.num_envs,
        "rollout_steps": cfg.rollout_steps,
        "batch_size": cfg.batch_size,
        "epochs": cfg.ppo.epochs,
        "hidden": list(hidden),
        "rounds": args.rounds,
        "load_avg_1min": [load0[0], load1[0]],
        "backend": jax.default_backend(),
        "versions": versions(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "programs": rows,
    }
    name = args.env.replace("/", "_")
    path = Path(args.out_dir) / f"profile_ppo_{name}_{jax.default_backend()}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"\n{'program':22s} {'median s':>9s} {'env st/s':>9s} {'GFLOP':>8s} {'GB':>7s}")
    for k, v in rows.items():
        gf = (v["flops"] or 0) / 1e9
        gb = (v["bytes"] or 0) / 1e9
        print(f"{k:22s} {v['median_s']:9.3f} {v['env_steps_per_s']:9.0f} {gf:8.2f} {gb:7.2f}")
    print(f"load {load0[0]:.1f} -> {load1[0]:.1f}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
