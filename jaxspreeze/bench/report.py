"""Turn benchmark records into a printed table, ``bench.json`` and ``bench.md``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from jaxspreeze.bench.record import Record, headline

UNITS = {
    "env_steps_per_s": "env steps/s",
    "update_samples_per_s": "samples/s",
    "wall_to_threshold_s": "s to threshold",
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
    if rec.get("kind") == "end_to_end":
        if rec.get("reached"):
            notes.append(f"{rec['env_steps_to_threshold']:,} env steps")
        else:
            notes.append(f"not reached: final return {_num(rec.get('final_return'))}")
        notes.append(f"{_num(rec.get('env_steps_per_s'))} env steps/s")
    ref = rec.get("reference") or {}
    if rec.get("kind") == "trainer" and ref.get("env_steps_per_s"):
        notes.append("brax: its last epoch's training/sps (compile and eval excluded)")
    if ref.get("error"):
        notes.append(f"reference failed: {ref['error'][:80]}")
    if rec.get("error"):
        notes.append(f"failed: {rec['error'][:120]}")
    if rec.get("skipped"):
        notes.append(f"skipped: {rec['skipped']}")
    return "; ".join(notes)


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
        "rows (tests/benchmarks/references.py).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in report["records"]]
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``bench.json`` and ``bench.md`` into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "bench.json", out / "bench.md"
    js.write_text(json.dumps(report, indent=2, default=str))
    md.write_text(markdown(report))
    return js, md
