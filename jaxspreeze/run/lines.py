"""The run's console lines: the header, the start, a resume, the failures, the end.

Plain formatters (strings in, strings out); the trainer decides whether to print them.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax

from jaxspreeze.algos.spec import RUN_SIZES, defaults_on
from jaxspreeze.core.types import Record
from jaxspreeze.setup import memory
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan
from jaxspreeze.sinks import console as progress
from jaxspreeze.store import rundir
from jaxspreeze.store.resume import ResumePoint

COLUMNS = progress.COLUMNS  # the progress lines' legend, printed once before them


def header(planned: RunPlan, estimate: dict[str, int]) -> str:
    """The first console line of a run (``estimate``: the memory estimate,
    :func:`jaxspreeze.setup.memory.estimate_memory`): what it counts is said, the device's
    buffers (replay, parameters and optimiser states, envs, a rollout, a batch), not XLA's
    temporaries, the compile or the host's memory."""
    cfg, placement = planned.cfg, planned.placement
    assert placement is not None
    total = estimate.get("total")
    if not isinstance(total, (int, float)):  # (an estimate without its total: the sum)
        total = sum(v for k, v in estimate.items() if isinstance(v, (int, float)))
    each = " per device" if placement.data_parallel else ""  # one shard's share
    buffer = memory.buffer_nbytes(planned) // placement.data_devices
    return (
        f"jaxspreeze: {cfg.algo} on {cfg.env} | {agents(cfg)} x {cfg.num_envs} envs | "
        f"{placement.describe()} | device buffers ~{total / 2**20:.1f} MiB{each} (replay "
        f"buffer {buffer / 2**20:.1f} MiB; not counted: XLA's temporaries, compiling, host "
        "memory)"
    )


def agents(cfg: RunConfig) -> str:
    """``2 seed(s)``, or a population's ``4 members x 2 seed(s)``."""
    seeds = f"{cfg.num_seeds} seed(s)"
    return f"{cfg.members} members x {seeds}" if cfg.population else seeds


def start_line(run_dir: Path, resumed: bool) -> str:
    """What stopping during the start leaves, in one line."""
    if resumed:
        return (
            f"the resumed run had not started; {run_dir} is unchanged: resume it "
            f"again with --resume {run_dir}"
        )
    return (
        f"the run had not started; {run_dir} is marked {rundir.NOT_STARTED} (no "
        "checkpoint): start it again with the same --run-name"
    )


def resumed(point: ResumePoint) -> list[str]:
    """The console lines of a resumed run: damaged checkpoints skipped, what changed."""
    lines = [
        f"  checkpoint {path} is damaged ({why}); set aside as damaged-{path.name}"
        for path, why in point.damaged
    ]
    lines.append(f"  resumed from {point.checkpoint} at {point.env_steps:,} env steps")
    if point.applied:
        listing = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in point.applied.items())
        lines.append(f"  changed since the checkpoint (applied from the first update): {listing}")
    if point.unused:
        listing = ", ".join(
            f"{k} {point.changes[k][0]!r} -> {point.changes[k][1]!r}" for k in point.unused
        )
        lines.append(f"  changed but not used by this run ({point.saved.algo}): {listing}")
    return lines


def host_env_note(latest: Path | None, run_dir: Path) -> str:
    """What a host env's failure leaves: the newest checkpoint (or none) and how to go on."""
    if latest is None:
        return "no checkpoint was written before it (set --checkpoint-every to keep one)"
    return (
        f"the last checkpoint, {latest}, is kept: once the env is fixed, resume it with "
        f"jaxspreeze train --resume {run_dir}"
    )


def ready_line(n_chunks: int, k: int) -> str:
    """The line once the run has compiled and warmed up (or restored): what it will run.

    No time on it: the run's compile time and wall time are each given once, at the end
    (:func:`compile_line`, :func:`last_line`), as ``summary.json`` holds them.
    """
    return f"  compiled: {n_chunks} chunks x {k} iterations to run"


def working_text(resumed: bool) -> str:
    """What the live line says while the start compiles (or loads the kept programs)."""
    return f"compiling, then {'restoring the checkpoint' if resumed else 'warming up'}"


def compile_line(summary: Record) -> str:
    """The console's one compile figure (``compile_all_s``: every trace, lowering and
    compile of the run) and when the first chunk was dispatched."""
    loaded = len(summary.get("programs_loaded") or ())
    kept = f"; {loaded} programs loaded from the program cache" if loaded else ""
    compiled = summary.get("compile_all_s") or 0
    line = f"  compiling {compiled:.1f}s in all{kept} (every program: see summary.json)"
    from_command = summary.get("wall_counted_from") == "command"
    first = summary.get("command_to_first_chunk_s" if from_command else "first_chunk_dispatched_s")
    if first is None:
        return line
    since = "the command started" if from_command else "train() was called"
    return f"{line}; first chunk dispatched {first:.1f}s after {since}"


def wall_text(summary: Record) -> str:
    """The console's one wall figure (``command_wall_s``)."""
    return f"wall {summary['command_wall_s']:.1f}s"


def last_line(cfg: RunConfig, summary: Record, stopped: str | None = None) -> str:
    """The last console line: the final evaluation, the rates (env steps/s; the update
    rate, ``update_samples_per_s``, said as what it is) and the wall time; a stopped
    run's line (``stopped``: why, and how to go on) with its wall time."""
    if stopped is not None:
        return f"{stopped} ({wall_text(summary)})"
    ret, se = summary["final_eval_return"], summary.get("final_eval_return_se")
    value = "n/a" if ret is None else f"{ret:.1f}" + (f" ± {se:.1f} s.e." if se is not None else "")
    updates = summary.get("update_samples_per_s")
    learned = (
        f", {updates:,.0f} samples/s learned from (batch x gradient steps)"
        if isinstance(updates, (int, float)) and updates > 0
        else ""
    )
    return (
        f"final eval return: {value} (mean over {agents(cfg)}, {cfg.eval_episodes} episodes "
        f"each, fresh starts) | {summary['env_steps_per_s']:,.0f} env steps/s{learned} | "
        f"{wall_text(summary)}"
    )


def end_lines(cfg: RunConfig, summary: Record, run_dir: Path, stopped: str | None) -> list[str]:
    """A finished run's last console lines: the compile time, the run directory, then
    :func:`last_line`."""
    lines = [compile_line(summary), f"run directory: {run_dir}", last_line(cfg, summary, stopped)]
    best = summary.get("best_member")
    if best is not None:  # a population: its best member, by final return
        row = summary["members"][best]
        values = ", ".join(f"{k}={v:g}" for k, v in row["values"].items())
        final = row["final_return"]
        lines.append(
            f"best member: {best} ({values}), final return "
            f"{'n/a' if final is None else f'{final:.1f}'} | {run_dir / row['policy']}"
        )
    return lines


# a budget under 1/3 of the recipe's default earns a warning (1/10 on-policy: PPO's 200k
# default is sized for harder envs than CartPole, which learns in 30k)
BUDGET_FRACTION = {False: 3, True: 10}


def start_warnings(planned: RunPlan, iterations_per_chunk: int) -> list[str]:
    """What a run's choices will make of it, worth a line on stderr before it compiles: a
    budget far below the one its algorithm's other defaults are sized for (when they are
    all left at the defaults: under a third of the default ``total_steps``, a tenth
    on-policy), and a PBT interval the run never reaches (no copy would ever be made)."""
    cfg, out = planned.cfg, []
    defaults = defaults_on(planned.algo_spec, jax.default_backend())
    recipe = defaults.get("total_steps")
    fraction = BUDGET_FRACTION[planned.on_policy]
    # the recipe: every other run-level size left at the algorithm's default (a run that
    # sets its own sizes has its own recipe)
    own = [n for n in RUN_SIZES if n != "total_steps" and getattr(cfg, n) != defaults.get(n)]
    if recipe and not own and cfg.total_steps * fraction < recipe:
        share = "a third" if fraction == 3 else f"1/{fraction}"
        out.append(
            f"--total-steps {cfg.total_steps:,} is under {share} of {cfg.algo}'s default "
            f"budget ({recipe:,} env steps per seed), which its other defaults (envs, batch, "
            f"updates per step, learning starts) are sized for: it may learn little; raise "
            f"--total-steps (or leave it unset for {recipe:,})"
        )
    if cfg.pbt and cfg.population:
        chunk = iterations_per_chunk * planned.steps_per_iteration
        every = cfg.pbt_interval or 10 * chunk
        warm = planned.warmup_steps
        chunks = math.ceil(math.ceil(max(cfg.total_steps - warm, 0) / planned.steps_per_iteration)
                           / iterations_per_chunk)  # fmt: skip
        end = warm + chunks * chunk
        if end // every == warm // every:
            given = (
                f"--pbt-interval {every:,}"
                if cfg.pbt_interval
                else f"--pbt-interval 0 (ten chunks: {every:,} env steps)"
            )
            out.append(
                f"{given} is longer than the run ({end:,} env steps per seed): PBT will "
                f"copy no member; set --pbt-interval to a multiple of {chunk:,} (one chunk) "
                f"of at most {end - warm:,}, or raise --total-steps"
            )
    return out
