"""Which cases run, at which sizes, and how one case is measured end to end.

``Case`` names a measurement and its arguments; :func:`prepare` builds jaxspreeze's
workload, :func:`prepare_reference` the bare reference's, and :func:`measure` times both
(interleaved) into one record with their ratio. The pytest-benchmark suite uses the same
``prepare`` functions and lets pytest-benchmark time jaxspreeze's side.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from jaxspreeze import algos
from jaxspreeze.bench import cases, cold, learning
from jaxspreeze.bench.record import (
    Record,
    Workload,
    chained,
    compile_timed,
    matmul_peak_flops,
    throughput_record,
    time_pair,
    time_workload,
    with_reference,
)
from jaxspreeze.bench.report import row
from jaxspreeze.envs import playground
from jaxspreeze.setup.config import RunConfig

SAMPLING_ENVS = ("gymnax/Pendulum-v1", "gymnax/CartPole-v1", "brax/ant")
UPDATE_ALGOS = ("sac", "td3", "ppo")
# the distributional (categorical) critic of the fast recipes at their paper's widths and
# batch sizes (FastTD3: 32,768)
RECIPE_UPDATE_ALGOS = ("fasttd3", "fastsac")
CHUNK_ENVS = ("gymnax/Pendulum-v1", "gymnax/CartPole-v1")  # off-policy, on-policy
WARMUP_EPOCHS = 2  # brax trainer epochs that compile before the timed ones
# brax's trainers vs jaxspreeze's chunk: (algo, env) rows of the full selection; the
# Playground task is driven on brax's side through Playground's brax training wrapper
TRAINER_ROWS = (
    ("sac", "brax/ant"),
    ("ppo", "brax/ant"),
    ("ppo", "playground/CartpoleBalance"),
)
# recurrent PPO (--ppo.memory) against feed-forward PPO at the same sizes: one row per
# (env, cell), its reference the feed-forward chunk, timed interleaved (issue 40's goal:
# a recurrent policy costs at most 1.5x the feed-forward policy's wall per env step)
MEMORY_ENVS = ("gymnax/CartPole-v1", "gymnax/Breakout-MinAtar")
MEMORY_CELLS = ("gru", "lstm")
# the JAX suites' env stepping (issue 42: at least 0.9x a vmapped scan of the suite): one
# row per (env, num_envs), jaxspreeze's adapter against the suite's own practice and the
# bare transition (references.SUITE_PRACTICES), each a jitted scan of random legal
# actions; the env -> its sizes' name
SUITE_ENVS = {
    "navix/Navix-Empty-8x8-v0": "suite_envs",
    "xminigrid/MiniGrid-Empty-8x8": "suite_envs",
    "jumanji/Snake-v1": "suite_envs_few",
    "craftax/Craftax-Classic-Symbolic-v1": "suite_envs_few",
}
# their rows compile for minutes on a CPU (Craftax's own auto-reset alone 30-110 s): only
# with --full, or where --only names them
HEAVY_SUITES = ("craftax",)
SUITE_STEPS = 128  # env steps of every env per timed call
SUITE_STEPS_HEAVY = 16  # Craftax: its own auto-reset steps at about 300 env steps/s on a CPU

SCALES = ("cpu", "gpu")
# the sizes of each scale, side by side (cpu, gpu): "cpu" fits 2 cores, "gpu" goes to 65,536
# envs and samples per batch
SIZES_BY_NAME: dict[str, tuple[Any, Any]] = {
    "sampling_envs": ((1, 64, 1024, 8192), (1, 1024, 16384, 65536)),
    "sampling_envs_brax": ((16, 128, 512), (1024, 16384)),
    "suite_envs": ((64, 256, 1024), (1024, 16384, 65536)),
    "suite_envs_few": ((64, 256), (1024, 16384)),
    "batch_sizes": ((256, 1024, 4096), (256, 4096, 65536)),
    "recipe_batch_sizes": ((4096, 32768), (4096, 32768)),
    "sac_chunk": (
        dict(num_envs=64, grad_steps=8, batch_size=256, chunk_iterations=8),
        dict(num_envs=4096, grad_steps=16, batch_size=8192, chunk_iterations=16),
    ),
    "ppo_chunk": (
        dict(num_envs=32, rollout_steps=64, batch_size=512, chunk_iterations=2),
        dict(num_envs=4096, rollout_steps=32, batch_size=32768, chunk_iterations=2),
    ),
    # PPO's default sizes (16 envs x 64 steps, minibatches of 256; networks: PPO's
    # defaults, the torso auto, cells of --ppo.memory-size's default)
    "ppo_memory_chunk": (
        dict(num_envs=16, rollout_steps=64, batch_size=256, chunk_iterations=1),
        dict(num_envs=1024, rollout_steps=64, batch_size=16384, chunk_iterations=1),
    ),
    # brax's trainers vs the chunk: one brax epoch = one chunk = chunk_iterations steps
    "brax_sac": (
        dict(num_envs=128, grad_steps=8, batch_size=256, chunk_iterations=32),
        dict(num_envs=2048, grad_steps=16, batch_size=8192, chunk_iterations=64),
    ),
    "brax_ppo": (
        dict(num_envs=256, rollout_steps=16, chunk_iterations=4),
        dict(num_envs=4096, rollout_steps=16, chunk_iterations=4),
    ),
}
SIZES: dict[str, dict[str, Any]] = {
    scale: {name: sizes[i] for name, sizes in SIZES_BY_NAME.items()}
    for i, scale in enumerate(SCALES)
}
QUICK = {
    "cpu": {
        "sampling_envs": (1024,),
        "sampling_envs_brax": (16,),
        "batch_sizes": (256,),
        "recipe_batch_sizes": (),
        "suite_envs": (64,),
        "suite_envs_few": (64,),
    },
    "gpu": {
        "sampling_envs": (16384,),
        "sampling_envs_brax": (1024,),
        "batch_sizes": (4096,),
        "recipe_batch_sizes": (32768,),
        "suite_envs": (16384,),
        "suite_envs_few": (16384,),
    },
}


@dataclass(frozen=True)
class EndToEnd:
    """An end-to-end case: ``algo`` trained on ``env`` until its return reaches ``threshold``."""

    algo: str
    env: str
    threshold: float
    sizes: dict[str, int]  # RunConfig fields
    algo_config: dict[str, Any] = field(default_factory=dict)  # changes to its defaults

    def config(self) -> RunConfig:
        """The run: the sizes on one device, the algorithm's default networks and config."""
        hidden = algos.get(self.algo).config_cls().hidden  # the algorithm's tuned default
        cfg = cases.run_config(self.algo, self.env, hidden, **self.sizes, placement="single")
        algo_cfg = dataclasses.replace(getattr(cfg, self.algo), **self.algo_config)
        return dataclasses.replace(cfg, **{self.algo: algo_cfg})


E2E = {
    "sac": EndToEnd(
        "sac",
        "gymnax/Pendulum-v1",
        -200.0,
        dict(num_envs=8, grad_steps=8, batch_size=256, chunk_iterations=125, total_steps=30_000),
    ),
    "ppo": EndToEnd(
        "ppo",
        "gymnax/CartPole-v1",
        475.0,
        dict(
            num_envs=16, rollout_steps=64, batch_size=256, chunk_iterations=5, total_steps=300_000
        ),
        algo_config=dict(lr=1e-3),
    ),
}


@dataclass(frozen=True)
class Case:
    """One measurement: its kind (sampling, update, chunk, suite, memory, trainer,
    end_to_end, learning) and args."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def id(self) -> str:
        """A short readable id, e.g. ``sampling-gymnax/Pendulum-v1-1024``."""
        if self.kind == "cold":
            return cold.case_id(self.args)
        return "-".join([self.kind, *(str(v) for v in self.args.values())])


def selection(
    full: bool = False, scale: str | None = None, only: tuple[str, ...] = ()
) -> list[Case]:
    """The cases of the quick (default) or full selection at ``scale`` (cpu/gpu; auto).

    A suite row of the full selection is in the quick one too where a string of ``only``
    (``--only``) is part of its id: ``--only craftax`` runs Craftax's rows, heavy on a CPU
    and left out of the quick selection otherwise (:data:`HEAVY_SUITES`)."""
    scale = scale or ("cpu" if jax.default_backend() == "cpu" else "gpu")
    sizes = dict(SIZES[scale])
    if not full:
        sizes.update(QUICK[scale])
    out: list[Case] = []
    for env in SAMPLING_ENVS:
        key = "sampling_envs_brax" if env.startswith("brax/") else "sampling_envs"
        out += [Case("sampling", {"env": env, "num_envs": n}) for n in sizes[key]]
    for algo in UPDATE_ALGOS:
        out += [Case("update", {"algo": algo, "batch_size": b}) for b in sizes["batch_sizes"]]
    for algo in RECIPE_UPDATE_ALGOS:
        out += [
            Case("update", {"algo": algo, "batch_size": b}) for b in sizes["recipe_batch_sizes"]
        ]
    out += [
        Case("chunk", {"algo": "sac", "scale": scale}),
        Case("chunk", {"algo": "ppo", "scale": scale}),
    ]
    for env, key in SUITE_ENVS.items():
        rows = [Case("suite", {"env": env, "num_envs": n}) for n in SIZES[scale][key]]
        if not full:
            quick = () if env.partition("/")[0] in HEAVY_SUITES else sizes[key]
            named = lambda c: any(s in c.id for s in only)
            rows = [c for c in rows if c.args["num_envs"] in quick or named(c)]
        out += rows
    if full:
        out += [Case("trainer", {"algo": a, "env": e, "scale": scale}) for a, e in TRAINER_ROWS]
        out += [Case("end_to_end", {"algo": a}) for a in ("sac", "ppo")]
        out += [
            Case("memory", {"env": e, "memory": m, "scale": scale})
            for e in MEMORY_ENVS
            for m in MEMORY_CELLS
        ]
        out += [Case("learning", {"task": name}) for name in learning.TASKS]
    return out


def cold_selection(total_steps: int | None = None) -> list[Case]:
    """The cold-start group (:mod:`.cold`): each case a fresh process; ``total_steps``:
    the jobs' budget (default: their algorithm's)."""
    return [Case("cold", args) for args in cold.cases(total_steps)]


def _chunk_config(algo: str, scale: str) -> RunConfig:
    env = CHUNK_ENVS[algos.get(algo).on_policy]
    return cases.chunk_config(algo, env, **SIZES[scale][f"{algo}_chunk"])


def memory_config(env: str, memory: str, scale: str) -> RunConfig:
    """The chunk of a memory row: PPO at ``scale``'s ``ppo_memory_chunk`` sizes with its
    default networks, ``memory`` its cell (``none``: the feed-forward reference)."""
    hidden = algos.get("ppo").config_cls().hidden
    cfg = cases.chunk_config("ppo", env, hidden=hidden, **SIZES[scale]["ppo_memory_chunk"])
    return dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, memory=memory))


def memory_chunk(env: str, memory: str, scale: str) -> Workload:
    """The training chunk of PPO with ``memory`` (:func:`memory_config`) as a memory
    row's workload."""
    w = cases.chunk(memory_config(env, memory, scale))
    w.name = f"memory[{memory}-{env}]"
    w.params.update(kind="memory", memory=memory, scale=scale)
    return w


def trainer_config(
    algo: str, env: str, scale: str, rounds: int = 3
) -> tuple[RunConfig, dict[str, Any]]:
    """jaxspreeze's chunk config matched to brax's trainer, and the trainer's arguments.

    brax trains ``rounds + WARMUP_EPOCHS`` epochs (its first two compile) of exactly one
    chunk's env steps each (plus SAC's ``num_envs`` prefill steps), so a brax epoch and a jaxspreeze
    chunk are the same work: the same env steps, gradient steps and batch sizes.
    """
    s = SIZES[scale][f"brax_{algo}"]
    n, k = s["num_envs"], s["chunk_iterations"]
    if not algos.get(algo).on_policy:
        cfg = cases.chunk_config(
            algo, env, n, s["batch_size"], k, grad_steps=s["grad_steps"], learning_starts=n
        )
        kw = dict(batch_size=s["batch_size"], grad_updates_per_step=s["grad_steps"])
        prefill = n  # brax's min_replay_size = num_envs: one step of every env
    else:
        t = s["rollout_steps"]
        cfg = cases.chunk_config(algo, env, n, n * t // 4, k, rollout_steps=t)
        kw = dict(unroll_length=t, num_minibatches=4, epochs=getattr(cfg, algo).epochs)
        prefill = 0
    steps = prefill + (rounds + WARMUP_EPOCHS) * k * n * cfg.rollout_steps
    return cfg, dict(
        algo=algo,
        env_name=env,
        num_envs=n,
        num_timesteps=steps,
        num_evals=rounds + WARMUP_EPOCHS + 1,  # brax: the first evaluation is one of them
        **kw,
    )


def interleaved_trainer(
    w: Workload, refs: ModuleType, kw: dict[str, Any]
) -> tuple[list[float], Record]:
    """jaxspreeze's chunk timed between brax's trainer epochs; (seconds per chunk, brax).

    After every brax epoch (brax's own timing stopped), jaxspreeze runs as many chunks as
    that epoch had env steps; the pairs whose brax epoch compiled are dropped, and the
    first pair always (our warm-up). Both sides time the same env steps with ``block_until_ready``, compile and
    evaluation excluded, alternating in one process so machine load hits both alike.
    """
    times: list[float] = []
    ours: list[BaseException] = []  # our own failure is ours, not brax's

    def between(epoch_steps: int) -> None:
        calls = max(1, round(epoch_steps / w.env_steps))
        t0 = time.perf_counter()
        try:
            for _ in range(calls):
                w.run()
        except BaseException as e:
            ours.append(e)
            raise
        times.append((time.perf_counter() - t0) / calls)

    reference = brax_reference(refs, {**kw, "between_epochs": between})
    if ours:
        raise ours[0]
    compiled = reference.get("brax_epoch_compiled") or [False] * len(times)
    return [
        t for i, (t, c) in enumerate(zip(times, compiled, strict=True)) if i and not c
    ], reference


def prepare(case: Case) -> Workload:
    """jaxspreeze's compiled workload for ``case`` (raises ``cases.Unavailable``)."""
    a = case.args
    if case.kind == "sampling":
        return cases.sampling(a["env"], a["num_envs"])
    if case.kind == "update":
        return cases.update(a["algo"], a["batch_size"])
    if case.kind == "chunk":
        return cases.chunk(_chunk_config(a["algo"], a["scale"]))
    if case.kind == "memory":
        return memory_chunk(a["env"], a["memory"], a["scale"])
    if case.kind == "trainer":
        if a["env"].startswith("playground/") and not playground.installed():
            raise cases.Unavailable(f"{a['env']}: MuJoCo Playground is not installed")
        w = cases.chunk(trainer_config(a["algo"], a["env"], a["scale"])[0])
        w.params["kind"] = "trainer"  # a chunk, compared with brax's trainer
        return w
    raise ValueError(f"{case.kind} cases are not workloads; use measure()")


def prepare_reference(case: Case, refs: ModuleType | None, like: Workload) -> Workload | None:
    """The bare reference's workload doing ``like``'s work (None where there is none); a
    memory row's is the feed-forward chunk at its sizes (no references module needed)."""
    a, p = case.args, like.params
    if case.kind == "memory":
        return memory_chunk(a["env"], "none", a["scale"])
    if refs is None:
        return None
    if case.kind == "sampling":
        return refs.sampling(a["env"], a["num_envs"], p["rollout_steps"])
    if case.kind == "update" and a["algo"] in refs.UPDATES:
        return refs.UPDATES[a["algo"]](a["batch_size"], like.grad_steps["critic"])
    return None


def record_of(w: Workload, times: list[float], peak: float | None) -> Record:
    """The throughput record of ``w`` at the median of ``times``."""
    return throughput_record(w, statistics.median(times), peak, times)


def suite_steps(env_name: str) -> int:
    """Env steps of every env per timed call of a suite row."""
    return SUITE_STEPS_HEAVY if env_name.partition("/")[0] in HEAVY_SUITES else SUITE_STEPS


def _strong(tree: Any) -> Any:
    """A copy of ``tree``, each leaf a buffer of its own (the carry is donated) and none
    weak-typed (a reset's Python scalars are weak, a step's are not: the compiled program
    takes the state it returns)."""
    keyed = lambda x: jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    dtype = lambda x: None if keyed(x) else jnp.result_type(x)
    return jax.tree.map(lambda x: jnp.array(x, dtype(x), copy=True), tree)


def scanned(
    name: str, carry: Any, step: Callable, num_envs: int, steps: int, params: dict[str, Any]
) -> Workload:
    """The workload of one side of a suite row: ``jit(lax.scan(step))`` over ``steps``
    keys, ``step(carry, key) -> (carry, reward [N])`` (:func:`.cases.suite_stepper`,
    :func:`.references.suite_stepper`), the carry donated from call to call; every side
    is scanned by this same program."""

    def run(carry, key):
        key, k = jax.random.split(key)
        carry, rewards = jax.lax.scan(step, carry, jax.random.split(k, steps))
        return carry, key, rewards.sum()

    carry, key = _strong(carry), jax.random.key(1)
    compiled, compile_s = compile_timed(run, carry, key, donate=(0,))
    return Workload(
        name,
        chained(compiled, carry, key),
        env_steps=num_envs * steps,
        compile_s=compile_s,
        params={"kind": "suite", "num_envs": num_envs, "steps": steps, **params},
    )


def time_interleaved(
    workloads: list[Workload], rounds: int, warmup: int = 1
) -> list[tuple[list[float], list[float]]]:
    """``(wall seconds, CPU seconds of this process)`` per call of each workload, over
    ``rounds`` rounds after ``warmup`` untimed ones, each round one call of every workload
    in turn (machine noise hits all of them alike)."""
    for _ in range(warmup):
        for w in workloads:
            w.run()
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in workloads]
    for _ in range(rounds):
        for w, (wall, cpu) in zip(workloads, out, strict=True):
            t, c = time.perf_counter(), time.process_time()
            w.run()
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    return out


def _suite_record(w: Workload, wall: list[float], cpu: list[float]) -> Record:
    rec = record_of(w, wall, None)
    rec["cpu_seconds_per_call"] = statistics.median(cpu)
    rec["env_steps_per_cpu_s"] = w.env_steps / rec["cpu_seconds_per_call"]
    return rec


def suite_row(
    env_name: str,
    num_envs: int,
    refs: ModuleType | None,
    rounds: int = 3,
    warmup: int = 1,
    steps: int | None = None,
) -> Record:
    """A suite row: jaxspreeze's env stepping for ``env_name`` (the adapter, as the fused
    chunk steps it) against each of ``refs.suite_variants(env_name)`` (the suite's own
    practice first, the bare transition last), ``num_envs`` envs, ``steps`` env steps of
    each a call, all timed interleaved in this process (medians; per wall second and per
    CPU second of this process; compile apart). The row's reference and ratio are the
    suite's own practice's (``ratio_vs_reference``: per wall second); ``ratios`` holds
    every reference's, per wall and per CPU second. Raises ``cases.Unavailable`` when the
    suite is not installed."""
    cases.check_suite(env_name)
    steps = steps or suite_steps(env_name)
    name = f"{env_name}-n{num_envs}"
    ours = cases.suite_stepper(env_name, num_envs)
    sides = [scanned(f"suite[{name}]", *ours, num_envs, steps, {"env": env_name})]
    practices = refs.suite_variants(env_name) if refs is not None else {}
    failed: dict[str, Record] = {}
    for variant, practice in practices.items():
        params = {"env": env_name, "variant": variant, "practice": practice}
        try:
            carry, step = refs.suite_stepper(env_name, num_envs, variant)
            sides.append(scanned(f"{variant}[{name}]", carry, step, num_envs, steps, params))
        except Exception as e:  # a broken reference is reported, not fatal
            failed[variant] = {**params, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    load = os.getloadavg()[0]
    times = time_interleaved(sides, rounds, warmup)
    records = [_suite_record(w, *t) for w, t in zip(sides, times, strict=True)]
    ours_rec, theirs = records[0], {r["variant"]: r for r in records[1:]}
    ours_rec["load_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    slim = lambda r: {k: v for k, v in r.items() if k not in ("hardware", "versions")}
    ours_rec["references"] = {v: slim(theirs.get(v) or failed[v]) for v in practices}
    ours_rec["ratios"] = {
        v: {
            "wall": ours_rec["env_steps_per_s"] / r["env_steps_per_s"],
            "cpu": ours_rec["env_steps_per_cpu_s"] / r["env_steps_per_cpu_s"],
        }
        for v, r in theirs.items()
    }
    own = theirs.get("own") or failed.get("own")
    return with_reference(ours_rec, own)


def measure(case: Case, refs: ModuleType | None = None, rounds: int = 3, warmup: int = 1) -> Record:
    """Measure ``case`` and its reference in this process; a skipped case says why.

    A ``learning`` case (autotuned vs default config, :mod:`.learning`) has the default
    run as its reference and prints its progress; ``JAXSPREEZE_AUTOTUNE_BUDGET_S``
    overrides the tasks' autotune probe budgets.
    """
    try:
        if case.kind == "cold":
            return cold.measure(case.args, rounds)
        if case.kind == "learning":
            budget = os.environ.get("JAXSPREEZE_AUTOTUNE_BUDGET_S")
            task = learning.TASKS[case.args["task"]]
            rec = learning.compare(
                task, autotune_budget_s=float(budget) if budget else None, say=print
            )
            return {"id": case.id, **rec}
        if case.kind == "end_to_end":
            e2e = E2E[case.args["algo"]]
            return {"id": case.id, **cases.end_to_end(e2e.config(), e2e.threshold)}
        if case.kind == "suite":
            a = case.args
            return {"id": case.id, **suite_row(a["env"], a["num_envs"], refs, rounds, warmup)}
        w = prepare(case)
    except cases.Unavailable as e:
        return {"id": case.id, "kind": case.kind, **case.args, "skipped": str(e)}
    peak = matmul_peak_flops(fresh=True) if case.kind == "update" else None
    reference: Record | None = None
    if case.kind == "trainer":
        kw = trainer_config(case.args["algo"], case.args["env"], case.args["scale"], rounds)[1]
        times = []
        if refs is not None:
            times, reference = interleaved_trainer(w, refs, kw)
        if not times:  # no reference, or brax failed before its second epoch
            times = time_workload(w, rounds, warmup)
    else:
        try:
            ref = prepare_reference(case, refs, w)
        except Exception as e:  # a broken reference is reported, not fatal
            ref, reference = None, {"error": f"{type(e).__name__}: {e}"}
        if ref is None:
            times = time_workload(w, rounds, warmup)
        else:
            times, ref_times = time_pair(w, ref, rounds, warmup)
            reference = record_of(ref, ref_times, peak)
    return {"id": case.id, **with_reference(record_of(w, times, peak), reference)}


def brax_reference(refs: ModuleType, kw: dict[str, Any]) -> Record:
    """brax's own trainer run by the references module; an error becomes a record."""
    try:
        return refs.brax_trainer(**kw)
    except Exception as e:  # brax's trainers are a third party: report, do not crash
        return {"name": f"brax-{kw['algo']}", "error": f"{type(e).__name__}: {e}"}


def run(
    cases_: list[Case],
    refs: ModuleType | None,
    rounds: int,
    warmup: int,
    say: Callable[[str], None] = print,
    budget_s: float | None = None,
    on_record: Callable[[list[Record]], None] | None = None,
) -> list[Record]:
    """Measure every case in order, saying each one's headline as it finishes.

    Cases that would start after ``budget_s`` seconds are recorded as skipped;
    ``on_record(records so far)`` is called after each case (to save partial results).
    """
    records: list[Record] = []
    start = time.perf_counter()
    for case in cases_:
        t0 = time.perf_counter()
        if budget_s is not None and t0 - start > budget_s:
            rec = {"id": case.id, "kind": case.kind, **case.args}
            rec["skipped"] = f"time budget of {budget_s:.0f}s spent"
        else:
            try:
                rec = measure(case, refs, rounds, warmup)
            except Exception as e:  # report the case as failed and go on with the rest
                rec = {"id": case.id, "kind": case.kind, **case.args}
                rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        records.append(rec)
        say(f"{row(rec)}  [{time.perf_counter() - t0:.0f}s]")
        if on_record is not None:
            on_record(records)
    return records
