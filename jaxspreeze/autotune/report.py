"""The autotune report: the measurements and the choice as a Markdown table and a figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _load(profile: dict[str, Any]) -> str:
    value = (profile.get("load_average") or {}).get("before")
    return "unknown" if value is None else f"{value:.1f}"


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}s"


def describe_workers(w: int) -> str:
    """``"1 worker"``, ``"2 workers"``."""
    return f"{w} worker{'s' if w != 1 else ''}"


def table(profile: dict[str, Any]) -> str:
    """The measurements and the choice as a Markdown table (also printed).

    A host-env profile's table has the workers x envs of its sampling points, both sides'
    rates of the choice and the check of the choice.
    """
    host = bool(profile.get("host"))
    hw = profile["hardware"]
    placement = profile["placement"]
    where = f"host env, sampling workers; learner on {placement}" if host else placement
    lines = [
        f"### autotune: {profile['algo']} on {profile['env']} ({where})",
        "",
        f"hardware: {hw.get('backend')} {hw.get('devices')}, {hw.get('cpu_count')} CPUs | "
        f"probe {profile['elapsed_s']:.1f}s of a {profile['budget_s']:g}s budget | load "
        f"average {_load(profile)}",
        "",
        "| probe | size | rate | s per gradient step | compile s | reps | est. MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *_point_rows(profile, "sampling"),
        *_point_rows(profile, "update"),
        "",
        *_choice_lines(profile["choice"], host),
    ]
    lines += _host_lines(profile) if host else _device_lines(profile["choice"])
    return "\n".join(lines)


def _point_rows(profile: dict[str, Any], kind: str) -> list[str]:
    """The measured points of one grid as table rows (the chosen one marked), and its stop."""
    c = profile["choice"]
    rows = []
    for p in profile[kind]["points"]:
        v = p["value"]
        if kind == "update":
            size, chosen, unit = f"batch {v}", v == c["batch_size"], "update samples/s"
            step = f" {v / p['rate'] * 1e3:.3f} ms "
        elif profile.get("host"):
            w = p["workers"]
            size, unit, step = f"num_envs {v} ({_workers(w, v)})", "env steps/s", " "
            chosen = (v, w) == (c["num_envs"], c["host_workers"])
        else:
            size, chosen, unit, step = f"num_envs {v}", v == c["num_envs"], "env steps/s", "  "
        mark = " **(chosen)**" if chosen else ""
        rows.append(
            f"| {kind} | {size}{mark} | {p['rate']:,.0f} {unit} |{step}| {p['compile_s']:.1f} | "
            f"{len(p['rates'])} | {p['bytes_est'] / 2**20:.1f} |"
        )
    rows.append(f"| {kind} | stopped: {profile[kind]['stop']} | | | | | |")
    return rows


def _choice_lines(c: dict[str, Any], host: bool) -> list[str]:
    """The chosen sizes beside the configured ones, and the ratios kept."""
    base = c["base"]
    pinned = set(c["pinned"])
    sizes = [*(["host_workers"] if host else []), "num_envs", "batch_size", "grad_steps"]
    chosen = [
        f"{k} {c[k]}{' (pinned)' if k in pinned else ''}" for k in (*sizes, "chunk_iterations")
    ]
    configured = ", ".join(f"{k} {base[k]}" for k in sizes)
    replay = f"replay ratio {c['replay_ratio']:.4g} update samples per env step; " if host else ""
    return [
        f"choice: {', '.join(chosen)} (configured: {configured})",
        f"gradient steps per env step {c['grad_steps_per_env_step']:.4g} (kept: "
        f"{c['update_ratio_target']:.4g}); {replay}largest free batch {c['free_batch']} (step "
        f"time within {c['batch_tolerance']:.0%} of batch {base['batch_size']}'s)",
    ]


def _device_lines(c: dict[str, Any]) -> list[str]:
    """The device choice's predicted rates and wall time, and the per-axis knees."""
    pred = c["predicted"]
    return [
        f"predicted: {pred['env_steps_per_s']:,.0f} env steps/s, "
        f"{pred['update_samples_per_s']:,.0f} update samples/s, {pred['chunk_s']:.2f}s per "
        f"chunk, {_seconds(pred['wall_s'])} for the budget (configured sizes: "
        f"{_seconds(pred['base_wall_s'])})",
        f"(per-axis knees: sampling saturates at num_envs {c['sampling_knee']}, "
        f"updates at batch {c['update_knee']})",
    ]


def _host_lines(profile: dict[str, Any]) -> list[str]:
    """The host choice's two sides and the side that bounds it, and the check of it."""
    c = profile["choice"]
    pred = c["predicted"]
    lines = [
        f"predicted: {pred['env_steps_per_s']:,.0f} env steps/s = min(sampling "
        f"{pred['sampling_env_steps_per_s']:,.0f}, learner {pred['learner_env_steps_per_s']:,.0f}"
        f" at the replay ratio): bound by the {c['bound']}; {pred['update_samples_per_s']:,.0f} "
        f"update samples/s, {pred['chunk_s']:.2f}s per chunk, {_seconds(pred['wall_s'])} for "
        f"the budget (configured sizes: {_seconds(pred['base_wall_s'])})",
        "(the sampling rates were measured with the learner idle; where the workers and the "
        "learner share the CPU cores, the run samples slower)",
    ]
    check = profile.get("check") or {}
    if check.get("done"):
        lines.append(
            f"check: a {check['seconds']:.1f}s run of the host schedule at the choice went at "
            f"{check['env_steps_per_s']:,.0f} env steps/s, {check['ratio']:.2f}x the predicted "
            f"(its compile {check['compile_s']:.1f}s apart)"
        )
    elif check:
        lines.append(f"check (a short run at the choice): not run, {check.get('why_not')}")
    return lines


def _workers(w: int, n: int) -> str:
    return f"{describe_workers(w)} x {n // max(w, 1)}"


def plot(profile: dict[str, Any], path: Path) -> None:
    """The measured rates, the predicted wall time per (num_envs, batch) with the chosen
    point, and the learning comparison (eval return vs wall time) when it was run."""
    # matplotlib is heavy: imported only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = profile["choice"]
    learning = profile.get("learning")
    if learning:
        fig, grid = plt.subplots(2, 2, figsize=(13, 9))
        axes = list(grid.flat)
    else:
        fig, row = plt.subplots(1, 3, figsize=(16, 4.4))
        axes = list(row)
    if profile.get("host"):
        _host_sampling_panel(axes[0], profile)
        _update_panel(axes[1], profile)
        _host_rate_panel(axes[2], profile)
    else:
        _sampling_panel(axes[0], profile)
        _update_panel(axes[1], profile)
        _wall_panel(axes[2], profile, plt.get_cmap("viridis"))
    if learning:
        _learning_panel(axes[3], learning)
    base = c["base"]
    workers = (
        f"workers {base['host_workers']} -> {c['host_workers']}, " if profile.get("host") else ""
    )
    fig.suptitle(
        f"autotune {profile['algo']} on {profile['env']} ({profile['hardware'].get('backend')}, "
        f"load {_load(profile)}): {workers}num_envs {base['num_envs']} -> {c['num_envs']}, batch "
        f"{base['batch_size']} -> {c['batch_size']}, G {base['grad_steps']} -> "
        f"{c['grad_steps']}, K {c['chunk_iterations']}; "
        f"{c['grad_steps_per_env_step']:.3g} gradient steps per env step (kept)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _mark(ax: Any, x: float, y: float, chosen: bool, base: bool) -> None:
    """The chosen point (red star) and the configured one (open square, drawn over it)."""
    if chosen:
        ax.plot(x, y, "*", ms=18, color="C3", label="chosen", zorder=5)
    if base:
        ax.plot(x, y, "s", ms=14, mfc="none", mew=1.5, color="k", label="configured", zorder=6)


def _mark_points(ax: Any, pts: list[dict[str, Any]], ys: list[float], chosen: int, base: int):
    for p, y in zip(pts, ys, strict=True):
        _mark(ax, p["value"], y, p["value"] == chosen, p["value"] == base)


def _finish(ax: Any, ys: list[float], xlabel: str, ylabel: str, title: str) -> None:
    """A panel's log-2 x axis, y axis scaled to ``ys``, labels, title and grid."""
    ax.set_xscale("log", base=2)
    _scale_y(ax, ys)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")


def _scale_y(ax: Any, values: list[float]) -> None:
    """Log y where the values span more than 10x; linear (with its plain ticks) otherwise."""
    values = [v for v in values if v and v > 0]
    if values and max(values) > 10 * min(values):
        ax.set_yscale("log")


def _sampling_panel(ax: Any, profile: dict[str, Any]) -> None:
    c = profile["choice"]
    pts = profile["sampling"]["points"]
    rates = [p["rate"] for p in pts]
    ax.plot([p["value"] for p in pts], rates, "o-", color="C0", label="median")
    for p in pts:
        ax.plot([p["value"]] * len(p["rates"]), p["rates"], ".", color="C0", alpha=0.3)
    _mark_points(ax, pts, rates, c["num_envs"], c["base"]["num_envs"])
    _finish(
        ax,
        [r for p in pts for r in p["rates"]],
        "num_envs",
        "env steps/s (policy in the loop)",
        f"sampling (stopped: {profile['sampling']['stop']})",
    )
    ax.legend(loc="lower right", fontsize=8)


def _host_sampling_panel(ax: Any, profile: dict[str, Any]) -> None:
    """Env steps/s of the worker pool over num_envs, one line per worker count."""
    c = profile["choice"]
    pts = profile["sampling"]["points"]
    everything = []
    for i, w in enumerate(sorted({p["workers"] for p in pts})):
        row = sorted((p for p in pts if p["workers"] == w), key=lambda p: p["value"])
        xs, ys = [p["value"] for p in row], [p["rate"] for p in row]
        ax.plot(xs, ys, "o-", color=f"C{i}", label=describe_workers(w))
        for p in row:
            ax.plot([p["value"]] * len(p["rates"]), p["rates"], ".", color=f"C{i}", alpha=0.3)
            everything += p["rates"]
            pick = (p["value"], w) == (c["num_envs"], c["host_workers"])
            base = (p["value"], w) == (c["base"]["num_envs"], c["base"]["host_workers"])
            _mark(ax, p["value"], p["rate"], pick, base)
    learner = c["predicted"]["learner_env_steps_per_s"]
    ax.axhline(learner, ls="--", color="gray", lw=1, label=f"learner at batch {c['batch_size']}")
    _finish(
        ax,
        [*everything, learner],
        "num_envs (all workers)",
        "env steps/s (worker pool, policy in the loop)",
        "host sampling",
    )
    _legend(ax, fontsize=8)


def _host_rate_panel(ax: Any, profile: dict[str, Any]) -> None:
    """Predicted env steps/s of the run, min(sampling, learner), per workers x num_envs."""
    c = profile["choice"]
    cands = [x for x in c["candidates"] if x["batch_size"] == c["batch_size"]]
    for i, w in enumerate(sorted({x["host_workers"] for x in cands})):
        row = [x for x in cands if x["host_workers"] == w]
        ax.plot(
            [x["num_envs"] for x in row],
            [x["env_steps_per_s"] for x in row],
            "o-",
            color=f"C{i}",
            label=describe_workers(w),
        )
    _mark(ax, c["num_envs"], c["predicted"]["env_steps_per_s"], True, False)
    _finish(
        ax,
        [x["env_steps_per_s"] for x in cands],
        "num_envs (all workers)",
        "predicted env steps/s of the run",
        f"the run: min(sampling, learner), batch {c['batch_size']}",
    )
    _legend(ax, fontsize=8)


def _legend(ax: Any, **kw: Any) -> None:
    """A legend without repeated labels (the chosen/configured marks recur)."""
    handles, labels = ax.get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, label in zip(handles, labels, strict=True):
        seen.setdefault(label, h)
    ax.legend(list(seen.values()), list(seen), **kw)


def _update_panel(ax: Any, profile: dict[str, Any]) -> None:
    c = profile["choice"]
    pts = profile["update"]["points"]
    ms = [p["value"] / p["rate"] * 1e3 for p in pts]
    ax.plot([p["value"] for p in pts], ms, "o-", color="C1", label="median")
    for p in pts:
        spread = [p["value"] / r * 1e3 for r in p["rates"]]
        ax.plot([p["value"]] * len(spread), spread, ".", color="C1", alpha=0.3)
    limit = (1 + c["batch_tolerance"]) * c["base_step_s"] * 1e3
    ax.axhline(limit, ls="--", color="gray", lw=1, label=f"free: +{c['batch_tolerance']:.0%}")
    _mark_points(ax, pts, ms, c["batch_size"], c["base"]["batch_size"])
    _finish(
        ax,
        [*ms, limit],
        "batch size",
        "ms per gradient step (critic + actor)",
        f"update (stopped: {profile['update']['stop']})",
    )
    ax.legend(loc="upper left", fontsize=8)


def _wall_panel(ax: Any, profile: dict[str, Any], cmap: Any) -> None:
    c = profile["choice"]
    cands = c["candidates"]
    batches = sorted({x["batch_size"] for x in cands})
    for i, b in enumerate(batches):
        row = [x for x in cands if x["batch_size"] == b]
        color = cmap(i / max(len(batches) - 1, 1))
        ok = all(x["eligible"] for x in row)
        ax.plot(
            [x["num_envs"] for x in row],
            [x["wall_s"] for x in row],
            "o-" if ok else "o:",
            ms=3,
            color=color,
            alpha=1.0 if any(x["eligible"] for x in row) else 0.35,
            label=f"B={b}" + ("" if any(x["eligible"] for x in row) else " (not free)"),
        )
    pick = c["predicted"]["wall_s"]
    _mark(ax, c["num_envs"], pick, True, False)
    if c["predicted"].get("base_wall_s"):
        _mark(ax, c["base"]["num_envs"], c["predicted"]["base_wall_s"], False, True)
    row = [x for x in cands if x["eligible"] and x["batch_size"] == c["batch_size"]]
    best = min((x["wall_s"] for x in row), default=pick)
    ax.axhline((1 + c["tolerance"]) * best, ls="--", color="gray", lw=1, label="fastest + tol")
    _finish(
        ax,
        [x["wall_s"] for x in cands],
        "num_envs",
        "predicted wall time for the budget (s)",
        f"G = {c['update_ratio_target']:.3g} x n x T gradient steps per iteration",
    )
    ax.legend(fontsize=7, ncol=2)


def _learning_panel(ax: Any, learning: dict[str, Any]) -> None:
    colors = {"default": "C0", "autotuned": "C3"}
    for label, run in learning["runs"].items():
        curve = run["curve"]
        if not curve:
            continue
        t = [p["wall_s"] for p in curve]
        ret = np.array([p["return_per_seed"] for p in curve])
        for i in range(ret.shape[1]):
            ax.plot(t, ret[:, i], "-", lw=0.8, alpha=0.35, color=colors.get(label, "C2"))
        sizes = f"n{run['num_envs']}/B{run['batch_size']}/G{run['grad_steps']}"
        reach = run["wall_to_threshold_s"]
        when = "not reached" if reach is None else f"{reach:.0f}s to threshold"
        ax.plot(
            t, ret.mean(axis=1), "-", lw=2, color=colors.get(label, "C2"),
            label=f"{label} {sizes}: {when} (median of seeds)",
        )  # fmt: skip
    ax.axhline(learning["threshold"], ls="--", color="gray", lw=1, label="threshold")
    ax.set_xlabel("training wall time (s; warm-up + chunks, compile and eval apart)")
    ax.set_ylabel("eval return (thin: seeds, thick: mean)")
    ax.set_title(f"learning: {learning['task']}, same env-step budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
