"""One seed's fused chunk, vmapped over a size-1 seed axis against the same per-seed
iteration scanned without the axis (what ``schedules.fused.unbatched`` picks for a
LayerNorm network on a CPU), interleaved in one process.

    JAX_PLATFORMS=cpu taskset -c 0 python experiments/seed_axis_ab.py \
        sac_default dqn_cartpole pqn_cartpole ppo_cartpole

Both programs are compiled with ``--compile quick``'s options; each round runs every
program once; prints the median wall per chunk (experiments/results/seed_axis_cpu.md).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time

import jax

from jaxspreeze import schedules
from jaxspreeze.core.programs import QUICK_OPTIONS
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

CASES = {
    "sac_default": lambda: RunConfig(),
    "dqn_cartpole": lambda: config.load("jaxspreeze/presets/dqn_cartpole.toml"),
    "pqn_cartpole": lambda: config.load("jaxspreeze/presets/pqn_cartpole.toml").replace(
        chunk_iterations=8
    ),
    "ppo_cartpole": lambda: config.load("jaxspreeze/presets/ppo_cartpole.toml"),
    # PQN beyond CartPole, without its LayerNorm, and DQN with one (the layout's scope)
    "pqn_acrobot": lambda: RunConfig(algo="pqn", env="gymnax/Acrobot-v1", chunk_iterations=8),
    "pqn_breakout": lambda: config.load("jaxspreeze/presets/pqn_breakout_minatar.toml").replace(
        chunk_iterations=4
    ),
    "pqn_cartpole_no_ln": lambda: _pqn_cartpole(layer_norm=False),
    "pqn_cartpole_gru": lambda: _pqn_cartpole(memory="gru"),
    # FastTD3 with its critic's LayerNorms (--fasttd3.critic-layer-norm), and without
    "fasttd3_pendulum_ln": lambda: _section(
        config.load("jaxspreeze/presets/fasttd3_pendulum.toml"), "fasttd3", critic_layer_norm=True
    ),
    "fasttd3_pendulum": lambda: config.load("jaxspreeze/presets/fasttd3_pendulum.toml"),
    "fastsac_pendulum_ln": lambda: _section(
        config.load("jaxspreeze/presets/fastsac_pendulum.toml"), "fastsac", critic_layer_norm=True
    ),
    "dqn_cartpole_ln": lambda: _section(
        config.load("jaxspreeze/presets/dqn_cartpole.toml"), "dqn", layer_norm=True
    ),
}


def _section(cfg: RunConfig, name: str, **fields) -> RunConfig:
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **fields)})


def _pqn_cartpole(**fields) -> RunConfig:
    cfg = config.load("jaxspreeze/presets/pqn_cartpole.toml").replace(chunk_iterations=8)
    return _section(cfg, "pqn", **fields)


def programs(name: str) -> dict:
    """The case's chunk both ways, compiled, with its first state and env steps."""
    cfg = config.resolve(CASES[name]().replace(num_seeds=1, compile="quick"))
    s = schedules.make(plan(cfg, devices.single()))
    state = s._init()(jax.random.split(jax.random.key(0), 1))
    if s.plan.warmup_steps and not s.algo.on_policy:
        state = jax.jit(jax.vmap(s.per_seed.warmup))(state)

    def squeezed(st):
        one = jax.tree.map(lambda x: x[0], st)
        last, metrics = jax.lax.scan(
            lambda c, _: s.per_seed(c), one, None, length=s.iterations_per_chunk
        )
        return jax.tree.map(lambda x: x[None], last), jax.tree.map(lambda x: x[:, None], metrics)

    def vmapped(st):  # the seed axis kept (what fused_chunk runs but for fused.unbatched)
        return jax.lax.scan(
            lambda c, _: jax.vmap(s.per_seed)(c), st, None, length=s.iterations_per_chunk
        )

    steps = cfg.num_envs * cfg.rollout_steps * cfg.chunk_iterations
    out = {}
    for tag, fn in (("vmap", vmapped), ("squeezed", squeezed)):
        prog = jax.jit(fn).lower(state).compile(compiler_options=QUICK_OPTIONS)
        state_out = jax.block_until_ready(prog(state))[0]
        out[f"{name} {tag}"] = (prog, state_out, steps)
    return out


def main() -> None:
    progs = {}
    for name in sys.argv[1:] or list(CASES):
        progs.update(programs(name))
    times: dict[str, list[float]] = {n: [] for n in progs}
    for _ in range(7):
        for n, (prog, state, _steps) in progs.items():
            t = time.perf_counter()
            jax.block_until_ready(prog(state))
            times[n].append(time.perf_counter() - t)
    for n, (_prog, _state, steps) in progs.items():
        m = statistics.median(times[n])
        print(f"{n}: {m * 1e3:.1f} ms a chunk, {steps / m:,.0f} env steps/s", flush=True)


if __name__ == "__main__":
    main()
