"""`jaxspreeze bench`'s memory rows: recurrent PPO against feed-forward PPO, same sizes."""

from __future__ import annotations

import dataclasses

import pytest

from jaxspreeze.bench import report, suite
from jaxspreeze.bench.record import Workload
from jaxspreeze.setup.plan import plan


def _sizes(cfg):
    fields = ("env", "num_envs", "rollout_steps", "batch_size", "chunk_iterations", "total_steps")
    return {f: getattr(cfg, f) for f in fields}


@pytest.mark.parametrize("env", suite.MEMORY_ENVS)
def test_a_memory_row_and_its_reference_differ_only_in_the_cell(env) -> None:
    """The recurrent chunk and its feed-forward reference: the same run sizes and PPO
    config (PPO's default networks, the same torso) but ``memory``."""
    ff = suite.memory_config(env, "none", "cpu")
    for cell in suite.MEMORY_CELLS:
        rec = suite.memory_config(env, cell, "cpu")
        assert rec.ppo.memory == cell and ff.ppo.memory == "none"
        assert _sizes(rec) == _sizes(ff)
        assert dataclasses.replace(rec.ppo, memory="none") == ff.ppo
        assert rec.ppo.hidden == suite.algos.get("ppo").config_cls().hidden
        assert rec.placement == "single"
        plan(rec, on_devices=False)  # a valid recurrent run: whole sequences per minibatch
    cpu = suite.SIZES["cpu"]["ppo_memory_chunk"]
    assert (ff.num_envs, ff.rollout_steps, ff.batch_size) == (
        cpu["num_envs"],
        cpu["rollout_steps"],
        cpu["batch_size"],
    )


def test_memory_rows_are_in_the_full_selection_only() -> None:
    for scale in suite.SCALES:
        full = [c for c in suite.selection(True, scale) if c.kind == "memory"]
        assert {(c.args["env"], c.args["memory"]) for c in full} == {
            (e, m) for e in suite.MEMORY_ENVS for m in suite.MEMORY_CELLS
        }
        assert not [c for c in suite.selection(False, scale) if c.kind == "memory"]
    assert suite.Case("memory", {"env": "e", "memory": "gru", "scale": "cpu"}).id == (
        "memory-e-gru-cpu"
    )


def test_a_memory_rows_reference_is_the_feed_forward_chunk(monkeypatch) -> None:
    """Without a references module too (the reference is ours): the same env and scale,
    ``none`` for the cell."""
    made = []

    def fake(env, memory, scale):
        made.append((env, memory, scale))
        return Workload(memory, lambda: None, env_steps=1024)

    monkeypatch.setattr(suite, "memory_chunk", fake)
    case = suite.Case("memory", {"env": "gymnax/CartPole-v1", "memory": "lstm", "scale": "cpu"})
    like = suite.prepare(case)
    ref = suite.prepare_reference(case, None, like)
    assert made == [("gymnax/CartPole-v1", "lstm", "cpu"), ("gymnax/CartPole-v1", "none", "cpu")]
    assert ref.name == "none"


def test_the_report_says_the_recurrent_cost() -> None:
    """The note is the feed-forward rate over the recurrent one (1 / ratio)."""
    rec = {
        "id": "memory-gymnax/CartPole-v1-gru-cpu",
        "kind": "memory",
        "memory": "gru",
        "env_steps_per_s": 2_500.0,
        "reference": {"env_steps_per_s": 10_000.0},
        "ratio_vs_reference": 0.25,
    }
    line = report.row(rec)
    assert "gru: 4.00x feed-forward's wall per env step" in line
    assert "2,500" in line and "ratio 0.25" in line


@pytest.mark.slow  # compiles a recurrent and a feed-forward PPO chunk (about a minute)
def test_a_tiny_memory_row_measures_both_sides(monkeypatch) -> None:
    tiny = dict(num_envs=2, rollout_steps=8, batch_size=8, chunk_iterations=1)
    monkeypatch.setitem(suite.SIZES["cpu"], "ppo_memory_chunk", tiny)
    case = suite.Case("memory", {"env": "gymnax/CartPole-v1", "memory": "gru", "scale": "cpu"})
    rec = suite.measure(case, None, rounds=2, warmup=1)
    assert "error" not in rec and "skipped" not in rec, rec
    ref = rec["reference"]
    assert rec["kind"] == ref["kind"] == "memory"
    assert (rec["memory"], ref["memory"]) == ("gru", "none")
    assert rec["seconds_per_call"] * rec["env_steps_per_s"] == pytest.approx(16)
    assert ref["seconds_per_call"] * ref["env_steps_per_s"] == pytest.approx(16)
    assert rec["ratio_vs_reference"] == pytest.approx(
        rec["env_steps_per_s"] / ref["env_steps_per_s"]
    )
