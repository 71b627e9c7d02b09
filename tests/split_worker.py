"""Runs in a subprocess with two fake CPU devices (``JAX_NUM_CPU_DEVICES=2``) for test_split.

``python tests/split_worker.py equal sac ppo`` runs tiny SAC (2 seeds) and PPO configs with the
single and the split placement from the same seed and prints one JSON line of findings
(``asym`` instead of ``equal``: on test_asymmetric_obs's stand-in dict env, the critic
reading ``privileged_state``):
where each part of the state lives, whether the two runs agree, the policy lag, how often
JAX traced and compiled each program (its own ``jax.monitoring`` events) and what
``auto`` resolves to. ``learn`` trains SAC on Pendulum with the
split and prints the summary. The assertions live in test_split.py.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "2")

import jax
import numpy as np

from jaxspreeze import schedules
from jaxspreeze.algos.base import AgentState
from jaxspreeze.algos.ppo import PPOConfig
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core.types import Placement
from jaxspreeze.data import replay
from jaxspreeze.schedules import Schedule
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan

# JAX's own compile events (jax.monitoring): a function traced to a jaxpr, a program compiled
TRACE = "/jax/core/compile/jaxpr_trace_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"


def configs() -> dict[str, RunConfig]:
    """The tiny runs compared single vs split (3 chunks of 2 iterations each), resolved."""
    sac = RunConfig(
        algo="sac",
        num_envs=4,
        rollout_steps=1,
        grad_steps=2,
        batch_size=16,
        buffer_size=512,
        learning_starts=64,
        chunk_iterations=2,
        total_steps=64 + 3 * 2 * 4,
        num_seeds=2,
        sac=SACConfig(hidden=(16, 16)),
    )
    ppo = RunConfig(
        algo="ppo",
        num_envs=4,
        rollout_steps=8,
        batch_size=16,
        chunk_iterations=2,
        total_steps=3 * 2 * 32,
        ppo=PPOConfig(hidden=(16, 16), epochs=2),
    )
    fasttd3 = sac.replace(algo="fasttd3").replace(
        fasttd3={"actor_hidden": (16, 16), "critic_hidden": (32, 32), "num_atoms": 11}
    )
    # FastSAC with 2-step returns: the critic reads runs of consecutive transitions from
    # its buffer, the actor plain batches from its observation-only copy
    fastsac = sac.replace(algo="fastsac").replace(
        fastsac={"actor_hidden": (16, 16), "critic_hidden": (32, 32), "num_atoms": 11, "n_step": 2}
    )
    return {
        "sac": resolve(sac),
        "ppo": resolve(ppo),
        "fasttd3": resolve(fasttd3),
        "fastsac": resolve(fastsac),
    }


def where(state: TrainState) -> dict[str, list[int]]:
    """The device ids holding each part of the state."""
    parts = {
        "actor": state.agent.actor,
        "critic": state.agent.critic,
        "buffer": state.buffer,
        "obs_buffer": state.obs_buffer,
        "env": state.env,
        "key": state.key,
        "counters": (state.env_steps, state.iteration, state.actor_updates),
    }
    out = {}
    for name, tree in parts.items():
        ids = {d.id for x in jax.tree.leaves(tree) for d in x.devices()}
        out[name] = sorted(ids)
    return out


def compare(a, b) -> dict[str, object]:
    """Bitwise equality and max abs difference of two pytrees of arrays."""
    la = [np.asarray(jax.random.key_data(x) if _is_key(x) else x) for x in jax.tree.leaves(a)]
    lb = [np.asarray(jax.random.key_data(x) if _is_key(x) else x) for x in jax.tree.leaves(b)]
    assert len(la) == len(lb), (len(la), len(lb))
    diff = max(
        (
            float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
            for x, y in zip(la, lb, strict=True)
            if x.size
        ),
        default=0.0,
    )
    return {
        "bitwise": all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True)),
        "max_abs_diff": diff,
    }


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


@contextlib.contextmanager
def compile_events() -> Iterator[collections.Counter]:
    """Count JAX's trace and compile events by (event, function name) while inside."""
    seen: collections.Counter = collections.Counter()

    def listen(event: str, duration: float, **kwargs: object) -> None:
        if event in (TRACE, COMPILE):
            seen[event, str(kwargs.get("fun_name"))] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def by_hand(loop: Schedule, before: TrainState, after: TrainState) -> dict[str, bool]:
    """The staleness rule restated with the algorithm's phases, for seed 0 of a chunk.

    Each iteration: collect; store; critic phase against the actor's view from the
    start of the iteration; actor phase against the critic's view from the start.
    Returns whether the chunk matches the rule, and whether a rule where the critic
    sees the freshly updated actor gives another critic (it must, or the check is void).
    """
    algo = loop.algo

    @jax.jit
    def iterate(s):
        late = None
        for _ in range(loop.iterations_per_chunk):
            env, key, es, it, c, _ = loop.per_seed.collect(
                s.agent.actor, s.env, s.key, s.env_steps, s.iteration, s.actor_updates
            )
            buffer = replay.add_rollout(s.buffer, c.traj)
            critic, _ = algo.critic_phase(
                s.agent.critic, algo.actor_view(s.agent.actor), buffer, c.critic_key
            )
            actor, _ = algo.actor_phase(
                s.agent.actor, algo.critic_view(s.agent.critic), buffer, c.actor_key
            )
            if late is None:  # another rule: the critic sees the updated actor
                other, _ = algo.critic_phase(
                    s.agent.critic, algo.actor_view(actor), buffer, c.critic_key
                )
                late = (critic, other)
            au = s.actor_updates + algo.actor_steps_per_iteration
            s = TrainState(AgentState(actor, critic), env, buffer, None, key, es, it, au)
        return s, late

    one = lambda t: jax.tree.map(lambda x: x[0], t)
    expected, late = jax.device_get(iterate(one(before._replace(obs_buffer=None))))
    got = one(after)
    close = lambda a, b: all(
        np.allclose(x, y, rtol=1e-5, atol=1e-6)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )
    return {
        "matches_rule": close(got.agent, expected.agent),
        "buffer_matches": close(got.buffer, expected.buffer),
        "counters_match": close(
            (got.env_steps, got.iteration, got.actor_updates),
            (expected.env_steps, expected.iteration, expected.actor_updates),
        ),
        # the first iteration's critic differs under the other rule: the check has teeth
        "rules_differ": not close(*late),
    }


def run(cfg: RunConfig, placement: Placement, check_rule: bool = False):
    """Init, compile, warm up and run every chunk; record placements, outputs, compiles."""
    with compile_events() as whole_run:
        loop = schedules.make(plan(cfg, placement))
        state = loop.init()
        at_init = where(state)
        loop.compile(state)
        with compile_events() as after_compile:
            state = loop.warmup(state)
            warm = jax.device_get(state.buffer)
            at_warm = where(state)
            before = jax.device_get(state)
            metrics, first = [], None
            for _ in range(loop.num_chunks):
                state, m = loop.chunk(state)
                metrics.append(jax.device_get(m))
                first = jax.device_get(state) if first is None else first
    rule = by_hand(loop, before, first) if check_rule else None
    at_end = where(state)
    comparable = state._replace(obs_buffer=None)  # single keeps no obs-only copy
    obs_match = None
    if state.obs_buffer is not None:  # the obs-only copy holds the buffer's observations
        obs_match = compare(state.obs_buffer.data.obs, state.buffer.data.obs)["bitwise"]
    return {
        "loop": loop,
        "state": jax.device_get(comparable),
        "warm_buffer": warm,
        "metrics": metrics,
        "where": {"init": at_init, "warm": at_warm, "end": at_end},
        "obs_buffer_matches": obs_match,
        "rule": rule,
        "traces": {name: n for (event, name), n in whole_run.items() if event == TRACE},
        "compiles": {name: n for (event, name), n in whole_run.items() if event == COMPILE},
        "events_after_compile": sum(after_compile.values()),
    }


def equal(names: list[str], **changes: object) -> dict[str, object]:
    """Single vs split for the named configs (with ``changes`` applied)."""
    d = jax.devices()
    out: dict[str, object] = {
        "devices": len(d),
        "auto_split": devices.resolve("auto").split,
        "auto": devices.resolve("auto").describe(),
    }
    for name in names:
        cfg = configs()[name].replace(**changes) if changes else configs()[name]
        single = run(cfg, devices.single(d[0]), check_rule=name == "sac")
        split = run(cfg, devices.resolve("split"))
        lag = [np.asarray(m["policy_lag"]).tolist() for m in split["metrics"]]
        out[name] = {
            "num_seeds": cfg.num_seeds,
            "state": compare(single["state"], split["state"]),
            "metrics": compare(single["metrics"], split["metrics"]),
            "metric_keys_equal": sorted(single["metrics"][0]) == sorted(split["metrics"][0]),
            "warm_buffer": compare(single["warm_buffer"], split["warm_buffer"]),
            "where_single": single["where"],
            "where_split": split["where"],
            "obs_buffer_matches": split["obs_buffer_matches"],
            "policy_lag_split": lag,
            "policy_lag_single": [np.asarray(m["policy_lag"]).tolist() for m in single["metrics"]],
            "actor_steps_per_iteration": split["loop"].algo.actor_steps_per_iteration,
            "actor_updates": np.asarray(split["state"].actor_updates).tolist(),
            "iterations": np.asarray(split["state"].iteration).tolist(),
            "metric_shape": list(np.shape(split["metrics"][0]["policy_lag"])),
            "traces_split": split["traces"],
            "traces_single": single["traces"],
            "compiles_split": split["compiles"],
            "compiles_single": single["compiles"],
            "events_after_compile_split": split["events_after_compile"],
            "events_after_compile_single": single["events_after_compile"],
            "chunks": split["loop"].num_chunks,
            "staleness_rule": single["rule"],
        }
    return out


def learn() -> dict[str, object]:
    """SAC on Pendulum with the split placement and test_train.py's settings."""
    from jaxspreeze.run.trainer import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(  # test_train.py's config, split
            total_steps=4_000,
            num_envs=8,
            grad_steps=16,
            batch_size=128,
            learning_starts=500,
            eval_episodes=8,
            logdir=tmp,
            run_name="learn",
            sinks=("jsonl",),
            placement="split",
        ).replace(sac={"hidden": (64, 64)})
        result = train(cfg, quiet=True, save=False)
    s = result.summary
    return {k: s.get(k) for k in ("final_eval_return", "placement", "policy_lag", "env_steps")}


if __name__ == "__main__":
    case, names = sys.argv[1], sys.argv[2:]
    if case == "asym":
        from test_asymmetric_obs import ASYMMETRIC, register_standins

        from jaxspreeze.envs import env_spec

        register_standins()
        keys = {"critic_obs_key": ASYMMETRIC.critic}
        result = equal(names, env="playground/TestPointMass", **keys)
        spec = env_spec("playground/TestPointMass", ASYMMETRIC)
        result.update(obs_shape=spec.obs_shape, actor_obs=spec.actor_obs)
    else:
        result = equal(names) if case == "equal" else learn()
    print(json.dumps(result, default=str))
