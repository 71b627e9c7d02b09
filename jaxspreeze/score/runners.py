"""Time to score: env steps and wall time to a return threshold, jaxspreeze beside brax.

The runners here train one side of one row (:mod:`jaxspreeze.score.tasks`);
``jaxspreeze score`` (:mod:`jaxspreeze.score.runs`) runs each in its own process
(:func:`run_side`, :func:`run_brax_side`; the peers' are in :mod:`.score_peers`), and
``experiments/time_to_score.py`` runs :data:`TASKS` (the brax and Playground rows) in one.

For each :data:`TASKS` entry (an env, an algorithm, a preset under
``experiments/presets`` and a return threshold), :func:`run_jaxspreeze` trains the
preset with the trainer's own programs (``schedules.make``: warm-up and fused chunks)
and evaluates after every ``eval_every`` env steps (``evaluate.make_seed_evaluate``:
the deterministic policy, ``eval_episodes`` fresh episodes). It records, at the first
evaluation whose mean return reaches the threshold, the env steps and two wall times
counted from the end of compilation: ``wall_to_threshold_s`` (warm-up, chunks and the
evaluations before it) and ``train_to_threshold_s`` (warm-up and chunks only), and at the
end the final return. The run goes on to its whole budget (the final return is part of
the row). Compile time (chunk, warm-up and evaluator programs) is reported apart; with a
compile cache, the programs are kept across processes as ``jaxspreeze train`` keeps them
(:func:`jaxspreeze.run.caches.program_cache`), so a warm side loads them.

:func:`run_brax` trains brax's own trainer (``brax.training.agents.sac`` / ``ppo``) on the
same env, matched to the preset: the same hidden sizes, num_envs, batch (SAC: batch size,
gradient steps per env step, warm-up and buffer; PPO: rollout length, minibatch size,
epochs), learning rate, discount, episode length 1000, evaluation every ``eval_every`` env
steps on ``eval_episodes`` envs with the deterministic policy. brax envs are used
natively; Playground tasks through ``mujoco_playground.wrapper.wrap_for_brax_training``
(``impl="jax"``, as ``envs/playground.py`` loads them). brax's ``progress_fn`` records
(env steps, eval return, wall); the seconds JAX spent tracing, lowering and compiling
(its ``jax.monitoring`` compile events) are subtracted from the wall, so both sides
count from compilation's end. brax's evaluations are inside its wall, as ours are in
``wall_to_threshold_s``.

What differs and cannot be matched is said in each row's ``notes`` (e.g. brax's PPO
normalises observations with its own running statistics; brax's SAC and PPO use their
own initialisations and action squashing).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxspreeze import algos, schedules
from jaxspreeze.agent.evaluate import make_seed_evaluate
from jaxspreeze.algos.base import RUN_SIZES
from jaxspreeze.bench import brax_compat
from jaxspreeze.bench.record import Record, evaluated_chunks
from jaxspreeze.core.compiles import CompileLog
from jaxspreeze.envs import make_env
from jaxspreeze.run.caches import enable_compile_cache, program_cache
from jaxspreeze.schedules.base import abstract_on, compile_beside
from jaxspreeze.score import settings as score_settings
from jaxspreeze.score.rows import first_reaching, row  # noqa: F401 (re-exported)
from jaxspreeze.score.sides import SideRun
from jaxspreeze.score.tasks import (  # noqa: F401 (re-exported)
    BRAX_ROWS,
    PRESETS,
    ROWS,
    THRESHOLDS,
    ScoreTask,
)
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan, plan

EPISODE_LENGTH = 1000  # jaxspreeze's time limit on brax and Playground envs

# experiments/time_to_score.py's rows: jaxspreeze beside brax (`jaxspreeze score` runs ROWS)
TASKS: dict[str, ScoreTask] = {n: ROWS[n] for n in BRAX_ROWS}
_row = row  # one side's row (score_rows.row)


def preset_config(task: ScoreTask, **fields: Any) -> RunPlan:
    """The plan (no devices) of the task's preset, one seed, evaluated every
    ``eval_every``, chunks aligned to it."""
    cfg = config.load(task.path).replace(
        env=task.env,
        num_seeds=1,
        eval_every=task.eval_every,
        eval_episodes=score_settings.episodes(task),
        **fields,
    )
    planned = plan(cfg, on_devices=False)
    k = max(1, task.eval_every // planned.steps_per_iteration)
    return plan(planned.cfg.replace(chunk_iterations=k), on_devices=False)


def peer_config(task: ScoreTask, peer_settings: str, **fields: Any) -> tuple[RunConfig, Any]:
    """A peer side's view of the row: the config and its plan (``matched``: the peer reads
    the planned preset's sizes), or the config resolved only (``own``: the peer reads the
    budget, seed and compile cache; a budget the preset's warm-up does not fit is then not
    refused for a peer that does not run the preset); the plan is None then."""
    if peer_settings == "own":
        cfg = config.load(task.path).replace(env=task.env, num_seeds=1, **fields)
        return config.resolve(cfg), None
    planned = preset_config(task, **fields)
    return planned.cfg, planned


# ----------------------------------------------------------------------------- jaxspreeze
def start_compiled(planned: RunPlan) -> tuple[Any, Any, Any, float]:
    """``planned`` on one device as the trainer starts it: the schedule with the programs
    kept across processes (a warm side loads them instead of tracing them again), the
    initial state with the chunk compiled beside the init, the seeds' evaluation compiled
    beside both, and the seconds all that took: (schedule, state, evaluate, compile_s)."""
    cfg = planned.cfg
    cache_dir = enable_compile_cache(cfg.compile_cache)
    placement = devices.single()
    schedule = schedules.make(planned.placed(placement))
    schedule.programs = program_cache(cache_dir, schedule)
    t0 = time.perf_counter()
    abstract = schedule.init_abstract()
    env = make_env(cfg.env, cfg.eval_episodes)
    keys = jax.random.split(jax.random.key(cfg.seed + 10_000), cfg.num_seeds)
    evaluate = make_seed_evaluate(schedule.algo, env, jax.device_put(keys, placement.eval))
    actor_like = abstract_on(abstract.agent.actor, placement.eval)
    evaluating = compile_beside(evaluate.compile, actor_like, schedule.programs)
    state = schedule.init_compiled()
    evaluating.result()
    return schedule, state, evaluate, time.perf_counter() - t0


def run_jaxspreeze(
    task: ScoreTask,
    say: Callable[[str], None] = lambda *a: None,
    started: float | None = None,
    **fields: Any,
) -> Record:
    """Train ``task``'s preset, evaluating every ``eval_every`` env steps; its row.

    ``started``: the ``time.time()`` of the command (the side's process) start; each point
    then has ``command_s``, the wall from it (imports and compilation in).
    """
    planned = preset_config(task, **fields)
    cfg = planned.cfg
    schedule, state, evaluate, compile_s = start_compiled(planned)

    t_start = time.perf_counter()
    state = jax.block_until_ready(schedule.warmup(state))
    train_s = time.perf_counter() - t_start
    eval_s = 0.0
    curve: list[dict[str, Any]] = []
    # fresh starts at every evaluation: the seed's key folded with its env step
    step_of = lambda s: int(np.asarray(s.env_steps).reshape(-1)[0])
    evaluated = lambda s: jax.device_get(evaluate(s.agent.actor, step_of(s)))
    for done in evaluated_chunks(schedule, state, evaluated):
        train_s += done.chunk_s
        eval_s += done.eval_s
        point = {
            "env_steps": int(np.asarray(done.state.env_steps).reshape(-1)[0]),
            "return": float(np.mean(done.result.return_mean)),
            "return_se": _se(done.result),
            "wall_s": time.perf_counter() - t_start,
            "train_s": train_s,
        }
        if started is not None:
            point["command_s"] = time.time() - started
        curve.append(point)
        say(
            f"  jaxspreeze {task.name:24s} {point['env_steps']:>9,} steps "
            f"{point['wall_s']:7.1f}s  return {point['return']:9.1f}"
        )
    wall = time.perf_counter() - t_start
    return row(
        "jaxspreeze",
        task,
        curve,
        compile_s=compile_s,
        wall_s=wall,
        train_s=train_s,
        eval_s=eval_s,
        env_steps_per_s=curve[-1]["env_steps"] / train_s if curve else None,
        config={k: getattr(cfg, k) for k in (*RUN_SIZES, "eval_every", "eval_episodes", "seed")},
        algo_config=_plain(planned.algo_config),
        settings=_preset_settings(task, cfg, planned),
        evaluation=score_settings.protocol(task, score_settings.JAXSPREEZE_EVALUATOR),
    )


def _se(result: Any) -> float | None:
    """One seed's standard error of the mean return (None where there is none)."""
    se = getattr(result, "return_se", None)
    if se is None:
        return None
    value = float(np.asarray(se).reshape(-1)[0])
    return None if math.isnan(value) else value


def _preset_settings(task: ScoreTask, cfg: RunConfig, planned: RunPlan) -> dict[str, Any]:
    """jaxspreeze's side's ``settings``: its preset's run sizes and algorithm config."""
    sizes = {k: getattr(cfg, k) for k in RUN_SIZES}
    return score_settings.preset(task, sizes | _plain(planned.algo_config)).record()


def _plain(algo_config: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(algo_config).items()}


# ----------------------------------------------------------------------------- brax
def brax_env(env_name: str) -> tuple[Any, Callable[..., Any] | None]:
    """brax's env for ``env_name`` and the ``wrap_env_fn`` its trainers need (or None)."""
    family, _, name = env_name.partition("/")
    if family == "brax":
        from brax import envs as brax_envs  # heavy (mujoco): imported for brax's trainers

        return brax_envs.get_environment(name), None
    if family == "playground":
        from jaxspreeze.envs import playground

        env = playground.load_env(name)
        import mujoco_playground  # optional extra, already loaded by load_env

        return env, mujoco_playground.wrapper.wrap_for_brax_training
    raise ValueError(f"brax's trainers do not run {env_name!r} here")


def brax_kwargs(planned: RunPlan, task: ScoreTask) -> dict[str, Any]:
    """brax trainer arguments matched to ``planned`` (jaxspreeze's preset, planned)."""
    cfg, a = planned.cfg, planned.algo_config
    if task.algo not in BRAX_KWARGS:
        raise ValueError(f"brax has no trainer {task.algo!r} here")
    return dict(
        num_timesteps=cfg.total_steps,
        episode_length=EPISODE_LENGTH,
        num_envs=cfg.num_envs,
        num_evals=max(2, cfg.total_steps // task.eval_every + 1),
        num_eval_envs=score_settings.episodes(task),
        deterministic_eval=True,
        seed=cfg.seed,
        learning_rate=getattr(a, BRAX_LEARNING_RATE[task.algo]),
        discounting=a.gamma,
        **BRAX_KWARGS[task.algo](cfg, a),
        hidden=tuple(a.hidden),
    )


def _brax_sac_kwargs(cfg: RunConfig, a: Any) -> dict[str, Any]:
    """brax's SAC arguments of its own: the batch, updates per env step, the buffer."""
    return dict(
        tau=a.tau,
        batch_size=cfg.batch_size,
        grad_updates_per_step=cfg.grad_steps // cfg.rollout_steps,
        min_replay_size=cfg.learning_starts,
        max_replay_size=cfg.buffer_size,
        normalize_observations=False,
        reward_scaling=1.0,
    )


# brax's PPO argument: the field of jaxspreeze's PPO config it takes as it is
BRAX_PPO_NAMES = {
    "gae_lambda": "gae_lambda",
    "clipping_epsilon": "clip_eps",
    "entropy_cost": "ent_coef",
    "vf_loss_coefficient": "vf_coef",
    "max_grad_norm": "max_grad_norm",
    "normalize_advantage": "normalize_advantages",
    "normalize_observations": "normalize_obs",
}


def _brax_ppo_kwargs(cfg: RunConfig, a: Any) -> dict[str, Any]:
    """brax's PPO arguments of its own: the losses' settings, the rollout, the minibatches."""
    minibatches = max(1, cfg.num_envs * cfg.rollout_steps // cfg.batch_size)
    return dict(
        **{brax: getattr(a, ours) for brax, ours in BRAX_PPO_NAMES.items()},
        unroll_length=cfg.rollout_steps,
        num_minibatches=minibatches,
        batch_size=cfg.num_envs // minibatches,
        num_updates_per_batch=a.epochs,
        reward_scaling=1.0,
        # brax's default: its GAE masks truncated steps itself. True would add
        # gamma * V(s) wherever an env sets info["time_out"], and brax's inverted_pendulum
        # sets it on every fall (its termination): no fall would cost anything
        bootstrap_on_timeout=False,
    )


BRAX_KWARGS = {"sac": _brax_sac_kwargs, "ppo": _brax_ppo_kwargs}  # by brax's trainer name
BRAX_LEARNING_RATE = {"sac": "critic_lr", "ppo": "lr"}  # brax has one rate for all networks


# brax 0.14.2's train() defaults of the sizes that set the env steps of one update
BRAX_SIZES = {
    "sac": {"num_envs": 1, "action_repeat": 1},
    "ppo": {"batch_size": 32, "num_minibatches": 16, "unroll_length": 10, "action_repeat": 1},
}


# the sizes whose product is the env steps of one of brax's training steps
BRAX_UPDATE_STEPS = {
    "sac": ("num_envs", "action_repeat"),
    "ppo": ("batch_size", "num_minibatches", "unroll_length", "action_repeat"),
}


def brax_steps_per_update(algo: str, kw: dict[str, Any]) -> int:
    """The env steps of one of brax's training steps under the arguments ``kw``."""
    size = {**BRAX_SIZES[algo], **{k: v for k, v in kw.items() if k in BRAX_SIZES[algo]}}
    return math.prod(size[k] for k in BRAX_UPDATE_STEPS[algo])


# the argument whose env steps brax's trainer runs before its epochs (SAC's replay prefill)
BRAX_PREFILL = {"sac": "min_replay_size"}


def _brax_prefill(algo: str, kw: dict[str, Any]) -> int:
    """The env steps of brax's prefill under ``kw``: whole actor steps of ``num_envs``."""
    if algo not in BRAX_PREFILL:
        return 0
    num_envs = int(kw.get("num_envs", BRAX_SIZES[algo].get("num_envs", 1)))
    per = brax_steps_per_update(algo, kw)
    return -(-int(kw.get(BRAX_PREFILL[algo], 0)) // num_envs) * per


def brax_eval_every(task: ScoreTask, kw: dict[str, Any]) -> int:
    """The env steps between brax's evaluations under its arguments ``kw``, as its
    ``train`` counts them: whole training steps, the budget (after SAC's prefill of
    ``min_replay_size``) split over ``num_evals - 1`` epochs and rounded up."""
    per = brax_steps_per_update(task.algo, kw)
    budget = int(kw["num_timesteps"]) - _brax_prefill(task.algo, kw)
    epochs = max(int(kw.get("num_evals", 1)) - 1, 1)
    return per * -(-max(budget, 0) // (epochs * per))


def brax_env_steps(task: ScoreTask, kw: dict[str, Any]) -> int:
    """The env steps brax's ``train`` runs under ``kw`` (its epochs, and SAC's prefill)."""
    epochs = max(int(kw.get("num_evals", 1)) - 1, 1)
    return epochs * brax_eval_every(task, kw) + _brax_prefill(task.algo, kw)


def brax_own_kwargs(
    cfg: RunConfig, task: ScoreTask
) -> tuple[dict[str, Any], dict[str, Any], score_settings.Settings]:
    """brax's own settings for ``task`` (:mod:`jaxspreeze.score.settings`) at the row's
    budget (``cfg.total_steps``; the seed ``cfg.seed``): the trainer's arguments, its
    network factory's and the settings. The row's protocol sets the evaluation: ``num_eval_envs`` episodes, deterministic,
    every ``eval_every`` env steps or every update where one update takes more (brax
    evaluates between updates; more evaluations than updates would run past the budget)."""
    own = score_settings.own("brax", task, cfg.total_steps)
    kw = dict(own.options)
    network = dict(kw.pop("network_factory", {}))
    per_update = brax_steps_per_update(task.algo, kw)
    every = max(task.eval_every, per_update)
    kw.update(
        num_evals=max(2, cfg.total_steps // every + 1),
        num_eval_envs=score_settings.episodes(task),
        deterministic_eval=True,
        seed=cfg.seed,
    )
    kw.setdefault("episode_length", EPISODE_LENGTH)
    ran = dict(kw, network_factory=network) if network else dict(kw)
    runs = brax_env_steps(task, kw)
    if runs > OVERRUN * cfg.total_steps:  # whole updates of these settings overrun it
        over = (
            f"its updates of {per_update:,} env steps make brax "
            f"run {runs:,}, {runs / cfg.total_steps:.1f}x the row's budget "
            f"({cfg.total_steps:,}), evaluating every {brax_eval_every(task, kw):,}"
        )
        own = dataclasses.replace(own, note=f"{own.note}; {over}" if own.note else over)
    return kw, network, dataclasses.replace(own, options=ran)


OVERRUN = 1.1  # a peer's run past this many times the row's budget is said in its notes


def run_brax(
    task: ScoreTask,
    say: Callable[[str], None] = lambda *a: None,
    started: float | None = None,
    peer_settings: str = "matched",
    **fields: Any,
) -> Record:
    """brax's own trainer on ``task``'s env, with its own settings for the task
    (``peer_settings="own"``) or matched to the row's preset (``"matched"``); its row
    (``started``: as :func:`run_jaxspreeze`'s)."""
    cfg, planned = peer_config(task, peer_settings, **fields)
    enable_compile_cache(cfg.compile_cache)
    brax_compat.install()
    env, wrap_fn = brax_env(task.env)
    if planned is None:
        kw, network, used = brax_own_kwargs(cfg, task)
    else:
        kw = brax_kwargs(planned, task)
        hidden = tuple(kw.pop("hidden"))
        network = _brax_hidden(task.algo, hidden)
        used = score_settings.matched(task, {**kw, **network})
    train_fn, factory = _brax_trainer(task.algo, network)
    params = inspect.signature(train_fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    dropped = [] if takes_any else sorted(set(kw) - set(params))  # another brax's arguments
    kw = {k: v for k, v in kw.items() if k not in dropped}
    # the wall time JAX spent tracing, lowering and compiling: the union of the events'
    # intervals (traces nest: a jitted function traced inside another's trace is its own
    # event, so summing the durations would count it twice)
    log = CompileLog()
    compile_s = [0.0]
    curve: list[dict[str, Any]] = []
    t0 = [0.0]

    def progress(step: int, metrics: dict) -> None:
        if "eval/episode_reward" not in metrics:
            return
        now = time.time()
        compile_s[0] = log.total_s(until=now)
        std = metrics.get("eval/episode_reward_std")
        point = {
            "env_steps": int(step),
            "return": float(metrics["eval/episode_reward"]),
            "return_se": None if std is None else float(std) / math.sqrt(kw["num_eval_envs"]),
            "wall_s": now - t0[0] - compile_s[0],
            "compile_s": compile_s[0],
        }
        if started is not None:
            point["command_s"] = now - started
        curve.append(point)
        say(
            f"  brax       {task.name:24s} {point['env_steps']:>9,} steps "
            f"{point['wall_s']:7.1f}s  return {point['return']:9.1f}  "
            f"(compiled {compile_s[0]:.0f}s)"
        )

    with log:
        t0[0] = time.time()
        train_fn(
            environment=env,
            wrap_env_fn=wrap_fn,
            network_factory=factory,
            progress_fn=progress,
            **kw,
        )
        compile_s[0] = log.total_s()
    total = time.time() - t0[0]
    # brax evaluates once before training (env steps 0): the clock starts at its end
    start = curve[0]["wall_s"] if curve and curve[0]["env_steps"] == 0 else 0.0
    for p in curve:
        p["wall_s"] -= start
    trained = [p for p in curve if p["env_steps"] > 0]
    return row(
        "brax",
        task,
        trained,
        compile_s=compile_s[0],
        wall_s=total - compile_s[0] - start,
        trainer=f"brax.training.agents.{task.algo}.train",
        config={k: v for k, v in kw.items()} | {"network": network},
        notes="; ".join(filter(None, [_brax_notes(task, peer_settings, dropped), used.note])),
        settings=used.record(),
        evaluation=score_settings.protocol(task, BRAX_EVALUATOR, brax_eval_every(task, kw)),
    )


BRAX_EVALUATOR = (
    "brax's own evaluator (brax.training.acting.Evaluator): one deterministic episode in "
    "each of num_eval_envs envs, new starts at every evaluation (its key split each "
    "time); s.e. from its eval/episode_reward_std"
)


BRAX_HIDDEN = {
    "sac": ("hidden_layer_sizes",),
    "ppo": ("policy_hidden_layer_sizes", "value_hidden_layer_sizes"),
}


def _brax_hidden(algo: str, hidden: tuple[int, ...]) -> dict[str, Any]:
    """brax's network factory arguments for ``hidden`` (the preset's widths)."""
    names = BRAX_HIDDEN[algo]  # brax's SAC names one size for both networks
    return dict.fromkeys(names, hidden)


def _brax_trainer(algo: str, network: dict[str, Any]) -> tuple[Any, Callable[..., Any]]:
    """brax's ``train`` function for ``algo`` (brax's name) and its network factory with
    the arguments ``network``."""
    from brax.training.agents.ppo import networks as ppo_nets  # heavy: benchmark only
    from brax.training.agents.ppo import train as ppo
    from brax.training.agents.sac import networks as sac_nets
    from brax.training.agents.sac import train as sac

    factories = {"sac": (sac, sac_nets.make_sac_networks), "ppo": (ppo, ppo_nets.make_ppo_networks)}
    train, make = factories[algo]
    return train.train, functools.partial(make, **network)


def _brax_notes(task: ScoreTask, peer_settings: str = "matched", dropped: Any = ()) -> str:
    notes = [
        "wall = brax's train() minus JAX trace/lower/compile events, from after its step-0 eval"
    ]
    if dropped:
        notes.append(f"left out (brax's train() does not take them): {', '.join(dropped)}")
    if task.env.startswith("playground/"):
        notes.append("Playground via wrap_for_brax_training (drops the final observation)")
    else:
        notes.append("brax's training wrappers (AutoReset to the first state of each env)")
    if algos.get(task.algo).on_policy and peer_settings == "matched":
        notes.append(
            "PPO: minibatches of whole env rows (brax) vs shuffled samples (jaxspreeze); "
            "brax's learning rate constant, jaxspreeze's annealed when anneal_lr; brax's "
            "networks of its defaults (SiLU, a tanh Gaussian with one learned std per "
            "action dimension), jaxspreeze's ReLU and the preset's policy"
        )
    return "; ".join(notes)


# ----------------------------------------------------------------------------- sides
# each side of `jaxspreeze score` runs in its own process (jaxspreeze.score.child),
# which calls one of these (named in jaxspreeze.score.sides.BUILTIN)
def side_fields(task: ScoreTask, run: SideRun) -> dict[str, Any]:
    """The preset changes of one side's run: the scale's sizes, the seed, the cache."""
    fields = dict(task.cpu) if run.scale == "cpu" else gpu_fields(task)
    fields.update(seed=run.seed, compile_cache=run.compile_cache)
    if run.total_steps is not None:
        fields["total_steps"] = run.total_steps
    return fields


def run_side(task: ScoreTask, run: SideRun) -> Record:
    """jaxspreeze's side: :func:`run_jaxspreeze` (device envs) or :func:`run_trainer`
    (host envs, which only the trainer's host schedules step)."""
    from jaxspreeze.envs import is_host_env

    train = run_trainer if is_host_env(task.env) else run_jaxspreeze
    return train(task, say=run.say, started=run.started, **side_fields(task, run))


def run_brax_side(task: ScoreTask, run: SideRun) -> Record:
    """brax's side: :func:`run_brax` with :func:`side_fields` and the run's peer settings."""
    return run_brax(
        task,
        say=run.say,
        started=run.started,
        peer_settings=run.peer_settings,
        **side_fields(task, run),
    )


def run_trainer(
    task: ScoreTask,
    say: Callable[[str], None] = lambda *a: None,
    started: float | None = None,
    **fields: Any,
) -> Record:
    """``task``'s preset trained by :func:`jaxspreeze.train` (its evaluator thread, its
    schedule: the host envs' one); its row. Each point is taken when the evaluation's
    result reaches ``on_eval``; ``wall_s`` counts from the first chunk's dispatch."""
    import tempfile

    from jaxspreeze.run.trainer import train

    planned = preset_config(task, **fields)
    curve: list[dict[str, Any]] = []

    def on_eval(record: dict[str, Any]) -> bool:
        now = time.time()
        point = {
            "env_steps": int(record["env_steps"]),
            "return": float(record["eval_return"]),
            "return_se": record.get("eval_return_se"),
            "at": now,
        }
        if started is not None:
            point["command_s"] = now - started
        if not curve or point["env_steps"] > curve[-1]["env_steps"]:  # the final's repeat
            curve.append(point)
            say(
                f"  jaxspreeze {task.name:24s} {point['env_steps']:>9,} steps "
                f"return {point['return']:9.1f}"
            )
        return False

    with tempfile.TemporaryDirectory() as logdir:
        cfg = planned.cfg.replace(logdir=logdir, run_name="score", sinks=())
        t0 = time.time()
        result = train(cfg, quiet=True, save=False, signals=None, on_eval=on_eval)
    s = result.summary
    first = t0 + float(s.get("first_chunk_dispatched_s") or 0.0)
    for p in curve:
        p["wall_s"] = p.pop("at") - first
    return row(
        "jaxspreeze",
        task,
        curve,
        compile_s=s.get("compile_all_s"),
        wall_s=s.get("wall_s"),
        env_steps_per_s=s.get("env_steps_per_s"),
        trainer="jaxspreeze.train",
        config={k: getattr(cfg, k) for k in (*RUN_SIZES, "eval_every", "eval_episodes", "seed")},
        notes="host env: jaxspreeze.train(), wall after compilation counted from the first chunk",
        placement=s.get("placement"),  # where the learner and its evaluations ran
        settings=_preset_settings(task, cfg, planned),
        evaluation=score_settings.protocol(task, score_settings.HOST_EVALUATOR),
    )


# ----------------------------------------------------------------------------- report
GPU_ENVS = 16  # --scale gpu: num_envs (and the budget) times this


def gpu_fields(task: ScoreTask) -> dict[str, Any]:
    """Preset changes for a GPU: ``GPU_ENVS`` x the envs, the budget and the batch.

    SAC keeps its gradient steps per env step (grad_steps x ``GPU_ENVS``); PPO keeps
    its minibatch count (batch x ``GPU_ENVS``).
    """
    cfg = config.resolve(config.load(task.path))
    f = GPU_ENVS
    on_policy = algos.get(task.algo).on_policy
    fields: dict[str, Any] = dict(
        num_envs=cfg.num_envs * f,
        total_steps=cfg.total_steps * f,
        batch_size=cfg.batch_size * f if on_policy else cfg.batch_size,
    )
    if not on_policy:
        fields.update(
            grad_steps=cfg.grad_steps * f,
            buffer_size=cfg.buffer_size * f,
            learning_starts=cfg.learning_starts * f,
        )
    return fields


def failed_row(side: str, task: ScoreTask, error: str) -> Record:
    """The row of a run that raised: ``error`` says why."""
    return row(side, task, [], error=error)


def _fmt(x: Any, spec: str = ",.0f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def summary_line(row: Record) -> str:
    """One line: side, task, steps and wall to the threshold, final return."""
    if row.get("error"):
        return f"{row['side']} {row['task']}: FAILED {row['error']}"
    to = (
        f"{row['env_steps_to_threshold']:,} steps, {row['wall_to_threshold_s']:.1f}s"
        if row["reached"]
        else "not reached"
    )
    return (
        f"{row['side']} {row['task']}: threshold {row['threshold']:g} {to}; final "
        f"{row['final_return']:.1f} at {row['env_steps']:,} steps; compile {row['compile_s']:.0f}s"
    )


def markdown(doc: dict[str, Any]) -> str:
    """The table of ``doc["rows"]`` with its commands, machine and notes."""
    lines = ["# Time to score", ""]
    for c in doc.get("commands", []):
        note = f" ({c['note']})" if c.get("note") else ""
        lines.append(f"- {c['date']}: `{c['command']}`{note}")
    hw = doc.get("hardware", {})
    lines += [
        "",
        f"Machine: {hw}. Versions: {doc.get('versions')}.",
        "",
        "One seed (0) per row. `steps to thr.` and `wall to thr.` are read at the first "
        "evaluation whose mean return (deterministic policy) reaches the threshold; wall "
        "counts from the end of compilation (jaxspreeze: warm-up, chunks and the evaluations "
        "before it; `train` leaves the evaluations out; brax: its train() minus JAX's "
        "trace/lower/compile events, its evaluations in). The run continues to its budget: "
        "`final` is the last evaluation. `load` is the 1-minute load average at the start "
        "and end of the row (2 cores shared).",
        "",
        "| env | algo | side | threshold | reached | steps to thr. | wall to thr. s | "
        "train to thr. s | final return | best | env steps | wall s | compile s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        if r.get("error"):
            lines.append(
                f"| {r['env']} | {r['algo']} | {r['side']} | {r['threshold']:g} | failed: "
                f"{r['error'][:120]} | | | | | | | | | |"
            )
            continue
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['side']} | {r['threshold']:g} | "
            f"{'yes' if r['reached'] else 'no'} | {_fmt(r['env_steps_to_threshold'])} | "
            f"{_fmt(r['wall_to_threshold_s'], '.1f')} | {_fmt(r.get('train_to_threshold_s'), '.1f')} | "
            f"{_fmt(r['final_return'], '.1f')} | {_fmt(r['best_return'], '.1f')} | "
            f"{_fmt(r['env_steps'])} | {_fmt(r.get('wall_s'), '.0f')} | "
            f"{_fmt(r.get('compile_s'), '.0f')} | {r.get('load_start', 0):.1f}-{r.get('load_end', 0):.1f} |"
        )
    done = {(r["task"], r["side"]) for r in doc["rows"]}
    missing = [f"{s} {n}" for n in TASKS for s in ("jaxspreeze", "brax") if (n, s) not in done]
    if missing:
        lines += ["", "Not run: " + ", ".join(missing) + "."]
    notes = sorted({n for r in doc["rows"] if r.get("notes") for n in r["notes"].split("; ")})
    if notes:
        lines += ["", "brax rows:", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def side_by_side(doc: dict[str, Any]) -> str:
    """One line per task, jaxspreeze's row beside brax's (the README's table)."""

    def cell(r: Record | None) -> str:
        if r is None:
            return "not run | | | "
        if r.get("error"):
            return "failed | | | "
        to = (
            f"{r['env_steps_to_threshold']:,} | {r['wall_to_threshold_s']:.0f} | "
            if r["reached"]
            else "not reached | - | "
        )
        return to + f"{r['final_return']:.1f} | {_fmt(r.get('wall_s'), '.0f')}"

    rows = {(r["task"], r["side"]): r for r in doc["rows"]}
    lines = [
        "| preset | env | threshold | env steps | steps to thr. | wall to thr. s | final return "
        "| wall s | brax: steps to thr. | wall to thr. s | final return | wall s "
        "| jaxspreeze compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, task in TASKS.items():
        ours = rows.get((name, "jaxspreeze"))
        if ours is None and (name, "brax") not in rows:
            continue
        compile_s = _fmt(ours.get("compile_s"), ".0f") if ours else "-"
        budget = _fmt(ours.get("env_steps")) if ours else "-"
        lines.append(
            f"| {task.preset} | {task.env} | {task.threshold:g} | {budget} | {cell(ours)} | "
            f"{cell(rows.get((name, 'brax')))} | {compile_s} |"
        )
    return "\n".join(lines) + "\n"
