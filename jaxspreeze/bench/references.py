"""Bare references timed side by side with jaxspreeze on the same work, same process.

- :func:`sampling` : a hand-fused ``jit(lax.scan(vmap(env.step) + policy MLP))`` over the
  library's own env (gymnax, or brax with brax's training wrappers), emitting the same
  transitions jaxspreeze's collect emits;
- :func:`sac_update` : a minimal flax/optax SAC update (twin Q, tanh-Gaussian actor,
  entropy temperature, Polyak target) on uniform batches from an on-device buffer;
- :func:`brax_trainer` : brax's own ``brax.training.agents.sac`` / ``ppo`` trainers, on a
  brax task or on a Playground task through Playground's brax training wrapper.

They return the library's :class:`~jaxspreeze.bench.record.Workload` / record so that
both sides are timed and reported the same way, but they use none of jaxspreeze's
env adapter, rollout, replay buffer, networks or algorithms: only the env's shapes
(``env_spec``) and the record. ``jaxspreeze bench`` and the pytest-benchmark suite both
import them from here.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxspreeze.bench import brax_compat
from jaxspreeze.bench.record import Record, Workload, chained, compile_timed, flops_of
from jaxspreeze.envs import env_spec

HIDDEN = (256, 256)
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # an XLA compile


class MLP(nn.Module):
    """Dense + ReLU layers, then a linear output."""

    hidden: tuple[int, ...]
    out: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """``[B, in] -> [B, out]``."""
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.out)(x)


def _squash(mean, log_std, key, scale, bias):
    log_std = -5.0 + 3.5 * (jnp.tanh(log_std) + 1.0)
    eps = jax.random.normal(key, mean.shape)
    u = mean + jnp.exp(log_std) * eps
    t = jnp.tanh(u)
    logp = -0.5 * (eps**2 + 2 * log_std + jnp.log(2 * jnp.pi)) - jnp.log(scale * (1 - t**2) + 1e-6)
    return t * scale + bias, logp.sum(-1)


# ----------------------------------------------------------------------------- sampling
def sampling(env_name: str, num_envs: int, steps: int, hidden=HIDDEN, seed: int = 0) -> Workload:
    """Hand-fused rollout: scan over T steps of (policy MLP, vmapped env.step)."""
    spec = env_spec(env_name)  # shapes and bounds only
    lib, _, name = env_name.partition("/")
    out = spec.action_dim if spec.discrete else 2 * spec.action_dim
    net = MLP(tuple(hidden), out)
    scale = (
        (jnp.asarray(spec.action_high) - jnp.asarray(spec.action_low)) / 2
        if not spec.discrete
        else 1.0
    )
    bias = (
        (jnp.asarray(spec.action_high) + jnp.asarray(spec.action_low)) / 2
        if not spec.discrete
        else 0.0
    )

    def act(params, obs, key):
        y = net.apply(params, obs)
        if spec.discrete:
            return jax.random.categorical(key, y)
        mean, log_std = jnp.split(y, 2, axis=-1)
        return _squash(mean, log_std, key, scale, bias)[0]

    if lib == "gymnax":
        import gymnax  # heavy (its import pulls in seaborn): only for gymnax references

        env, env_params = gymnax.make(name)
        v_reset = jax.vmap(env.reset, in_axes=(0, None))
        v_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
        reset = lambda key: v_reset(jax.random.split(key, num_envs), env_params)

        def env_step(key, state, action):
            obs, state, reward, terminated, truncated, _ = v_step(
                jax.random.split(key, num_envs), state, action, env_params
            )
            return obs, state, reward, terminated | truncated
    else:
        from brax import envs as brax_envs  # heavy (mujoco): imported for brax envs only

        env = brax_envs.training.wrap(brax_envs.get_environment(name), episode_length=1000)

        def reset(key):
            # brax's wrappers read the batch shape off raw uint32 keys ``[N, 2]``
            state = env.reset(jax.random.key_data(jax.random.split(key, num_envs)))
            return state.obs, state

        def env_step(key, state, action):
            state = env.step(state, action)
            return state.obs, state, state.reward, state.done

    def collect(params, carry, key):
        def body(carry, key):
            obs, state = carry
            k_act, k_env = jax.random.split(key)
            action = act(params, obs, k_act)
            next_obs, state, reward, done = env_step(k_env, state, action)
            return (next_obs, state), (obs, action, reward, done, next_obs)

        key, k = jax.random.split(key)
        carry, traj = jax.lax.scan(body, carry, jax.random.split(k, steps))
        return carry, key, traj

    k_params, k_env, key = jax.random.split(jax.random.key(seed), 3)
    params = net.init(k_params, jnp.zeros((1, *spec.obs_shape)))
    carry = jax.jit(reset)(k_env)
    compiled, compile_s = compile_timed(collect, params, carry, key, donate=(1,))
    return Workload(
        f"reference-sampling[{env_name}-n{num_envs}]",
        chained(functools.partial(compiled, params), carry, key),
        env_steps=num_envs * steps,
        compile_s=compile_s,
        params={"kind": "sampling", "env": env_name, "num_envs": num_envs, "rollout_steps": steps},
    )


# ----------------------------------------------------------------------------- SAC update
class DoubleQ(nn.Module):
    """Two Q(s, a) MLPs: ``[2, B]``."""

    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``(obs [B, O], action [B, A]) -> [2, B]``."""
        x = jnp.concatenate([obs, action], -1)
        return jnp.stack([MLP(self.hidden, 1)(x)[:, 0], MLP(self.hidden, 1)(x)[:, 0]])


class SACState(NamedTuple):
    """Minimal SAC state."""

    actor: Any
    critic: Any
    target: Any
    log_alpha: jax.Array
    actor_opt: Any
    critic_opt: Any
    alpha_opt: Any


def sac_update(
    batch_size: int,
    grad_steps: int,
    env_name: str = "gymnax/Pendulum-v1",
    hidden=HIDDEN,
    capacity: int = 100_000,
    seed: int = 0,
) -> Workload:
    """``grad_steps`` SAC updates (critic, actor, temperature, target) on uniform batches."""
    spec = env_spec(env_name)
    obs_dim, act_dim = spec.obs_shape[0], spec.action_dim
    actor, critic = MLP(tuple(hidden), 2 * act_dim), DoubleQ(tuple(hidden))
    tx = optax.adam(1e-3)
    k = jax.random.split(jax.random.key(seed), 8)
    buffer = {
        "obs": jax.random.normal(k[0], (capacity, obs_dim)),
        "action": jax.random.uniform(k[1], (capacity, act_dim), minval=-2, maxval=2),
        "reward": jax.random.normal(k[2], (capacity,)),
        "terminated": (jax.random.uniform(k[3], (capacity,)) < 0.01).astype(jnp.float32),
        "next_obs": jax.random.normal(k[4], (capacity, obs_dim)),
    }
    a_params = actor.init(k[5], jnp.zeros((1, obs_dim)))
    c_params = critic.init(k[6], jnp.zeros((1, obs_dim)), jnp.zeros((1, act_dim)))
    log_alpha = jnp.zeros(())
    state = SACState(
        a_params,
        c_params,
        jax.tree.map(jnp.copy, c_params),  # a buffer of its own: the state is donated
        log_alpha,
        tx.init(a_params),
        tx.init(c_params),
        tx.init(log_alpha),
    )
    one_step = _sac_step(actor, critic, tx, buffer, batch_size, -float(act_dim))

    def update(s: SACState, key: jax.Array, n: int):
        key, k = jax.random.split(key)
        s, losses = jax.lax.scan(one_step, s, jax.random.split(k, n))
        return s, key, losses

    key = jax.random.key(seed + 1)
    compiled, compile_s = compile_timed(
        functools.partial(update, n=grad_steps), state, key, donate=(0,)
    )
    one = flops_of(jax.jit(functools.partial(update, n=1)).lower(state, key))
    return Workload(
        f"reference-update[sac-b{batch_size}]",
        chained(compiled, state, key),
        update_samples=grad_steps * batch_size,
        grad_steps={"critic": grad_steps, "actor": grad_steps},
        compile_s=compile_s,
        flops=one * grad_steps if one else None,
        params={"kind": "update", "algo": "sac", "env": env_name, "batch_size": batch_size},
    )


def _sac_step(
    actor: MLP,
    critic: DoubleQ,
    tx: optax.GradientTransformation,
    buffer: dict[str, jax.Array],
    batch_size: int,
    target_entropy: float,
) -> Callable[[SACState, jax.Array], tuple[SACState, jax.Array]]:
    """One SAC gradient step on a uniform batch of ``buffer``: critic, actor, temperature,
    Polyak target (actions in [-2, 2], Pendulum's)."""
    gamma, tau = 0.99, 0.005
    scale, bias = 2.0, 0.0
    capacity = buffer["reward"].shape[0]

    def pi(params, obs, key):
        mean, log_std = jnp.split(actor.apply(params, obs), 2, -1)
        return _squash(mean, log_std, key, scale, bias)

    def one_step(s: SACState, key: jax.Array) -> tuple[SACState, jax.Array]:
        k_idx, k_next, k_pi = jax.random.split(key, 3)
        idx = jax.random.randint(k_idx, (batch_size,), 0, capacity)
        b = jax.tree.map(lambda x: x[idx], buffer)
        alpha = jnp.exp(s.log_alpha)
        # critic
        next_a, next_logp = pi(s.actor, b["next_obs"], k_next)
        next_q = critic.apply(s.target, b["next_obs"], next_a).min(0)
        y = b["reward"] + gamma * (1 - b["terminated"]) * (next_q - alpha * next_logp)
        y = jax.lax.stop_gradient(y)
        c_loss, c_grad = jax.value_and_grad(
            lambda p: 0.5 * ((critic.apply(p, b["obs"], b["action"]) - y) ** 2).mean(-1).sum()
        )(s.critic)
        c_upd, critic_opt = tx.update(c_grad, s.critic_opt)
        c_params = optax.apply_updates(s.critic, c_upd)

        # actor
        def actor_loss(p):
            a, logp = pi(p, b["obs"], k_pi)
            return (alpha * logp - critic.apply(s.critic, b["obs"], a).min(0)).mean(), logp

        (a_loss, logp), a_grad = jax.value_and_grad(actor_loss, has_aux=True)(s.actor)
        a_upd, actor_opt = tx.update(a_grad, s.actor_opt)
        a_params = optax.apply_updates(s.actor, a_upd)
        # temperature
        alpha_grad = -jax.lax.stop_gradient(logp + target_entropy).mean()
        al_upd, alpha_opt = tx.update(alpha_grad, s.alpha_opt)
        log_alpha = optax.apply_updates(s.log_alpha, al_upd)
        target = jax.tree.map(lambda t, o: t + tau * (o - t), s.target, c_params)
        s = SACState(a_params, c_params, target, log_alpha, actor_opt, critic_opt, alpha_opt)
        return s, c_loss + a_loss

    return one_step


UPDATES = {"sac": sac_update}  # the algorithms with a bare update reference


# ----------------------------------------------------------------------------- brax trainers
def _brax_sac(
    common: dict[str, Any],
    hidden: tuple[int, ...],
    batch_size: int,
    grad_updates_per_step: int,
    **_: Any,
) -> float:
    """``brax.training.agents.sac.train``; returns its update samples per env step."""
    # brax's trainers are heavy (mujoco): imported only when one runs
    from brax.training.agents.sac import networks as sac_networks
    from brax.training.agents.sac import train as sac

    sac.train(
        **common,
        batch_size=batch_size,
        grad_updates_per_step=grad_updates_per_step,
        min_replay_size=common["num_envs"],
        max_replay_size=100_000,
        network_factory=functools.partial(
            sac_networks.make_sac_networks, hidden_layer_sizes=hidden
        ),
    )
    return grad_updates_per_step * batch_size / common["num_envs"]


def _brax_ppo(
    common: dict[str, Any],
    hidden: tuple[int, ...],
    unroll_length: int,
    num_minibatches: int,
    epochs: int,
    **_: Any,
) -> float:
    """``brax.training.agents.ppo.train``; returns its update samples per env step."""
    # brax's trainers are heavy (mujoco): imported only when one runs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    ppo.train(
        **common,
        unroll_length=unroll_length,
        batch_size=common["num_envs"] // num_minibatches,
        num_minibatches=num_minibatches,
        num_updates_per_batch=epochs,
        run_evals=False,  # evaluation is outside brax's epoch timing anyway
        network_factory=functools.partial(
            ppo_networks.make_ppo_networks,
            policy_hidden_layer_sizes=hidden,
            value_hidden_layer_sizes=hidden,
            # jaxspreeze's MLPs use ReLU; brax's PPO networks default to SiLU (swish),
            # dearer on a CPU (an exp per unit): the same layers on both sides
            activation=jax.nn.relu,
        ),
    )
    return float(epochs)


BRAX_TRAINERS = {"sac": _brax_sac, "ppo": _brax_ppo}  # brax's own trainers, by brax's name


def brax_environment(env_name: str) -> dict[str, Any]:
    """The env arguments of brax's trainers for ``brax/<name>`` or ``playground/<Name>``.

    A brax task is brax's own env under brax's training wrappers (1000-step episodes); a
    Playground task is Playground's ``MjxEnv`` loaded with the config jaxspreeze loads it
    with (pure-JAX MJX, ``impl="jax"``), wrapped by Playground's own
    ``wrap_for_brax_training`` (the recipe of Playground's brax training notebooks) with
    the config's episode length and action repeat.
    """
    lib, _, name = env_name.partition("/")
    if lib == "brax":
        from brax import envs as brax_envs  # heavy (mujoco): imported for brax's trainers only

        return dict(environment=brax_envs.get_environment(name), episode_length=1000)
    if lib == "playground":
        from jaxspreeze.envs import playground  # Playground's own env and its overrides

        env = playground.load_env(name)
        from mujoco_playground import wrapper  # loaded (quietly) by load_env

        config = env._config
        return dict(
            environment=env,
            episode_length=int(config.episode_length),
            action_repeat=int(config.get("action_repeat", 1)),
            wrap_env_fn=wrapper.wrap_for_brax_training,
        )
    raise ValueError(f"brax's trainers run brax/ and playground/ tasks, not {env_name!r}")


def brax_trainer(
    algo: str,
    env_name: str,
    num_envs: int,
    num_timesteps: int,
    hidden=HIDDEN,
    batch_size: int = 256,
    grad_updates_per_step: int = 1,
    unroll_length: int = 16,
    num_minibatches: int = 4,
    epochs: int = 4,
    num_evals: int = 4,
    seed: int = 0,
    between_epochs: Callable[[int], None] | None = None,
) -> Record:
    """Train with brax's own SAC or PPO; env steps/s of its epochs after the first.

    Matched to jaxspreeze's chunk: SAC takes ``num_envs`` env steps and
    ``grad_updates_per_step`` updates of ``batch_size`` per step; PPO collects
    ``num_envs x unroll_length`` steps per update round and splits them into
    ``num_minibatches`` minibatches for ``epochs`` passes.

    brax times each training epoch itself (``training/sps``: the epoch's env steps over
    its wall time, with ``block_until_ready``; evaluation and the host loop outside); the
    rate is the median over the epochs during which nothing compiled (JAX's compile
    events; brax's first two epochs compile). PPO runs without
    evaluations (``run_evals=False``); brax's SAC always evaluates, outside the epoch's
    timing. ``between_epochs(env_steps)`` is called after every epoch with that epoch's
    env steps, outside brax's timing: the benchmark times jaxspreeze's side there, so the
    two sides alternate epoch by epoch in one process.
    """
    brax_compat.install()
    env_args = brax_environment(env_name)
    epochs_log = _EpochLog(between_epochs)
    common = dict(
        **env_args,
        num_timesteps=num_timesteps,
        num_envs=num_envs,
        num_evals=num_evals,
        num_eval_envs=1,
        seed=seed,
        progress_fn=epochs_log.progress,
    )
    if algo not in BRAX_TRAINERS:
        raise ValueError(
            f"brax has no trainer {algo!r} here; choose one of {sorted(BRAX_TRAINERS)}"
        )
    t0 = time.perf_counter()
    jax.monitoring.register_event_duration_secs_listener(epochs_log.on_event)
    try:
        samples_per_env_step = BRAX_TRAINERS[algo](
            common,
            hidden=tuple(hidden),
            batch_size=batch_size,
            grad_updates_per_step=grad_updates_per_step,
            unroll_length=unroll_length,
            num_minibatches=num_minibatches,
            epochs=epochs,
        )
    finally:
        jax.monitoring.unregister_event_duration_listener(epochs_log.on_event)
    wall = time.perf_counter() - t0
    sps, interval, rate = epochs_log.rates()
    return {
        "name": f"brax-{algo}[{env_name}-n{num_envs}]",
        "kind": "trainer",
        "algo": algo,
        "env": env_name,
        "num_envs": num_envs,
        "env_steps_per_s": float(rate) if rate else None,
        "update_samples_per_s": float(rate * samples_per_env_step) if rate else None,
        "replay_ratio": samples_per_env_step,
        "wall_s": wall,
        "brax_training_sps": sps,
        "brax_epoch_compiled": epochs_log.compiled,
        "interval_env_steps_per_s": interval,
        "progress": [(int(step), t - t0) for step, t, _ in epochs_log.log],
        "num_timesteps": num_timesteps,
        "trainer": f"brax.training.agents.{algo}.train",
    }


class _EpochLog:
    """brax's progress reports, and whether JAX compiled during each training epoch."""

    def __init__(self, between_epochs: Callable[[int], None] | None) -> None:
        self.between_epochs = between_epochs
        self.log: list[tuple[int, float, dict]] = []  # (env steps, time, brax's metrics)
        self.compiles = [0, 0]  # XLA compiles so far, and at the end of the last report
        self.compiled: list[bool] = []  # per epoch: did brax compile during it (or its eval)?

    def on_event(self, event: str, duration: float, **_: Any) -> None:
        """JAX's monitoring listener: counts the XLA compiles."""
        if event == BACKEND_COMPILE:
            self.compiles[0] += 1

    def progress(self, step: int, metrics: dict) -> None:
        """brax's ``progress_fn``: log the report, run ``between_epochs`` after an epoch."""
        log = self.log
        epoch_steps = step - log[-1][0] if log else step
        log.append((step, time.perf_counter(), dict(metrics)))
        if "training/sps" in metrics:
            self.compiled.append(self.compiles[0] > self.compiles[1])
            if self.between_epochs is not None:
                self.between_epochs(int(epoch_steps))
            log[-1] = (step, time.perf_counter(), log[-1][2])  # our round is not brax's time
        self.compiles[1] = self.compiles[0]

    def rates(self) -> tuple[list[float], float | None, float | None]:
        """brax's per-epoch rates, the rate between the last two reports, and the rate.

        The rate is the median of the epochs that compiled nothing (the first, and the
        second too: brax's epoch compiles again for its own outputs' sharding), else the
        rate a user sees between the last two progress reports (evaluation included).
        """
        log = self.log
        sps = [float(m["training/sps"]) for _, _, m in log if "training/sps" in m]
        steady = [r for r, c in zip(sps, self.compiled, strict=True) if not c]
        interval = None
        if len(log) >= 3:
            (s0, t_a, _), (s1, t_b, _) = log[-2], log[-1]
            interval = (s1 - s0) / (t_b - t_a) if t_b > t_a else None
        return sps, interval, statistics.median(steady) if steady else interval


# ----------------------------------------------------------------------------- suite stepping
# A JAX suite stepped as its own users step it: ``(carry, step)`` with ``step(carry, key)
# -> (carry, reward [N])``, uniform random legal actions drawn inside, N envs vmapped.
# bench.suite scans each side the same way (``jit(lax.scan(step))``, T steps a call) and
# times them interleaved with jaxspreeze's adapter (bench.cases.suite_stepper).
# Each family's practices, the suite's own first: the name of a variant -> what it is.
SUITE_PRACTICES: dict[str, dict[str, str]] = {
    "navix": {"own": "Navix's step (its own auto-reset, under lax.cond)"},
    "xminigrid": {"own": "XLand-MiniGrid's GymAutoResetWrapper (lax.cond)"},
    "jumanji": {"own": "Jumanji's VmapAutoResetWrapper (lax.cond; final obs in extras)"},
    "craftax": {
        "own": "Craftax_Baselines' OptimisticResetVecEnvWrapper (reset_ratio min(16, N))",
        "builtin": "Craftax's own auto_reset=True env",
    },
}
BOUND = "bound"  # every family: the bare transition, never reset (the upper bound)
BOUND_PRACTICE = "the bare transition, never reset (the upper bound)"
OPTIMISTIC_RESET_RATIO = 16  # Craftax_Baselines' default reset_ratio (ppo.py, ppo_rnn.py)


def suite_variants(env_name: str) -> dict[str, str]:
    """The references of a suite row for ``env_name``: its family's practices, then the
    bare transition (:data:`BOUND`), each with what it is."""
    family = env_name.partition("/")[0]
    if family not in SUITE_PRACTICES:
        raise ValueError(f"suite rows step {sorted(SUITE_PRACTICES)} ids, not {env_name!r}")
    return {**SUITE_PRACTICES[family], BOUND: BOUND_PRACTICE}


def _uniform(key: jax.Array, num_envs: int, actions: int) -> jax.Array:
    return jax.random.randint(key, (num_envs,), 0, actions)


def _legal(key: jax.Array, mask: jax.Array) -> jax.Array:
    """One uniform legal action per row of ``mask [N, A]``."""
    logits = jnp.where(mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def suite_stepper(
    env_name: str, num_envs: int, variant: str, seed: int = 0
) -> tuple[Any, Callable]:
    """``(carry, step)`` of ``num_envs`` envs of ``env_name`` (``<family>/<id>``: navix,
    xminigrid, jumanji or craftax) reset the way ``variant`` says (:func:`suite_variants`),
    with the suite's own API only."""
    family, _, task = env_name.partition("/")
    if variant not in suite_variants(env_name):
        raise ValueError(
            f"{env_name}: no reference {variant!r}; one of {list(suite_variants(env_name))}"
        )
    keys = jax.random.split(jax.random.key(seed), num_envs)
    n = num_envs
    if family == "navix":
        import navix  # optional suites: imported for their rows only

        env = navix.make(task)
        fn = env.step if variant == "own" else env._step  # _step: the transition alone
        actions = len(env.action_set)

        def step(ts, key):
            ts = jax.vmap(fn)(ts, _uniform(key, n, actions))
            return ts, ts.reward

        return jax.vmap(env.reset)(keys), step
    if family == "xminigrid":
        import xminigrid
        from xminigrid.wrappers import GymAutoResetWrapper

        env, params = xminigrid.make(task)
        stepper = GymAutoResetWrapper(env) if variant == "own" else env
        actions = int(env.num_actions(params))

        def step(ts, key):
            ts = jax.vmap(stepper.step, (None, 0, 0))(params, ts, _uniform(key, n, actions))
            return ts, ts.reward

        return jax.vmap(lambda k: env.reset(params, k))(keys), step
    if family == "jumanji":
        import jumanji
        from jumanji.wrappers import VmapAutoResetWrapper

        env = jumanji.make(task)
        if variant == "own":
            env = VmapAutoResetWrapper(env, next_obs_in_extras=True)
            vstep, vreset = env.step, env.reset
        else:
            vstep, vreset = jax.vmap(env.step), jax.vmap(env.reset)

        def step(carry, key):
            state, ts = vstep(carry[0], _legal(key, carry[1].observation.action_mask))
            return (state, ts), ts.reward

        return vreset(keys), step
    if family == "craftax":
        from craftax.craftax_env import make_craftax_env_from_name

        env = make_craftax_env_from_name(task, auto_reset=variant == "builtin")
        params = env.default_params
        actions = int(env.action_space(params).n)
        vstep = jax.vmap(env.step, (0, 0, 0, None))
        carry = jax.vmap(env.reset, (0, None))(keys, params)
        if variant == "own":
            reset_step = optimistic_resets(env, params, n, min(OPTIMISTIC_RESET_RATIO, n))

            def step(carry, key):
                k_act, k_step = jax.random.split(key)
                obs, state, reward = reset_step(k_step, carry[1], _uniform(k_act, n, actions))
                return (obs, state), reward

            return carry, step

        def step(carry, key):
            k_act, k_step = jax.random.split(key)
            ks = jax.random.split(k_step, n)
            obs, state, reward, _, _ = vstep(ks, carry[1], _uniform(k_act, n, actions), params)
            return (obs, state), reward

        return carry, step
    raise AssertionError(family)  # suite_variants refused it


def optimistic_resets(env: Any, params: Any, num_envs: int, reset_ratio: int) -> Callable:
    """``step(key, state, action) -> (obs, state, reward)`` of ``num_envs`` envs of a
    gymnax-style ``env`` (built without auto-reset) with optimistic resets, as
    Craftax_Baselines' ``OptimisticResetVecEnvWrapper`` does them (its ``wrappers.py``,
    https://github.com/MichaelTMatthews/Craftax_Baselines; written anew here): every step
    generates ``num_envs / reset_ratio`` initial states, hands one to each of that many
    envs picked at random among those whose episode ended (``jax.random.choice`` weighted
    by ``done``, without replacement), and every other env that ended takes the state of
    its block of ``reset_ratio`` envs (so envs may share a new world)."""
    if num_envs % reset_ratio:
        raise ValueError(f"reset_ratio {reset_ratio} must divide num_envs {num_envs}")
    resets = num_envs // reset_ratio
    v_step = jax.vmap(env.step, (0, 0, 0, None))
    v_reset = jax.vmap(env.reset, (0, None))

    def step(key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, Any, jax.Array]:
        k_step, k_reset, k_pick = jax.random.split(key, 3)
        obs, state, reward, done, _ = v_step(
            jax.random.split(k_step, num_envs), state, action, params
        )
        new_obs, new = v_reset(jax.random.split(k_reset, resets), params)
        index = jnp.arange(resets).repeat(reset_ratio)
        picked = jax.random.choice(
            k_pick, num_envs, (resets,), replace=False, p=done.astype(jnp.float32)
        )
        index = index.at[picked].set(jnp.arange(resets))
        pick = lambda fresh, now: _where_rows(done, fresh[index], now)
        return pick(new_obs, obs), jax.tree.map(pick, new, state), reward

    return step


def _where_rows(flag: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """``a`` where ``flag [N]`` along the first axis, else ``b``."""
    return jnp.where(flag.reshape(flag.shape + (1,) * (a.ndim - 1)), a, b)
