"""Autotuned vs default config: SAC on gymnax/Pendulum-v1 to -200, same env-step budget.

The default is the suite's end-to-end SAC config (8 envs, G=8, batch 256, K=125). The
autotuned run starts from that config, runs ``autotune.tune`` on this machine (nothing
pinned, budget ``JAXSPREEZE_AUTOTUNE_BUDGET_S``, default 30 s) and trains with its
choice. Both train to the threshold with ``bench.cases.end_to_end`` (compile apart,
evaluation after every chunk). ``benchmark.extra_info`` holds both records side by side:
env steps/s, update samples/s, wall time to the threshold, compile time, the choice and
the probe's own cost.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from jaxspreeze import autotune
from jaxspreeze.bench import cases, suite
from jaxspreeze.config import RunConfig

pytestmark = pytest.mark.benchmark

KEYS = (
    "env_steps_per_s",
    "update_samples_per_s",
    "replay_ratio",
    "wall_to_threshold_s",
    "env_steps_to_threshold",
    "reached",
    "final_return",
    "compile_s",
    "train_s",
)


def _default_config() -> tuple[RunConfig, float]:
    spec = suite.E2E["sac"]
    fields = {k: v for k, v in spec["config"].items() if k not in ("algo", "env")}
    cfg = cases.run_config("sac", spec["config"]["env"], RunConfig().sac.hidden, **fields)
    return dataclasses.replace(cfg, placement="single"), spec["threshold"]


def test_autotuned_vs_default(benchmark, tmp_path) -> None:
    """Train with the autotuned profile and with the default config; report both."""
    base, threshold = _default_config()
    budget = float(os.environ.get("JAXSPREEZE_AUTOTUNE_BUDGET_S", "30"))
    tuned, profile = autotune.tune(base, budget_s=budget, out_dir=tmp_path, say=lambda *a: None)
    out: dict[str, dict] = {}
    benchmark.pedantic(
        lambda: out.update(tuned=cases.end_to_end(tuned, threshold)), rounds=1, iterations=1
    )
    out["default"] = cases.end_to_end(base, threshold)
    choice = {k: getattr(tuned, k) for k in autotune.TUNED}
    default = {k: getattr(base, k) for k in autotune.TUNED}
    benchmark.extra_info.update(
        {
            "env": base.env,
            "algo": base.algo,
            "total_steps": base.total_steps,
            "threshold": threshold,
            "autotune": {
                "choice": choice,
                "probe_s": profile["elapsed_s"],
                "setup_s": profile["setup_s"],
                "predicted_env_steps_per_s": profile["choice"]["predicted"]["env_steps_per_s"],
                "sampling_stop": profile["sampling"]["stop"],
                "update_stop": profile["update"]["stop"],
            },
            "default_config": default,
            "side_by_side": {
                key: {"autotuned": out["tuned"].get(key), "default": out["default"].get(key)}
                for key in KEYS
            },
            "hardware": profile["hardware"],
        }
    )
    for record in out.values():
        assert record["env_steps_per_s"] > 0 and record["update_samples_per_s"] > 0
