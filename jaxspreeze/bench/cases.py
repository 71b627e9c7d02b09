"""The measured cases: sampling, update step, training chunk, end to end, suite stepping.

Each ``prepare`` function builds and compiles the work outside any timer and returns a
:class:`~jaxspreeze.bench.record.Workload`; the pytest-benchmark suite
(``tests/benchmarks``) and ``jaxspreeze bench`` time the very same workloads.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze import algos, schedules
from jaxspreeze.agent.evaluate import make_evaluate
from jaxspreeze.algos.base import AgentState
from jaxspreeze.bench.record import (
    Record,
    Workload,
    chained,
    compile_timed,
    evaluated_chunks,
    flops_of,
    throughput_record,
)
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.data.rollout import env_init, rollout
from jaxspreeze.envs import FAMILIES, VecEnv, env_spec, make_env
from jaxspreeze.schedules import Schedule, iteration
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig, resolve
from jaxspreeze.setup.plan import plan, steps_per_iteration, warmup_steps

HIDDEN = (256, 256)
# the fast recipes' widths in FastTD3's paper (a GPU's): a categorical twin critic wider
# than the actor; their update rows measure the distributional critic at these sizes
RECIPE_WIDTHS = {"actor_hidden": (512, 256, 128), "critic_hidden": (1024, 512, 256)}
UPDATE_ENV = "gymnax/Pendulum-v1"
ON_POLICY_ROLLOUT_STEPS = 16
ON_POLICY_MINIBATCHES = 4


class Unavailable(RuntimeError):
    """A case cannot run here (the algorithm does not train that env)."""


def _check_supported(algo: str, spec: EnvSpec) -> None:
    """Raise :class:`Unavailable` when ``algo`` cannot train an env like ``spec``."""
    reason = algos.get(algo).supports(spec)
    if reason:
        raise Unavailable(f"{algo} on {spec.name}: {reason}")


def widths(algo: str, hidden: tuple[int, ...] = HIDDEN) -> dict[str, tuple[int, ...]]:
    """The network widths of ``algo``'s config a case sets: ``hidden`` for an algorithm
    with one width list; the recipe's (:data:`RECIPE_WIDTHS`) for the fast recipes."""
    names = {f.name for f in dataclasses.fields(algos.get(algo).config_cls)}
    if "hidden" in names:
        return {"hidden": tuple(hidden)}
    return {k: v for k, v in RECIPE_WIDTHS.items() if k in names}


def widths_label(sizes: dict[str, tuple[int, ...]]) -> str:
    """``256x256``, or ``actor 512x256x128, critic 1024x512x256``."""
    if set(sizes) == {"hidden"}:
        return "x".join(map(str, sizes["hidden"]))
    return ", ".join(f"{k.split('_')[0]} {'x'.join(map(str, v))}" for k, v in sizes.items())


def run_config(algo: str, env: str, hidden: tuple[int, ...] = HIDDEN, **fields: Any) -> RunConfig:
    """A resolved RunConfig for ``algo`` on ``env`` with its networks set to ``hidden``
    (the fast recipes: their paper's widths, :func:`widths`), its programs compiled for
    run speed (``compile="full"``: a row's rate stands for a long run's)."""
    base = RunConfig(compile="full")
    algo_cfg = dataclasses.replace(getattr(base, algo), **widths(algo, hidden))
    return resolve(dataclasses.replace(base, algo=algo, env=env, **{algo: algo_cfg}, **fields))


def _schedule(cfg: RunConfig) -> tuple[Schedule, TrainState, float]:
    """The fused one-device schedule of ``cfg``, a fresh state and the seconds to compile."""
    _check_supported(cfg.algo, env_spec(cfg.env, cfg.obs_keys))
    schedule = schedules.make(plan(cfg, devices.single()))
    state = schedule.init()
    t0 = time.perf_counter()
    schedule.compile(state)
    return schedule, state, time.perf_counter() - t0


# ----------------------------------------------------------------------------- sampling
def _policy(spec: EnvSpec, num_envs: int, hidden: tuple[int, ...]):
    """(init(key) -> params, the algorithm, name) of a training policy: the first
    registered algorithm that trains the env (SAC's tanh-Gaussian for continuous actions,
    PPO's categorical for discrete ones), whose ``act`` samples."""
    algo = next(a.name for a in algos.all_specs() if a.supports(spec) is None)
    cfg = run_config(algo, spec.name, hidden, num_envs=num_envs, batch_size=num_envs)
    a = algos.get(algo).make(getattr(cfg, algo), spec, cfg)
    return lambda key: a.init(key).actor, a, f"{algo}.act"


def sampling_steps(num_envs: int, env_name: str) -> int:
    """Rollout length per timed call: about 64k env steps (16k for brax), 16 to 1000 steps."""
    budget = 16_384 if env_name.startswith("brax/") else 65_536
    return int(np.clip(budget // num_envs, 16, 1000))


def sampling(
    env_name: str, num_envs: int, steps: int | None = None, hidden=HIDDEN, seed: int = 0
) -> Workload:
    """jaxspreeze's collect: ``rollout`` of the policy in ``num_envs`` vmapped envs, T steps."""
    steps = steps or sampling_steps(num_envs, env_name)
    env: VecEnv = make_env(env_name, num_envs)
    init_params, algo, policy_name = _policy(env.spec, num_envs, hidden)
    k_params, k_env, key = jax.random.split(jax.random.key(seed), 3)
    params = jax.jit(init_params)(k_params)
    carry = jax.jit(lambda k: env_init(env, k, algo.initial_carry(num_envs)))(k_env)

    def collect(params, carry, key):
        key, k = jax.random.split(key)
        policy = lambda c, obs, kk: algo.act(params, c, obs, kk, False)
        initial = algo.initial_carry(num_envs)
        carry, traj, _ = rollout(env, policy, carry, k, steps, initial)
        return carry, key, traj

    compiled, compile_s = compile_timed(collect, params, carry, key, donate=(1,))
    policy = f"{policy_name} {'x'.join(map(str, hidden))}"
    return Workload(
        f"sampling[{env_name}-n{num_envs}]",
        chained(functools.partial(compiled, params), carry, key),
        env_steps=num_envs * steps,
        compile_s=compile_s,
        params=dict(
            kind="sampling", env=env_name, num_envs=num_envs, rollout_steps=steps, policy=policy
        ),
    )


# ----------------------------------------------------------------------------- suite stepping
def check_suite(env_name: str) -> None:
    """:class:`Unavailable` (one line naming the ``pip install``) when the suite of
    ``env_name`` (``<family>/<id>``) is not installed."""
    family = FAMILIES[env_name.partition("/")[0]]
    if hasattr(family, "installed") and not family.installed():
        raise Unavailable(f"{env_name}: its suite is not installed: {family.INSTALL}")


def suite_stepper(
    env_name: str, num_envs: int, seed: int = 0, env: VecEnv | None = None
) -> tuple[Any, Callable]:
    """jaxspreeze's side of a suite row: ``(carry, step)`` with ``step(carry, key) ->
    (carry, reward [N])``, the env stepping of the fused chunk without the policy: the
    family's adapter (``make_env``: its ``step_batch`` with jaxspreeze's auto-reset and
    the episode bookkeeping, :meth:`VecEnv.step`) on uniform random legal actions
    (:meth:`VecEnv.random_actions`). ``env``: another build of it (an experiment's)."""
    env = env or make_env(env_name, num_envs)

    def step(carry, key):
        k_act, k_step = jax.random.split(key)
        obs, state, reward, *_ = env.step(k_step, carry[1], env.random_actions(k_act, carry[0]))
        return (obs, state), reward

    return env.reset(jax.random.key(seed)), step


# ----------------------------------------------------------------------------- updates
def update_grad_steps(batch_size: int) -> int:
    """Gradient steps per timed call: about 16k samples, between 1 and 32 steps."""
    return int(np.clip(16_384 // batch_size, 1, 32))


def random_transitions(spec: EnvSpec, key: jax.Array, shape: tuple[int, ...]) -> Transition:
    """Random transitions ``[*shape, ...]`` shaped like ``spec``'s (a stand-in buffer)."""
    k = jax.random.split(key, 5)
    obs = jax.random.normal(k[0], (*shape, *spec.obs_shape))
    if spec.discrete:
        action = jax.random.randint(k[1], shape, 0, spec.action_dim)
    else:
        low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
        action = jax.random.uniform(k[1], (*shape, spec.action_dim), minval=low, maxval=high)
    reward = jax.random.normal(k[2], shape)
    terminated = jax.random.uniform(k[3], shape) < 0.01
    next_obs = jax.random.normal(k[4], (*shape, *spec.obs_shape))
    return Transition(obs, action, reward, terminated, jnp.zeros(shape, bool), next_obs)


def _update_config(algo: str, env: str, batch_size: int, steps: int, hidden) -> RunConfig:
    if algos.get(algo).on_policy:  # `steps` minibatches per epoch, each of batch_size samples
        n = max(1, steps * batch_size // ON_POLICY_ROLLOUT_STEPS)
        return run_config(
            algo,
            env,
            hidden,
            num_envs=n,
            rollout_steps=ON_POLICY_ROLLOUT_STEPS,
            batch_size=batch_size,
        )
    capacity = max(100_000, 4 * batch_size)
    return run_config(
        algo, env, hidden, grad_steps=steps, batch_size=batch_size, buffer_size=capacity
    )


def _update_program(
    algo_name: str, cfg: RunConfig, spec: EnvSpec, seed: int, abstract: bool = False
):
    """(step(agent, data, key), agent, data, algorithm) for one update call.

    ``step`` is :func:`~jaxspreeze.schedules.iteration.update_step` (the critic-then-actor step
    under the staleness rule) with a fresh key per call. ``abstract``: agent and data are
    shapes only (for lowering, e.g. cost analysis).
    """
    algo = algos.get(algo_name).make(getattr(cfg, algo_name), spec, cfg)
    k_agent, k_data = jax.random.split(jax.random.key(seed))

    def make_data(key: jax.Array):
        if algo.on_policy:
            return random_transitions(spec, key, (cfg.rollout_steps, cfg.num_envs))
        items = random_transitions(spec, key, (cfg.buffer_size,))
        return replay.ReplayState(
            items, jnp.zeros((), jnp.int32), jnp.asarray(cfg.buffer_size, jnp.int32)
        )

    if abstract:
        agent, data = jax.eval_shape(algo.init, k_agent), jax.eval_shape(make_data, k_data)
    else:
        agent, data = jax.jit(algo.init)(k_agent), jax.jit(make_data)(k_data)

    def step(agent: AgentState, data: Any, key: jax.Array):
        key, k_step = jax.random.split(key)
        agent, metrics = iteration.update_step(algo, agent, data, k_step)
        return agent, key, metrics

    return step, agent, data, algo


def _one_step_config(algo: str, env: str, batch_size: int, steps: int, hidden) -> RunConfig:
    cfg = _update_config(algo, env, batch_size, steps, hidden)
    if algos.get(algo).on_policy:  # one epoch over one minibatch
        n = max(1, batch_size // ON_POLICY_ROLLOUT_STEPS)
        one_epoch = dataclasses.replace(getattr(cfg, algo), epochs=1)
        cfg = dataclasses.replace(cfg, **{algo: one_epoch}, num_envs=n)
    return cfg


def _flops_per_step(
    algo_name: str, env_name: str, batch_size: int, hidden, seed: int
) -> tuple[float | None, float | None]:
    """(critic, actor) FLOPs of one gradient step, from XLA's cost analysis.

    XLA counts a loop body once whatever its trip count, so each side is analysed in a
    program where it takes exactly one step (TD3 needs ``policy_delay`` critic steps
    for one actor step: the actor side is analysed alone).
    """
    spec = env_spec(env_name)
    key = jax.random.key(seed)
    out: list[float | None] = []
    for side in ("critic", "actor"):
        for steps in range(1, 9):
            cfg = _one_step_config(algo_name, env_name, batch_size, steps, hidden)
            _, agent, data, algo = _update_program(algo_name, cfg, spec, seed, abstract=True)
            n = getattr(algo, f"{side}_steps_per_iteration")
            if n >= 1:
                break
        if n != 1:
            out.append(None)
            continue
        if side == "critic":
            fn = lambda ag, d, k, a=algo: iteration.critic_update(
                a, ag.critic, a.actor_view(ag.actor), d, k
            )
        else:
            fn = lambda ag, d, k, a=algo: iteration.actor_update(
                a, ag.actor, a.critic_view(ag.critic), d, k
            )
        out.append(flops_of(jax.jit(fn).lower(agent, data, key)))
    return out[0], out[1]


def update(
    algo_name: str,
    batch_size: int,
    grad_steps: int | None = None,
    env_name: str = UPDATE_ENV,
    hidden=HIDDEN,
    seed: int = 0,
) -> Workload:
    """One update call of ``algo_name``: critic and actor phases on ``batch_size`` samples.

    Off-policy: ``grad_steps`` steps, each on a fresh batch from a full replay buffer.
    On-policy (PPO): all of its epochs over a rollout of 4 minibatches of ``batch_size``.
    FLOPs per call: XLA's cost analysis of one step per side, times the steps per call.
    """
    spec = env_spec(env_name)
    _check_supported(algo_name, spec)
    algo_spec = algos.get(algo_name)
    if algo_spec.on_policy:
        steps = ON_POLICY_MINIBATCHES
    else:  # whole cycles of the algorithm (TD3: one actor step per policy_delay steps)
        multiple = algo_spec.grad_step_multiple(algo_spec.config_cls())
        steps = -(-(grad_steps or update_grad_steps(batch_size)) // multiple) * multiple
    cfg = _update_config(algo_name, env_name, batch_size, steps, hidden)
    step, agent, data, algo = _update_program(algo_name, cfg, spec, seed)
    key = jax.random.key(seed + 1)
    compiled, compile_s = compile_timed(step, agent, data, key, donate=(0,))

    critic_flops, actor_flops = _flops_per_step(algo_name, env_name, batch_size, hidden, seed)
    flops = None
    if critic_flops and (actor_flops or not algo.actor_steps_per_iteration):
        flops = critic_flops * algo.critic_steps_per_iteration
        flops += (actor_flops or 0.0) * algo.actor_steps_per_iteration

    critic_steps = algo.critic_steps_per_iteration
    return Workload(
        name=f"update[{algo_name}-b{batch_size}]",
        run=chained(lambda agent, key: compiled(agent, data, key), agent, key),
        update_samples=critic_steps * batch_size,
        grad_steps={"critic": critic_steps, "actor": algo.actor_steps_per_iteration},
        compile_s=compile_s,
        flops=flops,
        params={
            "kind": "update",
            "algo": algo_name,
            "env": env_name,
            "batch_size": batch_size,
            "hidden": widths_label(widths(algo_name, hidden)),
            "flops_per_sample": flops / (critic_steps * batch_size) if flops else None,
        },
    )


# ----------------------------------------------------------------------------- chunk
def chunk_config(
    algo: str,
    env: str,
    num_envs: int,
    batch_size: int,
    chunk_iterations: int,
    grad_steps: int = 1,
    rollout_steps: int = 1,
    hidden=HIDDEN,
    **fields: Any,
) -> RunConfig:
    """A resolved config whose run is ten chunks of ``chunk_iterations`` iterations."""
    cfg = run_config(
        algo,
        env,
        hidden,
        num_envs=num_envs,
        batch_size=batch_size,
        grad_steps=grad_steps,
        rollout_steps=rollout_steps,
        chunk_iterations=chunk_iterations,
        placement="single",
        **fields,
    )
    warmup = warmup_steps(cfg, algos.get(algo).on_policy)
    total = warmup + 10 * chunk_iterations * steps_per_iteration(cfg)
    return dataclasses.replace(cfg, total_steps=total)


def chunk(cfg: RunConfig) -> Workload:
    """One jitted training chunk (collect + store + update, K iterations), fused schedule."""
    schedule, state, compile_s = _schedule(cfg)
    cfg = schedule.cfg
    state = schedule.warmup(state)
    jax.block_until_ready(state)
    k, s = schedule.iterations_per_chunk, cfg.num_seeds
    return _schedule_work(
        f"chunk[{cfg.algo}-{cfg.env}-n{cfg.num_envs}]",
        schedule,
        k * s,
        compile_s,
        chained(schedule.chunk, state),
        _params(
            "chunk", cfg, "algo", "env", "num_envs", "rollout_steps", "grad_steps", "batch_size"
        )
        | {"chunk_iterations": k, "num_seeds": s},
    )


def _schedule_work(
    name: str,
    schedule: Schedule,
    iterations: int,
    compile_s: float,
    run: Callable[[], None],
    params: dict[str, Any],
) -> Workload:
    """The work of ``iterations`` iterations of ``schedule`` (all seeds') as a workload."""
    cfg, algo = schedule.cfg, schedule.algo
    critic_steps = iterations * algo.critic_steps_per_iteration
    return Workload(
        name,
        run,
        env_steps=iterations * schedule.plan.steps_per_iteration,
        update_samples=critic_steps * cfg.batch_size,
        grad_steps={"critic": critic_steps, "actor": iterations * algo.actor_steps_per_iteration},
        compile_s=compile_s,
        policy_lag=float(schedule.policy_lag),
        params=params,
    )


def _params(kind: str, cfg: RunConfig, *fields: str) -> dict[str, Any]:
    """A case's parameters: its kind, then ``fields`` of ``cfg`` in order."""
    return {"kind": kind, **{f: getattr(cfg, f) for f in fields}}


# ----------------------------------------------------------------------------- end to end
def end_to_end(cfg: RunConfig, threshold: float, eval_episodes: int = 16) -> Record:
    """Train chunk by chunk, evaluating after each, until the return reaches ``threshold``.

    ``wall_to_threshold_s`` runs from the end of compilation to the evaluation that
    first reaches the threshold (warm-up, chunks and evaluations included);
    ``compile_s`` (chunk, warm-up and evaluator programs) is reported apart.
    """
    schedule, state, compile_s = _schedule(cfg)
    cfg = schedule.cfg
    evaluate = jax.vmap(
        make_evaluate(schedule.algo, make_env(cfg.env, eval_episodes, cfg.obs_keys))
    )
    keys = jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds)
    ev, ev_compile_s = compile_timed(evaluate, state.agent.actor, keys)
    compile_s += ev_compile_s
    mean_return = lambda s: float(np.mean(jax.device_get(ev(s.agent.actor, keys).return_mean)))

    t0 = time.perf_counter()
    state = schedule.warmup(state)
    train_s = eval_s = 0.0
    curve: list[tuple[int, float, float]] = []
    reached_at: float | None = None
    for done in evaluated_chunks(schedule, state, mean_return):
        train_s += done.chunk_s
        eval_s += done.eval_s
        steps = int(np.asarray(done.state.env_steps).sum())
        curve.append((steps, time.perf_counter() - t0, done.result))
        if done.result >= threshold:
            reached_at = time.perf_counter() - t0
            break
    wall = time.perf_counter() - t0
    steps = curve[-1][0] if curve else 0
    w = _schedule_work(
        f"end_to_end[{cfg.algo}-{cfg.env}]",
        schedule,
        len(curve) * schedule.iterations_per_chunk * cfg.num_seeds,
        compile_s,
        lambda: None,
        _params("end_to_end", cfg, "algo", "env", "num_envs", "batch_size", "grad_steps")
        | {"threshold": threshold},
    )
    record = throughput_record(w, max(train_s, 1e-9))  # rates over the chunks only
    record.update(
        reached=reached_at is not None,
        wall_to_threshold_s=reached_at,
        env_steps_to_threshold=steps if reached_at is not None else None,
        final_return=curve[-1][2] if curve else None,
        wall_s=wall,
        train_s=train_s,
        eval_s=eval_s,
        curve=[{"env_steps": s, "wall_s": t, "return": r} for s, t, r in curve],
    )
    return record
