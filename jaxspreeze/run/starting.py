"""A run's start, before its first chunk: set up, then compile and warm up or restore.

:func:`set_up` plans the run once (:func:`jaxspreeze.setup.plan.plan`: the config resolved and
checked, the algorithm, the env spec, the placement), claims (locks) the run directory and
builds the schedule and its programs from the plan, with the memory estimate checked;
:func:`start` compiles, then warms up (a new run) or restores the checkpoint and sets a
resumed run's changed hyperparameters. A resumed run's directory is only updated once the
restore has succeeded; a new run's is marked ``NOT_STARTED`` until its first checkpoint.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from jaxspreeze import schedules
from jaxspreeze.agent.evaluate import EvalResult
from jaxspreeze.core import terminal
from jaxspreeze.core.compiles import HEARTBEAT_S, Progress
from jaxspreeze.core.types import Placement, Record
from jaxspreeze.envs import jaxenv
from jaxspreeze.host import hostenvs
from jaxspreeze.run.caches import enable_compile_cache, program_cache
from jaxspreeze.run.faults import agree
from jaxspreeze.run.lines import resumed
from jaxspreeze.run.stopping import GracefulStop
from jaxspreeze.run.threads import evaluate_ahead
from jaxspreeze.schedules.iteration import TrainState
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup import devices, distributed, memory, population
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan, check_compile, plan
from jaxspreeze.store import resume as resume_lib
from jaxspreeze.store import rundir

BEFORE_SETUP = "the run had not started; nothing was trained"  # a stop before set_up ends


@dataclass(frozen=True)
class Setup:
    """A run set up: its plan, programs and (locked) run directory."""

    plan: RunPlan  # the config resolved and checked, on its placement
    point: resume_lib.ResumePoint | None  # where a resumed run continues from
    memory: dict[str, int]  # the memory estimate, checked against the devices
    schedule: schedules.Schedule
    run: rundir.RunDir
    abstract: TrainState | None = None  # the state's shapes (the init trace), if known

    @property
    def cfg(self) -> RunConfig:
        """The plan's config (resolved, checked, pointed at the run directory)."""
        return self.plan.cfg

    @property
    def placement(self) -> Placement:
        """The plan's placement."""
        assert self.plan.placement is not None
        return self.plan.placement


@dataclass(frozen=True)
class Started:
    """A run ready for its first chunk: the state and where the history stands."""

    state: TrainState
    first_chunk: int
    steps: int  # env steps per seed so far
    compile_s: float
    history: list[Record]  # the records kept from before (a resumed run)
    evaluate: Callable[[Any], EvalResult] | None = None  # compiled ahead (process 0)


def set_up(cfg: RunConfig, resume: str | Path | None, overwrite: bool) -> Setup:
    """Plan ``cfg`` (and check the run it resumes), own its directory, build its programs.

    Raises ConfigError before anything is compiled or allocated. The run directory is
    locked on return (the caller releases it); a new run's directory holds ``config.json``
    and the ``NOT_STARTED`` marker, a resumed run's is unchanged.

    Several processes: they must hold the same config (else ConfigError on every one);
    process 0 claims the directory and tells the others its path (theirs is not locked);
    every step is agreed, so that when one process fails its setup all of them stop (the
    others with a ProcessError naming it).
    """
    # first: a brax env built by the plan's checks reuses the cache's directory
    cache_dir = enable_compile_cache(cfg.compile_cache)
    planned = plan(cfg, on_devices=False)  # the one resolution and check of the config
    if distributed.process_count() > 1:  # refuse processes started with different flags
        request = {
            "config": config_lib.to_dict(planned.cfg),
            "resume": str(resume or ""),
            "overwrite": overwrite,
        }
        distributed.check_same_config(request)
    asked = planned.cfg.compile
    planned = planned.placed(devices.resolve(planned.cfg.placement))
    check_compile(asked, planned)  # quick where it has no meaning: refused, nothing compiled
    main = distributed.is_main()  # process 0 owns (claims, locks, writes) the run directory
    run, error = None, None
    if main:
        try:
            run = rundir.claim(planned.cfg, resume=resume)
        except Exception as e:
            error = e
    agree(error, "claim the run directory")
    path = distributed.broadcast_text(str(run.path) if run is not None else "")
    run = run if run is not None else rundir.RunDir(path)  # the others: not locked
    try:
        try:
            point = None
            if resume is not None:
                point, planned = resume_lib.find(run.path, planned)
            else:
                if main:
                    rundir.check_new(run, overwrite)
                planned = planned.relocated(run_name=run.path.name)
            schedule = schedules.make(planned)
            schedule.programs = program_cache(cache_dir, schedule)
            # the memory estimate reads the shapes of the init program's own trace (which
            # init reuses); a data-parallel estimate is a shard's, traced apart
            placement = schedule.placement
            abstract = None if placement.data_parallel else schedule.init_abstract()
            estimate = memory.check_memory(planned, placement, state=abstract)
            if point is None and main:
                run.start_new(planned.cfg)
            if main and hostenvs.is_user_env(planned.cfg.env):  # how the user passed it
                hostenvs.save_user_env(run.path, planned.cfg.env)
            if main and jaxenv.is_jax_env(planned.cfg.env):  # a JAX env object's class, spec
                jaxenv.save_record(run.path, planned.cfg.env)
        except Exception as e:
            error = e
        agree(error, "set up the run")
    except BaseException:
        if not main:
            pass
        elif resume is None:
            rundir.release_new(run)
        else:
            run.release()
        raise
    return Setup(planned, point, estimate, schedule, run, abstract)


def budget_warnings(planned: RunPlan) -> list[str]:
    """Setup choices worth a line on stderr: a replay buffer far larger than the run."""
    cfg = planned.cfg
    if planned.on_policy or cfg.buffer_size <= cfg.total_steps:
        return []
    nbytes = memory.buffer_nbytes(planned)
    unused = nbytes * (cfg.buffer_size - cfg.total_steps) / cfg.buffer_size
    if unused < UNUSED_BUFFER_WARNING:
        return []
    return [
        f"buffer_size {cfg.buffer_size:,} holds more transitions than the run takes "
        f"(total_steps {cfg.total_steps:,} per seed): {unused / 2**30:.1f} GiB of the replay "
        "buffer is never filled; lower --buffer-size (a resumed run must keep it)"
    ]


UNUSED_BUFFER_WARNING = 2**30  # bytes of replay buffer never filled that earn a warning


def start(setup: Setup, say: Callable[[str], None], stop: GracefulStop | None) -> Started:
    """Compile, then warm up (a new run) or restore the checkpoint (a resumed one).

    A resumed run's changed hyperparameters are set in the restored state, and only then
    is its run directory updated (records past the checkpoint dropped, config.json,
    resumes.jsonl). Returns the state (ready on the devices), the first chunk to run, the
    env steps per seed so far, the seconds spent compiling and the records kept.

    Where the schedule can (:meth:`~jaxspreeze.schedules.base.Schedule.init_compiled`),
    the chunk and the warm-up compile on threads for the init's shapes while the init
    compiles and runs; process 0's evaluation compiles on a thread beside them all, and is
    not awaited: the first chunk starts when its own programs are ready, and the first
    evaluation waits for its program if it is not ready yet (:class:`PendingEvaluate`).
    ``compile_s`` counts the chunk's compile (with the init it overlaps).

    ``say`` gets ``compiling N programs: ...``, a line per program as it is ready and a
    heartbeat line every few seconds while they compile (:class:`Progress`), until the
    chunk's programs are ready.
    """
    cfg, schedule, point, run = setup.cfg, setup.schedule, setup.point, setup.run
    check = stop.check if stop is not None else (lambda: None)
    main = distributed.is_main()
    progress = _progress(schedule, say, evaluates=main)
    try:
        evaluating = evaluate_ahead(schedule, setup.abstract) if main and setup.abstract else None
        state, evaluating, compile_s = _compile(setup, schedule, evaluating, main)
    finally:
        progress.end()
        schedule.programs.on_ready = None
    check()
    evaluate = PendingEvaluate(evaluating) if evaluating is not None else None
    if point is None:
        state = jax.block_until_ready(schedule.warmup(state))
        check()
        return Started(state, 0, setup.plan.warmup_steps, compile_s, [], evaluate)
    template = state
    state = resume_lib.restore(point, template)
    if point.hyperparameters_changed:
        state = resume_lib.apply_hyperparameters(state, template)
    state = jax.block_until_ready(state)
    check()
    damaged = [p for p, _ in point.damaged]
    history = []  # process 0 updates the run directory (and keeps its records)
    if distributed.is_main():
        history = run.commit_resume(cfg, point.env_steps, _resume_entry(point), damaged)
    for line in resumed(point):
        say(line)
    return Started(state, point.first_chunk, point.env_steps, compile_s, history, evaluate)


def _compile(
    setup: Setup, schedule: schedules.Schedule, evaluating: Future | None, main: bool
) -> tuple[TrainState, Future | None, float]:
    """The initial state with the chunk (and warm-up) compiled; the evaluation compiling
    (None: none); the seconds of the chunk's compile."""
    cfg = setup.cfg
    if setup.abstract is not None and not cfg.population:
        t_compile = time.perf_counter()
        state = schedule.init_compiled()
    else:  # a population's members go into the state before its chunk compiles
        state = schedule.init()
        if cfg.population:  # each member's values into its slots (a resume's template too)
            agent = population.apply_members(jax.device_get(state.agent), cfg, setup.plan.algo_spec)
            state = schedule.place(state._replace(agent=jax.device_get(agent)))
        if main and evaluating is None:
            evaluating = evaluate_ahead(schedule, state)
        t_compile = time.perf_counter()
        schedule.compile(state)
    return state, evaluating, time.perf_counter() - t_compile


# the programs' names in the start's lines
LABELS = {"init": "init", "warmup": "warm-up", "fused_chunk": "chunk", "evaluate": "evaluation"}


def _label(name: str) -> str:
    if name.startswith("warmup_"):  # a split's warm-up piece
        return f"warm-up {name.removeprefix('warmup_')}"
    return LABELS.get(name, name)


def _progress(
    schedule: schedules.Schedule, say: Callable[[str], None], evaluates: bool
) -> Progress:
    """The start's compile lines (:class:`~jaxspreeze.core.compiles.Progress`), begun: the
    programs to make, then each as the program cache says it is ready."""
    # on a terminal the trainer's live line already counts the seconds: no heartbeat lines
    progress = Progress(say, every_s=None if terminal.is_terminal() else HEARTBEAT_S)
    names = ["init"]
    if schedule.plan.warmup_steps and not schedule.algo.on_policy:
        names.append("warm-up")
    names.append("chunk")
    if evaluates:
        names.append("evaluation")
    schedule.programs.on_ready = lambda name, how, s: progress.ready(_label(name), how, s)
    quick = schedule.cfg.compile == "quick"  # said: its floats differ from a full run's
    progress.begin(names, " for compile speed (--compile quick)" if quick else "")
    return progress


class PendingEvaluate:
    """The run's evaluation while its program may still compile on a thread: the first
    call waits for it (on the evaluator's thread, not the training's); ``waited_s`` is
    how long that wait was. A process that ends before the compile has finished waits
    for it first (no thread is left inside XLA as the interpreter shuts down)."""

    def __init__(self, evaluating: Future) -> None:
        self._evaluating = evaluating
        self._evaluate: Callable[..., EvalResult] | None = None
        self._lock = threading.Lock()
        self.waited_s = 0.0
        if not evaluating.done():
            atexit.register(self._settle)
            evaluating.add_done_callback(lambda _: atexit.unregister(self._settle))

    def _settle(self) -> None:
        wait([self._evaluating])

    def __call__(self, *args: Any, **kwargs: Any) -> EvalResult:
        if self._evaluate is None:
            with self._lock:
                if self._evaluate is None:
                    t0 = time.perf_counter()
                    self._evaluate = self._evaluating.result()
                    self.waited_s = time.perf_counter() - t0
        return self._evaluate(*args, **kwargs)


def _resume_entry(point: resume_lib.ResumePoint) -> Record:
    """The line ``resumes.jsonl`` gets for this resume."""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **point.record()}
