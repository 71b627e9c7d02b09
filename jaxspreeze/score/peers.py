"""The peers' sides of time to score: rejax (gymnax rows) and SBX (gymnasium rows).

Each runner trains the peer on a row's env with the peer's own settings for the task
(``run.peer_settings == "own"``: :mod:`jaxspreeze.score.settings`, scaled to the row's
budget only) or matched to the row's preset as far as the peer allows (``"matched"``:
hidden sizes, num_envs, budget, batch, updates per env step, warm-up, buffer, learning
rate, discount), and returns the side's row (:func:`jaxspreeze.score.rows.row`) with the
settings used and their source; what differs is said in its ``notes``.

Every side of a row is evaluated alike (the row's protocol: its episodes, fresh starts
at every evaluation): rejax's policy by jaxspreeze's own evaluator on jaxspreeze's gymnax
env, inside rejax's program, from the same evaluation key as jaxspreeze's side; SBX's on
gymnasium envs reset with the seeds jaxspreeze's host evaluator uses.
Installed by ``pip install 'jaxspreeze[peers]'``; each is imported only in its own side's
process.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from jaxspreeze.run.caches import enable_compile_cache
from jaxspreeze.score import runners as score
from jaxspreeze.score import settings as score_settings
from jaxspreeze.score.rows import row
from jaxspreeze.score.sides import SideRun
from jaxspreeze.score.tasks import ScoreTask

Record = dict[str, Any]


class FiveValueEnv:
    """A gymnax >= 1.0 env seen through gymnax 0.x's five-value ``step`` (rejax 0.1.3
    unpacks five): ``done`` is terminated or truncated; everything else is the env's."""

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        if name == "_env" or name.startswith("__"):  # copy.deepcopy before __init__
            raise AttributeError(name)
        return getattr(self._env, name)

    def step(self, key: Any, state: Any, action: Any, params: Any = None) -> tuple:
        """``obs, state, reward, done, info`` (gymnax's auto-reset kept)."""
        import jax.numpy as jnp

        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


def rejax_own_config(cfg: Any, task: ScoreTask) -> tuple[dict[str, Any], Any]:
    """rejax's own settings for ``task`` at the row's budget (``cfg.total_steps``), its
    evaluation at the row's cadence (none before training, as on every side); and the
    settings."""
    own = score_settings.own("rejax", task, cfg.total_steps)
    options = dict(own.options, eval_freq=task.eval_every, skip_initial_evaluation=True)
    return options, dataclasses.replace(own, options=copy.deepcopy(options))


def _rejax_config(planned: Any, task: ScoreTask) -> dict[str, Any]:
    """rejax's options matched to the planned preset."""
    cfg, a = planned.cfg, planned.algo_config
    out: dict[str, Any] = dict(
        total_timesteps=cfg.total_steps,
        eval_freq=task.eval_every,
        num_envs=cfg.num_envs,
        gamma=a.gamma,
        skip_initial_evaluation=True,
    )
    # the networks: jaxspreeze's MLPs are ReLU (rejax's PPO and TD3 default to swish);
    # rejax's TD3 fixes its hidden sizes at (64, 64)
    out.update(_REJAX_NETWORKS[task.algo](a))
    out.update(_REJAX_UPDATES[task.algo](cfg, a))
    return out


def _rejax_rollout(cfg: Any, a: Any) -> dict[str, Any]:
    """An on-policy iteration (PPO, PQN): the rollout, its minibatches and epochs."""
    return dict(
        num_steps=cfg.rollout_steps,
        num_minibatches=max(1, cfg.num_envs * cfg.rollout_steps // cfg.batch_size),
        num_epochs=a.epochs,
        learning_rate=a.lr,
        max_grad_norm=a.max_grad_norm,
    )


def _rejax_ppo(cfg: Any, a: Any) -> dict[str, Any]:
    return dict(
        _rejax_rollout(cfg, a),
        gae_lambda=a.gae_lambda,
        clip_eps=a.clip_eps,
        vf_coef=a.vf_coef,
        ent_coef=a.ent_coef,
        normalize_observations=a.normalize_obs,
    )


def _rejax_replay(cfg: Any, a: Any) -> dict[str, Any]:
    """An off-policy iteration: one step of every env, then num_epochs gradient steps."""
    return dict(
        batch_size=cfg.batch_size,
        buffer_size=cfg.buffer_size,
        fill_buffer=cfg.learning_starts,
        num_epochs=max(1, cfg.grad_steps // cfg.rollout_steps),
        learning_rate=a.critic_lr,
        polyak=1.0 - a.tau,
    )


def _rejax_td3(cfg: Any, a: Any) -> dict[str, Any]:
    return dict(
        _rejax_replay(cfg, a),
        exploration_noise=a.exploration_noise,
        target_noise=a.target_noise,
        target_noise_clip=a.target_noise_clip,
        policy_delay=a.policy_delay,
    )


def _rejax_pqn(cfg: Any, a: Any) -> dict[str, Any]:
    """PQN's rollout, minibatches, epochs, Q(lambda) and epsilon schedule."""
    return dict(_rejax_rollout(cfg, a), td_lambda=a.q_lambda, **_rejax_epsilon(a))


def _rejax_epsilon(a: Any) -> dict[str, Any]:
    """The epsilon schedule (rejax decays it over a fraction of the run's env steps)."""
    return dict(eps_start=a.eps_start, eps_end=a.eps_end, exploration_fraction=a.eps_decay)


def _rejax_dqn(cfg: Any, a: Any) -> dict[str, Any]:
    """DQN's replay, updates per iteration and target network. rejax moves its target
    once per iteration (every target_update_freq env steps), jaxspreeze every
    target_update_every gradient steps: rejax's polyak is the target's share after one
    iteration's worth of jaxspreeze's updates."""
    updates = max(1, cfg.grad_steps // cfg.rollout_steps)  # per step of every env
    return dict(
        batch_size=cfg.batch_size,
        buffer_size=cfg.buffer_size,
        fill_buffer=cfg.learning_starts,
        num_epochs=updates,
        learning_rate=a.lr,
        max_grad_norm=a.max_grad_norm,
        polyak=(1.0 - a.tau) ** (updates / a.target_update_every),
        target_update_freq=1,
        ddqn=a.double,
        **_rejax_epsilon(a),
    )


def _relu() -> dict[str, Any]:
    """A network's keyword table naming ReLU: a new dict each time, as rejax's
    ``create_agent`` pops "activation" from it and writes the function back (one table
    shared by TD3's actor and critic made the critic's lookup fail)."""
    return {"activation": "relu"}


_REJAX_NETWORKS: dict[str, Callable[[Any], dict[str, Any]]] = {  # by jaxspreeze's algo
    "sac": lambda a: dict(hidden_layer_sizes=tuple(a.hidden), agent_kwargs=_relu()),
    "td3": lambda a: dict(actor_kwargs=_relu(), critic_kwargs=_relu()),
    "ppo": lambda a: dict(agent_kwargs=dict(_relu(), hidden_layer_sizes=tuple(a.hidden))),
    "pqn": lambda a: {},  # rejax's PQN fixes its network (64x64, LayerNorm then ReLU)
    "dqn": lambda a: dict(agent="QNetwork", agent_kwargs=_relu()),  # hidden fixed (64, 64)
}
_REJAX_UPDATES: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "sac": _rejax_replay,
    "td3": _rejax_td3,
    "ppo": _rejax_ppo,
    "pqn": _rejax_pqn,
    "dqn": _rejax_dqn,
}


class PeerPolicy:
    """A peer's deterministic policy seen as jaxspreeze's evaluator sees an algorithm
    (``act`` and ``initial_carry``: :func:`jaxspreeze.agent.evaluate.make_evaluate`):
    ``act(actor, carry, obs [N, ...], key, deterministic)`` with ``actor`` the peer's
    train state, ``batched(actor, obs)`` the peer's batched deterministic action."""

    def __init__(self, batched: Callable[[Any, Any], Any]):
        self._batched = batched

    def initial_carry(self, n: int) -> tuple:
        del n
        return ()

    def act(self, actor: Any, carry: Any, obs: Any, key: Any, deterministic: bool) -> tuple:
        del key, deterministic
        return self._batched(actor, obs), carry


def rejax_batched_act(algo: Any) -> Callable[[Any, Any], Any]:
    """rejax's deterministic policy on a batch ``[N, ...]`` of observations (its train
    state first): SAC's squashed mean, PPO's mode (a Gaussian's mean clipped to the action
    range, a categorical's argmax), TD3's actor, PQN's and DQN's greedy action (the argmax
    of the Q-values); observations normalised as rejax does."""
    import jax.numpy as jnp

    def mode(m: Any, obs: Any) -> Any:
        if not hasattr(m, "_action_dist"):  # TD3's deterministic actor
            return m(obs)
        a = m._action_dist(obs).mode()
        if hasattr(m, "bij"):  # rejax's squashed Gaussian: tanh, then the action range
            return m.action_loc + m.bij.forward(a) * m.action_scale
        return jnp.clip(a, *m.action_range) if hasattr(m, "action_range") else a

    def act(ts: Any, obs: Any) -> Any:
        if getattr(algo, "normalize_observations", False):
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        if hasattr(ts, "q_ts"):  # PQN's and DQN's Q-network: the greedy action
            q = algo.agent.apply(ts.q_ts.params, obs.astype(jnp.float32))
            return jnp.argmax(q, axis=-1).astype(jnp.int32)
        return algo.actor.apply(ts.actor_ts.params, obs, method=mode)

    return act


REJAX_NOTES = {
    "sac": "rejax: one learning rate (the critic's) for actor, critic and temperature",
    "td3": "rejax: one learning rate (the critic's) for actor and critic; hidden sizes "
    "fixed at (64, 64) by rejax's TD3",
    "ppo": "rejax: learning rate not annealed; minibatches of its own shuffling",
    "pqn": "rejax: its fixed network (64x64, LayerNorm then ReLU; the preset's widths not "
    "taken), Adam (jaxspreeze: RAdam), learning rate not annealed, rewards not scaled "
    "(jaxspreeze: x reward_scaling in the targets)",
    "dqn": "rejax: hidden sizes fixed at (64, 64); one-step double-DQN targets (jaxspreeze: "
    "n_step); the target moved once per iteration with polyak = (1 - tau) ** (gradient "
    "steps per iteration); epsilon decayed over env steps (jaxspreeze: over gradient steps)",
}
_REJAX_ALGOS = ("SAC", "TD3", "PPO", "PQN", "DQN")  # rejax's classes, by lower-case name


def run_rejax(task: ScoreTask, run: SideRun) -> Record:
    """rejax's trainer on a gymnax row: the whole training is one jitted program (its
    evaluations inside, every ``eval_every`` env steps, their results returned with the
    trained state). No host callback: JAX does not keep a program that holds one, and a
    warm run of rejax must find its program in the compile cache as jaxspreeze's does.
    Each evaluation's wall time is the run's measured wall at its share of the env steps
    (:func:`interpolated_curve`)."""
    import gymnax
    import jax
    import rejax

    from jaxspreeze.agent.evaluate import eval_seed, make_evaluate, start_key
    from jaxspreeze.envs import make_env

    cfg, planned = score.peer_config(task, run.peer_settings, **score.side_fields(task, run))
    enable_compile_cache(cfg.compile_cache)
    env, env_params = gymnax.make(task.env.partition("/")[2])
    if planned is None:
        options, used = rejax_own_config(cfg, task)
    else:
        options = _rejax_config(planned, task)
        used = score_settings.matched(task, options)
    record = used.record()  # before rejax pops the networks' tables
    algo_cls = getattr(rejax, {n.lower(): n for n in _REJAX_ALGOS}[task.algo])
    algo = algo_cls.create(env=FiveValueEnv(env), env_params=env_params, **options)
    # the row's protocol: jaxspreeze's evaluator on jaxspreeze's env, the row's episodes,
    # starts from the key jaxspreeze's side of this seed draws them from
    eval_env = make_env(task.env, score_settings.episodes(task))
    eval_key = jax.random.split(jax.random.key(eval_seed(run.seed)), 1)[0]

    def eval_callback(algo: Any, ts: Any, rng: Any) -> Any:
        del rng
        evaluate = make_evaluate(PeerPolicy(rejax_batched_act(algo)), eval_env)
        result = evaluate(ts, start_key(eval_key, ts.global_step))
        return ts.global_step, result.return_mean, result.return_se

    algo = algo.replace(eval_callback=eval_callback)
    t0 = time.perf_counter()
    compiled = jax.jit(algo.train).lower(jax.random.key(run.seed)).compile()
    compile_s = time.perf_counter() - t0
    t_start = time.time()
    _, (steps, returns, ses) = jax.block_until_ready(compiled(jax.random.key(run.seed)))
    wall_s = time.time() - t_start
    curve = interpolated_curve(
        jax.device_get(steps), jax.device_get(returns), jax.device_get(ses),
        wall_s, t_start - run.started,
    )  # fmt: skip
    for point in curve:
        run.say(
            f"  rejax      {task.name:24s} {point['env_steps']:>9,} steps "
            f"{point['wall_s']:7.1f}s  return {point['return']:9.1f}"
        )
    notes = [
        "gymnax >= 1.0's six-value step given to rejax as five (done = terminated or "
        "truncated: no bootstrap at time limits)",
        "rejax's own initialisations; evaluated by jaxspreeze's evaluator with its policy's "
        "mode (rejax's own evaluation samples)",
        "each evaluation's wall time: the run's measured wall at the evaluation's share "
        "of the env steps (rejax's one program runs its iterations alike; no host "
        "callback, so that JAX's cache keeps the program for the warm run)",
    ]
    if len(env.observation_space(env_params).shape) > 1:
        notes.append(
            "rejax's networks are MLPs: it flattens the grid into its MLP (no convolution; "
            "jaxspreeze's side runs the preset's torso)"
        )
    if run.peer_settings == "matched":
        notes.append(REJAX_NOTES[task.algo])
    return row(
        "rejax",
        task,
        curve,
        compile_s=compile_s,
        wall_s=wall_s,
        trainer=f"rejax.{algo_cls.__name__}",
        config=record["options"],
        notes="; ".join(filter(None, [*notes, used.note])),
        settings=record,
        evaluation=score_settings.protocol(task, REJAX_EVALUATOR),
    )


def interpolated_curve(
    steps: Any, returns: Any, ses: Any, wall_s: float, command_at_start_s: float
) -> list[dict[str, Any]]:
    """The learning curve of a one-program run from its evaluations' env steps, returns
    and standard errors: the point at ``steps[i]`` is stamped ``wall_s * steps[i] /
    steps[-1]`` after the run's start (``command_s``: from the command's start, the run
    having started ``command_at_start_s`` after it)."""
    last = max(int(steps[-1]), 1)
    curve = []
    for step, ret, se in zip(steps, returns, ses, strict=True):
        wall = wall_s * int(step) / last
        curve.append(
            {
                "env_steps": int(step),
                "return": float(ret),
                "return_se": float(se),
                "wall_s": wall,
                "command_s": command_at_start_s + wall,
            }
        )
    return curve


REJAX_EVALUATOR = (
    "jaxspreeze's evaluator (agent/evaluate.py) inside rejax's program: rejax's "
    "deterministic policy, one episode in each of the row's envs, starts drawn from the "
    "seed's evaluation key folded with rejax's env step (jaxspreeze's side's key)"
)


# ----------------------------------------------------------------------------- SBX
def run_sbx(task: ScoreTask, run: SideRun) -> Record:
    """SBX (Stable Baselines Jax) on a gymnasium row: its envs in SB3's DummyVecEnv,
    with rl-zoo3's settings for the task (``run.peer_settings == "own"``) or the preset's;
    evaluated every ``eval_every`` env steps by a callback, as jaxspreeze's host evaluator
    does (:func:`sbx_evaluate`)."""
    import sbx
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    cfg, planned = score.peer_config(task, run.peer_settings, **score.side_fields(task, run))
    enable_compile_cache(cfg.compile_cache)
    env_id = task.env.partition("/")[2]
    if planned is None:
        n_envs, kwargs, used = sbx_own_options(task, cfg.total_steps)
    else:
        n_envs, kwargs = cfg.num_envs, _SBX_MODELS[task.algo](cfg, planned.algo_config)
        used = score_settings.matched(task, dict(kwargs, n_envs=n_envs))
    record = used.record()  # before SBX writes into policy_kwargs
    venv = make_vec_env(env_id, n_envs=n_envs, seed=run.seed)
    noise = kwargs.pop("action_noise", None)
    if noise is not None:  # rl-zoo3's noise_type normal, noise_std
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        dim = venv.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(dim), noise[1] * np.ones(dim))
    model = getattr(sbx, task.algo.upper())("MlpPolicy", venv, seed=run.seed, **kwargs)
    episodes = score_settings.episodes(task)

    curve: list[dict[str, Any]] = []
    t_start = time.time()

    class Evaluate(BaseCallback):
        """Every ``eval_every`` env steps: the deterministic policy's mean return."""

        def __init__(self) -> None:
            super().__init__()
            self.next_eval = task.eval_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += task.eval_every
                steps = int(self.num_timesteps)
                mean, se = sbx_evaluate(self.model, env_id, episodes, run.seed, steps)
                now = time.time()
                point = {
                    "env_steps": steps,
                    "return": mean,
                    "return_se": se,
                    "wall_s": now - t_start,
                    "command_s": now - run.started,
                }
                curve.append(point)
                run.say(
                    f"  sbx        {task.name:24s} {point['env_steps']:>9,} steps "
                    f"{point['wall_s']:7.1f}s  return {point['return']:9.1f}"
                )
            return True

    model.learn(total_timesteps=cfg.total_steps, callback=Evaluate())
    wall_s = time.time() - t_start
    notes = [
        "SBX: compiles inside learn() (its 'after compile' wall includes compilation); "
        "evaluation on one gymnasium env, sequential episodes"
    ]
    if run.peer_settings == "matched":
        notes.append(
            "gradient_steps per train_freq step of all envs as jaxspreeze's grad_steps per "
            "iteration; one learning rate for all networks"
        )
    return row(
        "sbx",
        task,
        curve,
        compile_s=None,
        wall_s=wall_s,
        trainer=f"sbx.{type(model).__name__}",
        config=record["options"],
        notes="; ".join(filter(None, [*notes, used.note])),
        settings=record,
        evaluation=score_settings.protocol(task, SBX_EVALUATOR),
    )


SBX_EVALUATOR = (
    "jaxspreeze's host protocol (agent/evaluate.py's seeds): SBX's deterministic policy, "
    "one episode in each of the row's gymnasium envs, env j reset with seed "
    "host_start_seed(seed + 10000, 0, env step) + j"
)


def sbx_own_options(task: ScoreTask, total_steps: int) -> tuple[int, dict[str, Any], Any]:
    """SBX's own settings for ``task`` (rl-zoo3's, :mod:`jaxspreeze.score.settings`) at
    ``total_steps``: the number of envs, the model's keyword arguments (``action_noise``
    as ``(kind, std)``, made into SB3's noise by the runner) and the settings."""
    own = score_settings.own("sbx", task, total_steps)
    kwargs = dict(own.options)
    kwargs.pop("n_timesteps")  # the budget: learn(total_timesteps=...)
    kwargs.pop("policy", None)  # "MlpPolicy"
    n_envs = int(kwargs.pop("n_envs", 1))
    kind, std = kwargs.pop("noise_type", None), kwargs.pop("noise_std", None)
    if kind is not None:
        if kind != "normal":
            raise ValueError(f"rl-zoo3's noise_type {kind!r} is not read here")
        kwargs["action_noise"] = (kind, float(std))
    return n_envs, kwargs, own


def sbx_evaluate(model: Any, env_id: str, episodes: int, seed: int, env_steps: int) -> tuple:
    """``(mean, s.e.)`` of ``model``'s deterministic return over ``episodes`` gymnasium
    episodes, episode j reset with the seed jaxspreeze's host evaluator gives env j of
    seed ``seed``'s evaluation at ``env_steps``: fresh starts at every evaluation."""
    import gymnasium as gym
    import numpy as np

    from jaxspreeze.agent.evaluate import eval_seed, host_start_seed

    start = host_start_seed(eval_seed(seed), 0, env_steps)
    returns = []
    env = gym.make(env_id)
    try:
        for j in range(episodes):
            obs, _ = env.reset(seed=start + j)
            ret, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(action)
                ret += float(reward)
                done = bool(terminated or truncated)
            returns.append(ret)
    finally:
        env.close()
    r = np.asarray(returns)
    se = float(r.std(ddof=1) / np.sqrt(len(r))) if len(r) > 1 else float("nan")
    return float(r.mean()), se


def _sbx_ppo(cfg: Any, a: Any) -> dict[str, Any]:
    return dict(
        n_steps=cfg.rollout_steps,
        batch_size=cfg.batch_size,
        n_epochs=a.epochs,
        learning_rate=a.lr,
        gamma=a.gamma,
        gae_lambda=a.gae_lambda,
        clip_range=a.clip_eps,
        ent_coef=a.ent_coef,
        vf_coef=a.vf_coef,
        max_grad_norm=a.max_grad_norm,
        policy_kwargs=dict(net_arch=list(a.hidden)),
    )


def _sbx_replay(cfg: Any, a: Any) -> dict[str, Any]:
    return dict(
        buffer_size=cfg.buffer_size,
        learning_starts=cfg.learning_starts,
        batch_size=cfg.batch_size,
        tau=a.tau,
        gamma=a.gamma,
        learning_rate=a.critic_lr,
        train_freq=cfg.rollout_steps,
        gradient_steps=max(1, cfg.grad_steps),
        policy_kwargs=dict(net_arch=list(a.hidden)),
    )


def _sbx_td3(cfg: Any, a: Any) -> dict[str, Any]:
    return dict(
        _sbx_replay(cfg, a),
        policy_delay=a.policy_delay,
        target_policy_noise=a.target_noise,
        target_noise_clip=a.target_noise_clip,
    )


# SBX's model arguments matched to the planned preset, by algorithm
_SBX_MODELS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "sac": _sbx_replay,
    "td3": _sbx_td3,
    "ppo": _sbx_ppo,
}
