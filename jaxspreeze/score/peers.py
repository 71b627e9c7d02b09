"""The peers' sides of time to score: rejax (gymnax rows) and SBX (gymnasium rows).

Each runner trains the peer on a row's env, matched to the row's preset as far as the
peer allows (hidden sizes, num_envs, budget, batch, updates per env step, warm-up, buffer,
learning rate, discount, evaluation cadence and episodes), and returns the side's row
(:func:`jaxspreeze.score.rows.row`); what differs is said in its ``notes``.
Installed by ``pip install 'jaxspreeze[peers]'``; each is imported only in its own side's
process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jaxspreeze.run.caches import enable_compile_cache
from jaxspreeze.score import runners as score
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


def _rejax_ppo(cfg: Any, a: Any) -> dict[str, Any]:
    return dict(
        num_steps=cfg.rollout_steps,
        num_minibatches=max(1, cfg.num_envs * cfg.rollout_steps // cfg.batch_size),
        num_epochs=a.epochs,
        learning_rate=a.lr,
        gae_lambda=a.gae_lambda,
        clip_eps=a.clip_eps,
        vf_coef=a.vf_coef,
        ent_coef=a.ent_coef,
        max_grad_norm=a.max_grad_norm,
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


def _relu() -> dict[str, Any]:
    """A network's keyword table naming ReLU: a new dict each time, as rejax's
    ``create_agent`` pops "activation" from it and writes the function back (one table
    shared by TD3's actor and critic made the critic's lookup fail)."""
    return {"activation": "relu"}


_REJAX_NETWORKS: dict[str, Callable[[Any], dict[str, Any]]] = {  # by jaxspreeze's algo
    "sac": lambda a: dict(hidden_layer_sizes=tuple(a.hidden), agent_kwargs=_relu()),
    "td3": lambda a: dict(actor_kwargs=_relu(), critic_kwargs=_relu()),
    "ppo": lambda a: dict(agent_kwargs=dict(_relu(), hidden_layer_sizes=tuple(a.hidden))),
}
_REJAX_UPDATES: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "sac": _rejax_replay,
    "td3": _rejax_td3,
    "ppo": _rejax_ppo,
}


def _deterministic_act(algo: Any, ts: Any) -> Callable[[Any, Any], Any]:
    """rejax's policy, deterministic as jaxspreeze evaluates its own: SAC's squashed mean,
    PPO's mode (a Gaussian's mean clipped to the action range, a categorical's argmax);
    TD3's actor is deterministic already (rejax's own ``make_act``)."""
    import jax.numpy as jnp

    if not hasattr(algo.actor, "_action_dist"):
        return algo.make_act(ts)

    def mode(m: Any, obs: Any) -> Any:
        a = m._action_dist(obs).mode()
        if hasattr(m, "bij"):  # rejax's squashed Gaussian: tanh, then the action range
            return m.action_loc + m.bij.forward(a) * m.action_scale
        return jnp.clip(a, *m.action_range) if hasattr(m, "action_range") else a

    def act(obs: Any, rng: Any) -> Any:
        if getattr(algo, "normalize_observations", False):
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        return jnp.squeeze(algo.actor.apply(ts.actor_ts.params, obs[None], method=mode))

    return act


REJAX_NOTES = {
    "sac": "rejax: one learning rate (the critic's) for actor, critic and temperature",
    "td3": "rejax: one learning rate (the critic's) for actor and critic; hidden sizes "
    "fixed at (64, 64) by rejax's TD3",
    "ppo": "rejax: learning rate not annealed; minibatches of its own shuffling",
}


def run_rejax(task: ScoreTask, run: SideRun) -> Record:
    """rejax's trainer on a gymnax row: the whole training is one jitted program (its
    evaluations inside, every ``eval_every`` env steps); a host callback stamps each
    evaluation's wall time as it happens."""
    import gymnax
    import jax
    import rejax
    from jax.experimental import io_callback
    from rejax.evaluate import evaluate

    fields = score.side_fields(task, run)
    planned = score.preset_config(task, **fields)
    enable_compile_cache(planned.cfg.compile_cache)
    env, env_params = gymnax.make(task.env.partition("/")[2])
    options = _rejax_config(planned, task)
    algo_cls = {"sac": rejax.SAC, "td3": rejax.TD3, "ppo": rejax.PPO}[task.algo]
    algo = algo_cls.create(env=FiveValueEnv(env), env_params=env_params, **options)

    curve: list[dict[str, Any]] = []
    t_start = [0.0]

    def stamp(step: Any, ret: Any) -> None:
        now = time.time()
        point = {
            "env_steps": int(step),
            "return": float(ret),
            "wall_s": now - t_start[0],
            "command_s": now - run.started,
        }
        curve.append(point)
        run.say(
            f"  rejax      {task.name:24s} {point['env_steps']:>9,} steps "
            f"{point['wall_s']:7.1f}s  return {point['return']:9.1f}"
        )

    def eval_callback(algo: Any, ts: Any, rng: Any) -> Any:
        act = _deterministic_act(algo, ts)
        lengths, returns = evaluate(
            act,
            rng,
            algo.env,
            algo.env_params,
            task.eval_episodes,
            algo.env_params.max_steps_in_episode,
        )
        io_callback(stamp, None, ts.global_step, returns.mean(), ordered=True)
        return lengths, returns

    algo = algo.replace(eval_callback=eval_callback)
    t0 = time.perf_counter()
    compiled = jax.jit(algo.train).lower(jax.random.key(run.seed)).compile()
    compile_s = time.perf_counter() - t0
    t_start[0] = time.time()
    jax.block_until_ready(compiled(jax.random.key(run.seed)))
    wall_s = time.time() - t_start[0]
    notes = [
        "gymnax >= 1.0's six-value step given to rejax as five (done = terminated or "
        "truncated: no bootstrap at time limits)",
        "rejax's own initialisations; evaluated with its policy's mode (rejax's own "
        "evaluation samples)",
        "the host callback that stamps each evaluation keeps JAX from caching rejax's "
        "program (JAX does not cache programs with host callbacks): its warm runs compile "
        "again",
        REJAX_NOTES[task.algo],
    ]
    return row(
        "rejax",
        task,
        curve,
        compile_s=compile_s,
        wall_s=wall_s,
        trainer=f"rejax.{algo_cls.__name__}",
        config={k: v if isinstance(v, (int, float, bool)) else str(v) for k, v in options.items()},
        notes="; ".join(notes),
    )


# ----------------------------------------------------------------------------- SBX
def run_sbx(task: ScoreTask, run: SideRun) -> Record:
    """SBX (Stable Baselines Jax) on a gymnasium row: ``num_envs`` envs of gymnasium's
    vector env (SB3's DummyVecEnv), evaluated every ``eval_every`` env steps on
    ``eval_episodes`` deterministic episodes by a callback."""
    import gymnasium as gym
    import sbx
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    fields = score.side_fields(task, run)
    planned = score.preset_config(task, **fields)
    cfg, a = planned.cfg, planned.algo_config
    enable_compile_cache(cfg.compile_cache)
    env_id = task.env.partition("/")[2]
    venv = make_vec_env(env_id, n_envs=cfg.num_envs, seed=run.seed)
    eval_env = gym.make(env_id)
    options = dict(policy_kwargs=dict(net_arch=list(a.hidden)), seed=run.seed)
    model = _SBX_MODELS[task.algo](sbx, venv, cfg, a, options)

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
                mean, _ = evaluate_policy(
                    self.model, eval_env, n_eval_episodes=task.eval_episodes, deterministic=True
                )
                now = time.time()
                point = {
                    "env_steps": int(self.num_timesteps),
                    "return": float(mean),
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
    return row(
        "sbx",
        task,
        curve,
        compile_s=None,
        wall_s=wall_s,
        trainer=f"sbx.{type(model).__name__}",
        config={
            "num_envs": cfg.num_envs,
            "batch_size": cfg.batch_size,
            "hidden": list(a.hidden),
            "total_steps": cfg.total_steps,
            "buffer_size": cfg.buffer_size,
        },
        notes=(
            "SBX: compiles inside learn() (its 'after compile' wall includes compilation); "
            "gradient_steps per train_freq step of all envs as jaxspreeze's grad_steps per "
            "iteration; evaluation on one gymnasium env, sequential episodes; one learning "
            "rate for all networks"
        ),
    )


def _sbx_ppo(sbx: Any, venv: Any, cfg: Any, a: Any, common: dict[str, Any]) -> Any:
    return sbx.PPO(
        "MlpPolicy",
        venv,
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
        **common,
    )


def _sbx_replay(cfg: Any, a: Any, common: dict[str, Any]) -> dict[str, Any]:
    return dict(
        buffer_size=cfg.buffer_size,
        learning_starts=cfg.learning_starts,
        batch_size=cfg.batch_size,
        tau=a.tau,
        gamma=a.gamma,
        learning_rate=a.critic_lr,
        train_freq=cfg.rollout_steps,
        gradient_steps=max(1, cfg.grad_steps),
        **common,
    )


def _sbx_td3(sbx: Any, venv: Any, cfg: Any, a: Any, common: dict[str, Any]) -> Any:
    return sbx.TD3(
        "MlpPolicy",
        venv,
        policy_delay=a.policy_delay,
        target_policy_noise=a.target_noise,
        target_noise_clip=a.target_noise_clip,
        **_sbx_replay(cfg, a, common),
    )


def _sbx_sac(sbx: Any, venv: Any, cfg: Any, a: Any, common: dict[str, Any]) -> Any:
    return sbx.SAC("MlpPolicy", venv, **_sbx_replay(cfg, a, common))


_SBX_MODELS: dict[str, Callable[..., Any]] = {"sac": _sbx_sac, "td3": _sbx_td3, "ppo": _sbx_ppo}
