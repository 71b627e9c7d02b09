"""The timed probes autotune runs: the policy-in-the-loop rollout and the update step.

:class:`RealProber` compiles each grid point ahead of time (compile time reported apart),
runs it once untimed, then times ``REPS`` repetitions of enough chained calls to last
``MIN_REP_S`` each, blocking until the results are ready before each timer stops; the
rate is the median. Memory is estimated before anything is allocated (``replay.nbytes``,
``jax.eval_shape``) and checked again against XLA's own count after compiling. The update
probe times :func:`jaxspreeze.schedules.iteration.update_step`, the training loop's own
critic-then-actor step.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze import envs
from jaxspreeze.autotune.choose import Point
from jaxspreeze.core.types import EnvSpec, Transition
from jaxspreeze.data import replay
from jaxspreeze.data.rollout import env_init, rollout
from jaxspreeze.schedules import iteration
from jaxspreeze.setup.plan import RunPlan

REPS = 5  # timed repetitions per point (the rate is their median)
MIN_REP_S = 0.05  # each repetition runs enough calls to last at least this long
MAX_CALLS = 64
SAMPLING_STEPS_PER_CALL = 4096  # env steps per timed sampling call (T_probe x n)
UPDATE_SAMPLES_PER_CALL = 2048  # update samples per timed update call (G_probe x B)
ACTIVATION_PASSES = 16  # network passes x (forward + backward) kept live by one update
ON_POLICY_PROBE_MINIBATCHES = 4  # the on-policy update probe: minibatches per epoch


class Prober(Protocol):
    """Measures throughput at one grid point and estimates memory before allocating."""

    fixed_bytes: int  # replay buffer + agent state: allocated whatever n and B are

    def sampling_bytes(self, num_envs: int) -> int:
        """Memory a run with ``num_envs`` envs needs for sampling, before allocating."""
        ...

    def update_bytes(self, batch: int) -> int:
        """Memory one update with ``batch`` samples needs, before allocating."""
        ...

    def sampling(self, num_envs: int) -> Point | None:
        """Measure env steps/s with the policy in the loop (None: does not fit)."""
        ...

    def update(self, batch: int) -> Point | None:
        """Measure update samples/s at this batch size (None: does not fit)."""
        ...


def free_memory(device: Any) -> int:
    """Bytes free on ``device`` (GPU/TPU: allocator stats; CPU: the host's available RAM)."""
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # backends without stats
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _tree_bytes(tree: Any) -> int:
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


class RealProber:
    """Times the real programs: the policy-in-the-loop rollout and the update step."""

    def __init__(self, plan: RunPlan, memory_limit: int):
        cfg = self.cfg = plan.cfg
        self.placement, self.memory_limit = plan.placement, memory_limit
        self.algo_spec, self.spec, self.algo_config = plan.algo_spec, plan.env_spec, plan.algo_config
        self.example = replay.example_transition(self.spec)
        algo = plan.make_algorithm()
        self.on_policy = algo.on_policy
        self.width = sum(self.algo_config.hidden)
        self._algo0 = algo
        self._agent_shapes = jax.eval_shape(algo.init, jax.random.key(0))
        self.agent_bytes = _tree_bytes(self._agent_shapes)
        self.buffer_bytes = 0 if self.on_policy else replay.nbytes(self.example, cfg.buffer_size)
        self.seeds = cfg.num_seeds  # rates are measured for one agent; memory is per run
        self.fixed_bytes = (self.agent_bytes + self.buffer_bytes) * self.seeds
        self._buffer: Any = None
        self._agent_state: Any = None
        self._timers: dict[tuple[str, int], Callable[[int], list[float]]] = {}

    # memory, estimated before anything is allocated
    def _probe_steps(self, num_envs: int) -> int:
        return max(1, min(256, SAMPLING_STEPS_PER_CALL // num_envs))

    def sampling_bytes(self, num_envs: int) -> int:
        """Env state, the rollout ``[T, n]`` and the policy's activations."""
        env = envs.make_env(self.cfg.env, num_envs, self.cfg.obs_keys)
        carry = _tree_bytes(jax.eval_shape(env.reset, jax.random.key(0)))
        steps = max(self._probe_steps(num_envs), self.cfg.rollout_steps)
        traj = replay.nbytes(self.example, num_envs * steps)
        return (carry + traj + 4 * num_envs * self.width * 4) * self.seeds

    def update_bytes(self, batch: int) -> int:
        """The sampled batch and the activations the update keeps for its gradients."""
        data = replay.nbytes(self.example, batch) * 2
        if self.on_policy:
            rollout_envs = self._on_policy_envs(batch)
            data += replay.nbytes(self.example, rollout_envs * self.cfg.rollout_steps)
        return (data + ACTIVATION_PASSES * batch * self.width * 4) * self.seeds

    # timing
    def _time(
        self, kind: str, fn: Callable, state: Any, const: Any, work: int, value: int, nbytes: int
    ) -> Point | None:
        """Compile ``fn``, run it once, then time REPS repetitions (kept for :meth:`retime`)."""
        key = jax.device_put(jax.random.key(self.cfg.seed), _device_of(state))
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(state, const, key).compile()
        compile_s = time.perf_counter() - t0
        compiled_bytes = 0
        try:
            m = compiled.memory_analysis()
            compiled_bytes = int(
                m.argument_size_in_bytes
                + m.output_size_in_bytes
                + m.temp_size_in_bytes
                - m.alias_size_in_bytes
            )
        except Exception:  # not every backend reports it
            pass
        if compiled_bytes > self.memory_limit:
            return None
        t0 = time.perf_counter()
        state, _ = jax.block_until_ready(compiled(state, const, key))
        warm_s = time.perf_counter() - t0
        calls = min(max(math.ceil(MIN_REP_S / max(warm_s, 1e-6)), 1), MAX_CALLS)
        call_times: list[float] = []

        def timed(reps: int) -> list[float]:
            nonlocal state
            rates = []
            for _ in range(reps):
                t0 = time.perf_counter()
                for _ in range(calls):  # chained: each call consumes the previous state
                    state, aux = compiled(state, const, key)
                jax.block_until_ready((state, aux))
                dt = time.perf_counter() - t0
                rates.append(calls * work / dt)
                call_times.append(dt / calls)
            return rates

        rates = timed(REPS)
        self._timers[kind, value] = timed
        return Point(
            value,
            statistics.median(rates),
            compile_s,
            statistics.median(call_times),
            work,
            rates,
            nbytes,
            compiled_bytes,
        )

    def sampling(self, num_envs: int) -> Point | None:
        """env steps/s of ``rollout`` with the algorithm's stochastic policy in the loop."""
        cfg = self.cfg
        steps = self._probe_steps(num_envs)
        env = envs.make_env(cfg.env, num_envs, cfg.obs_keys)
        run = cfg.replace(num_envs=num_envs)
        if self.on_policy:
            run = run.replace(batch_size=num_envs * cfg.rollout_steps)
        algo = self.algo_spec.make(self.algo_config, self.spec, run)
        device = self.placement.actor
        actor = self._agent(device).actor
        key = jax.device_put(jax.random.key(cfg.seed + 1), device)
        carry = jax.jit(lambda k: env_init(env, k, algo.initial_carry(num_envs)))(key)

        def fn(carry, actor, key):
            policy = lambda c, obs, k: algo.act(actor, c, obs, k, False)
            initial = algo.initial_carry(num_envs)
            carry, traj, _ = rollout(env, policy, carry, key, steps, initial)
            return carry, traj

        return self._time(
            "sampling", fn, carry, actor, num_envs * steps, num_envs, self.sampling_bytes(num_envs)
        )

    def _on_policy_envs(self, batch: int) -> int:
        """Envs of the on-policy probe rollout: 4 minibatches of ``batch`` per epoch."""
        t = self.cfg.rollout_steps
        unit = batch // math.gcd(batch, t)  # n must be a multiple of this for B | n T
        return unit * max(1, math.ceil(ON_POLICY_PROBE_MINIBATCHES * batch / (unit * t)))

    def _filled_buffer(self) -> Any:
        """A replay buffer of ``buffer_size`` random transitions (allocated once)."""
        if self._buffer is None:
            cap = self.cfg.buffer_size

            def fill(key):
                data = _random_like(self.spec, self.example, (cap,), key)
                return replay.ReplayState(
                    data, jnp.zeros((), jnp.int32), jnp.asarray(cap, jnp.int32)
                )

            key = jax.device_put(jax.random.key(1), self.placement.critic)
            self._buffer = jax.jit(fill)(key)
        return self._buffer

    def _agent(self, device: Any) -> Any:
        """An agent state of the right shapes, built once (they depend on neither n nor B).

        Zeros from numpy: rates of dense maths do not depend on the values, and this
        skips compiling ``init`` (seconds on a busy CPU). Key-typed leaves fall back to it.
        """
        if self._agent_state is None:
            leaves = jax.tree.leaves(self._agent_shapes)
            if all(isinstance(x.dtype, np.dtype) for x in leaves):
                zeros = lambda x: np.zeros(x.shape, x.dtype)
                self._agent_state = jax.tree.map(zeros, self._agent_shapes)
            else:
                self._agent_state = jax.jit(self._algo0.init)(jax.random.key(self.cfg.seed))
        return jax.device_put(self._agent_state, device)

    def update(self, batch: int) -> Point | None:
        """update samples/s of the critic-then-actor step at ``batch``."""
        cfg = self.cfg
        if self.on_policy:
            n = self._on_policy_envs(batch)
            run = cfg.replace(num_envs=n, batch_size=batch)
            key = jax.device_put(jax.random.key(1), self.placement.critic)
            lead = (cfg.rollout_steps, n)
            data = jax.jit(lambda k: _random_like(self.spec, self.example, lead, k))(key)
        else:
            m = self.algo_spec.grad_step_multiple(self.algo_config)
            g = m * max(1, math.ceil(UPDATE_SAMPLES_PER_CALL / batch / m))
            run = cfg.replace(batch_size=batch, grad_steps=g)
            data = self._filled_buffer()
        algo = self.algo_spec.make(self.algo_config, self.spec, run)
        agent = self._agent(self.placement.critic)
        steps = max(algo.critic_steps_per_iteration, algo.actor_steps_per_iteration)

        def fn(agent, data, key):
            # the metrics are dropped: XLA leaves out what nothing reads
            agent, _ = iteration.update_step(algo, agent, data, key)
            return agent, ()

        nbytes = self.update_bytes(batch)
        return self._time("update", fn, agent, data, steps * batch, batch, nbytes)

    def retime(self, kind: str, value: int) -> list[float]:
        """REPS more timed repetitions of an already compiled grid point."""
        return self._timers[kind, value](REPS)


def _device_of(tree: Any) -> Any:
    leaf = jax.tree.leaves(tree)[0]
    return next(iter(leaf.devices()))


def _random_like(spec: EnvSpec, example: Transition, lead: tuple[int, ...], key: Any) -> Any:
    """Random transitions shaped ``[*lead, ...]``: normal obs/rewards, valid actions."""
    k_obs, k_act, k_rew, k_next = jax.random.split(key, 4)
    obs_shape = (*lead, *spec.obs_shape)
    if spec.discrete:
        action = jax.random.randint(k_act, lead, 0, spec.action_dim)
    else:
        low = jnp.asarray(spec.action_low, jnp.float32)
        high = jnp.asarray(spec.action_high, jnp.float32)
        action = low + jax.random.uniform(k_act, (*lead, spec.action_dim)) * (high - low)
    return Transition(
        jax.random.normal(k_obs, obs_shape),
        action.astype(example.action.dtype),
        jax.random.normal(k_rew, lead),
        jnp.zeros(lead, bool),
        jnp.zeros(lead, bool),
        jax.random.normal(k_next, obs_shape),
    )
