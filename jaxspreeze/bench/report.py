"""Turn benchmark records into a printed table, ``bench.json`` and ``bench.md``.

Learning records (autotuned vs default, :mod:`.learning`) also get a side-by-side table
in ``bench.md`` and their autotune figure, ``autotune-<task>.png``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from jaxspreeze.autotune.report import plot as plot_profile
from jaxspreeze.bench.record import Record, headline

UNITS = {
    "env_steps_per_s": "env steps/s",
    "update_samples_per_s": "samples/s",
    "wall_to_threshold_s": "s to threshold",
    "wall_s": "s wall",
}
COLUMNS = ("case", "jaxspreeze", "reference", "ratio", "unit", "compile s", "notes")


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, float) and abs(x) < 100:
        return f"{x:.{digits}g}"
    return f"{x:,.0f}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _notes(rec: Record) -> str:
    notes = []
    if rec.get("fraction_of_matmul_peak"):
        notes.append(f"{rec['fraction_of_matmul_peak']:.2f} of matmul peak")
    if rec.get("flops_per_sample"):
        notes.append(f"{rec['flops_per_sample'] / 1e6:.2f} MFLOP/sample")
    if rec.get("kind") in ("chunk", "trainer") and rec.get("update_samples_per_s"):
        notes.append(f"{rec['update_samples_per_s']:,.0f} samples/s")
        notes.append(f"replay ratio {_num(rec.get('replay_ratio'))}")
    if rec.get("kind") == "learning" and not rec.get("error") and not rec.get("skipped"):
        ref = rec.get("reference") or {}
        notes.append(f"autotuned {_sizes(rec)} vs default {_sizes(ref)}")
        notes.append(
            f"final return {_num(rec.get('final_return'))} vs {_num(ref.get('final_return'))}"
        )
        notes.append(f"seeds reached {rec.get('reached')} vs {ref.get('reached')}")
    elif rec.get("kind") == "cold" and rec.get("cpu_s") is not None:
        notes.append(f"cpu {_num(rec['cpu_s'])} s")
        if rec.get("compile_all_s") is not None:
            notes.append(f"compiling {_num(rec['compile_all_s'])} s")
            notes.append(f"first chunk at {_num(rec.get('command_to_first_chunk_s'))} s")
        notes.append(f"load {rec.get('load_1min', 0):.1f}")
    elif rec.get("kind") == "end_to_end":
        if rec.get("reached"):
            notes.append(f"{rec['env_steps_to_threshold']:,} env steps")
        else:
            notes.append(f"not reached: final return {_num(rec.get('final_return'))}")
        notes.append(f"{_num(rec.get('env_steps_per_s'))} env steps/s")
    elif rec.get("kind") == "suite" and rec.get("references"):
        notes += _suite_notes(rec)
    ref = rec.get("reference") or {}
    if rec.get("kind") == "memory" and rec.get("ratio_vs_reference"):
        cost = 1.0 / rec["ratio_vs_reference"]
        notes.append(f"{rec.get('memory')}: {cost:.2f}x feed-forward's wall per env step")
    if rec.get("kind") == "trainer" and ref.get("env_steps_per_s"):
        flags = ref.get("brax_epoch_compiled") or []
        n, c = flags.count(False), flags.count(True)
        notes.append(
            f"brax: median training/sps of its {n} epochs that compiled nothing ({c} did), "
            "each followed by a jaxspreeze chunk of the same env steps (compile and eval "
            "excluded on both)"
        )
    if ref.get("error"):
        notes.append(f"reference failed: {ref['error'][:80]}")
    if rec.get("error"):
        notes.append(f"failed: {rec['error'][:120]}")
    if rec.get("skipped"):
        notes.append(f"skipped: {rec['skipped']}")
    return "; ".join(notes)


def _suite_notes(rec: Record) -> list[str]:
    """A suite row's notes: its reference, the ratios per CPU second, the other
    references' ratios (the no-reset upper bound last) and the load."""
    refs, ratios = rec["references"], rec.get("ratios") or {}
    own, notes = refs.get("own") or {}, []
    notes.append(f"reference: {own.get('practice', '?')}")
    if "own" in ratios:
        notes.append(
            f"per CPU s {_num(rec.get('env_steps_per_cpu_s'))} vs "
            f"{_num(own.get('env_steps_per_cpu_s'))} ({_ratio(ratios['own']['cpu'])})"
        )
    for variant, ref in refs.items():
        if variant == "own":
            continue
        label = "upper bound, no reset" if variant == "bound" else ref.get("practice", variant)
        if variant in ratios:
            r = ratios[variant]
            notes.append(f"{label}: {_ratio(r['wall'])} wall, {_ratio(r['cpu'])} per CPU s")
        elif ref.get("error"):
            notes.append(f"{label} failed: {ref['error'][:80]}")
    load = rec.get("load_1min") or []
    if load:
        notes.append(f"load {'-'.join(f'{x:.1f}' for x in load)}")
    return notes


def _sizes(rec: Record) -> str:
    return f"n{rec.get('num_envs')}/B{rec.get('batch_size')}/G{rec.get('grad_steps')}"


def _seconds(values: list[float | None]) -> str:
    return ", ".join(_num(v) for v in values)


def _returns(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


LEARNING_COLUMNS = (
    "task",
    "threshold",
    "config",
    "num_envs / batch / G / K",
    "grad steps per env step",
    "s to threshold (median; per seed)",
    "at median chunk speed",
    "env steps to threshold (per seed)",
    "final return (mean ± std; per seed)",
    "env steps/s",
    "compile s",
)


def learning_rows(rec: Record) -> list[list[str]]:
    """The two rows (default, autotuned) of one learning record."""
    rows = []
    for label, r in (("default", rec.get("reference") or {}), ("autotuned", rec)):
        steps = r.get("env_steps_to_threshold_per_seed") or []
        rows.append(
            [
                rec.get("task", "?"),
                _num(rec.get("threshold")),
                label,
                f"{r.get('num_envs')} / {r.get('batch_size')} / {r.get('grad_steps')} / "
                f"{r.get('chunk_iterations')}",
                _num(r.get("grad_steps_per_env_step")),
                f"{_num(r.get('wall_to_threshold_s'))} "
                f"({_seconds(r.get('wall_to_threshold_s_per_seed') or [])})",
                _num(r.get("steady_to_threshold_s")),
                ", ".join("-" if v is None else f"{v:,}" for v in steps),
                f"{_num(r.get('final_return'))} ± {_num(r.get('final_return_std'))} "
                f"({_returns(r.get('final_return_per_seed') or [])})",
                _num(r.get("env_steps_per_s")),
                _num(r.get("compile_s"), 2),
            ]
        )
    return rows


def learning_markdown(records: list[Record]) -> list[str]:
    """The side-by-side table of the learning records (empty when there are none)."""
    recs = [r for r in records if r.get("kind") == "learning" and r.get("reference")]
    if not recs:
        return []
    lines = [
        "",
        "## Autotuned vs default: time to the threshold and final return",
        "",
        "Same env-step budget; seeds trained together (vmapped) per config; the two configs "
        "run interleaved chunk by chunk, each chunk about `eval_every` env steps and followed "
        "by an untimed evaluation (jaxspreeze/bench/learning.py). Time = warm-up + chunks "
        "until a seed's evaluation return first reaches the threshold (`-`: not reached); "
        "compile time and the autotune probe are apart (a second compile of the same program "
        "comes from the persistent compilation cache). 'At median chunk speed': warm-up + "
        "env steps to the threshold x the run's median seconds per env step over its chunks "
        "(load spikes on a shared machine removed). Where autotune kept the default sizes "
        "(same config) both runs compute the same thing and differ only by the machine's "
        "noise.",
        "",
        *_markdown_table(LEARNING_COLUMNS, [row for rec in recs for row in learning_rows(rec)]),
    ]
    lines += [
        "",
        "| task | autotune probe s | same config | sooner (speedup) | sooner at median speed "
        "(speedup) | final return ok |",
        "|---|---|---|---|---|---|",
    ]
    for rec in recs:
        v, a = rec.get("verdict") or {}, rec.get("autotune") or {}
        if v.get("same_config"):  # an A/A run: the difference is the machine's noise
            sooner = f"- (same config: {_ratio(v.get('speedup'))})"
            steady = f"- (same config: {_ratio(v.get('steady_speedup'))})"
        else:
            sooner = f"{v.get('sooner')} ({_ratio(v.get('speedup'))})"
            steady = f"{v.get('steady_sooner')} ({_ratio(v.get('steady_speedup'))})"
        lines.append(
            f"| {rec.get('task')} | {_num(a.get('probe_s'))} | {v.get('same_config')} | "
            f"{sooner} | {steady} | {v.get('final_ok')} |"
        )
    return lines


def cells(rec: Record) -> list[str]:
    """The table cells of one record (see ``COLUMNS``)."""
    key, ours = headline(rec)
    ref = rec.get("reference") or {}
    return [
        rec.get("id") or rec.get("name", "?"),
        _num(ours),
        _num(ref.get(key)),
        _ratio(rec.get("ratio_vs_reference")),
        UNITS[key],
        _num(rec.get("compile_s"), 2),
        _notes(rec),
    ]


def row(rec: Record) -> str:
    """One line for the console as a case finishes."""
    c = cells(rec)
    ratio = f" ratio {c[3]}" if c[3] != "-" else ""
    return f"{c[0]:<48} {c[1]:>14} {c[4]}{ratio}  {c[6]}"


def table(records: list[Record]) -> str:
    """A fixed-width text table of all records."""
    rows = [list(COLUMNS)] + [cells(r) for r in records]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for r in rows:
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1]
        )
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    """``bench.md``: how it was run, on what, and the table with jaxspreeze / reference."""
    hw = report["hardware"]
    lines = [
        f"# jaxspreeze bench ({report['selection']})",
        "",
        f"- command: `{report['command']}`",
        f"- date (start): {report['date']}",
        f"- hardware: {hw.get('backend')} x{hw.get('device_count')} "
        f"({', '.join(sorted(set(hw.get('devices', []))))}), cpu {hw.get('cpu')} "
        f"x{hw.get('cpu_count')} cores",
        f"- dense float32 matmul, best measured: {report['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s "
        "(each update row is judged against a fresh measurement taken just before it)",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
        f"- rounds: {report['rounds']} timed after {report['warmup']} warm-up; rate = work / median "
        "seconds per call; compile time is reported apart, never in a rate",
    ]
    if report.get("note"):
        lines.append(f"- note: {report['note']}")
    lines += [
        "",
        "ratio = jaxspreeze / reference (> 1: jaxspreeze is faster). References: a hand-fused "
        "`jit(lax.scan(vmap(env.step) + policy MLP))` for sampling, a minimal flax/optax SAC "
        "update for updates, brax's own `brax.training.agents.sac`/`ppo` trainers for trainer "
        "rows (jaxspreeze/bench/references.py); the default config for learning rows "
        "(time to threshold: > 1, the autotuned run got there sooner); feed-forward PPO's "
        "chunk at the same sizes for memory rows (recurrent PPO: its cost is 1 / ratio); for "
        "suite rows (a JAX suite's env stepping: a jitted scan of random legal actions, "
        "jaxspreeze's adapter as the fused chunk steps it), the suite's own vmapped scan "
        "with its own reset practice, the ratio per CPU second and against the bare "
        "transition without resets (the upper bound) in the notes.",
        "",
        *_markdown_table(COLUMNS, [cells(r) for r in report["records"]]),
    ]
    lines += learning_markdown(report["records"])
    return "\n".join(lines) + "\n"


def _markdown_table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines: the header, its rule, one line per row of cells."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def write(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``bench.json``, ``bench.md`` and each learning record's figure into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "bench.json", out / "bench.md"
    js.write_text(json.dumps(report, indent=2, default=str))
    md.write_text(markdown(report))
    for rec in report["records"]:
        profile = rec.get("profile")
        png = out / f"autotune-{rec.get('task')}.png"
        if rec.get("kind") == "learning" and profile and not png.exists():
            plot_profile(profile, png)
    return js, md
