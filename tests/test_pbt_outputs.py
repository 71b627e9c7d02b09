"""What a population run writes beside its metrics: TensorBoard's per-member tags and a PBT
run's ``lineage.png`` (tiny SAC runs on gymnax Pendulum, fixed seeds)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from test_pbt import GRID
from test_pbt import _cfg as pbt_cfg
from test_sinks import read_tensorboard

import jaxspreeze
from jaxspreeze.run import pbt
from jaxspreeze.sinks import figures as plots
from jaxspreeze.sinks import scalars

SINKS = ["jsonl", "tensorboard", "plots"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A PBT run (4 members x 2 seeds, evaluated every 1,000 steps) and a plain sweep."""
    tmp = tmp_path_factory.mktemp("pbt_outputs")
    with_pbt = jaxspreeze.sweep(
        pbt_cfg(tmp, "pbt", sinks=SINKS, eval_every=1000), grid=GRID, quiet=True
    )
    plain = jaxspreeze.sweep(
        pbt_cfg(tmp, "plain", sinks=SINKS, pbt=False, total_steps=400, eval_every=200),
        grid={"actor_lr": [1e-4, 1e-3]},
        quiet=True,
    )
    return with_pbt, plain


def test_scalars_name_members_and_seeds():
    record = {"kind": "eval", "env_steps": 5, "eval_return": 1.0,
              "eval_return_per_seed": [1.0, 2.0], "eval_return_per_member": [3.0, None]}  # fmt: skip
    assert dict(scalars(record)) == {
        "eval_return": 1.0,
        "eval_return/seed0": 1.0,
        "eval_return/seed1": 2.0,
        "eval_return/member0": 3.0,
    }


def test_tensorboard_has_a_tag_per_member_with_the_jsonl_values(runs):
    run = runs[0].run_dir
    tb = read_tensorboard(run / "tb")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r.get("kind") == "eval"]
    assert [r["env_steps"] for r in evals] == [1000, 2000]
    for r in evals:
        assert len(r["eval_return_per_member"]) == 4
        for m, value in enumerate(r["eval_return_per_member"]):
            assert tb[f"eval/eval_return/member{m}"][r["env_steps"]] == pytest.approx(value)
        for i, value in enumerate(r["eval_return_per_seed"]):  # the slots' own tags stay
            assert tb[f"eval/eval_return/seed{i}"][r["env_steps"]] == pytest.approx(value)
    assert not [tag for tag in tb if "_per_member" in tag]


def test_lineage_png_is_written_for_a_pbt_run_only(runs):
    with_pbt, plain = runs
    assert (with_pbt.run_dir / plots.LINEAGE_PNG).stat().st_size > 10_000
    assert (plain.run_dir / plots.MEMBERS).exists()
    assert not (plain.run_dir / plots.LINEAGE_PNG).exists()
    # `jaxspreeze plot RUN_DIR` redraws it from the run's files
    (with_pbt.run_dir / plots.LINEAGE_PNG).unlink()
    assert with_pbt.run_dir / plots.LINEAGE_PNG in plots.write_run_plots(with_pbt.run_dir)


def test_lineage_segments_follow_the_copies(runs):
    run = runs[0].run_dir
    events = pbt.read_lineage(run)
    initial = [{"actor_lr": lr, "gamma": 0.95} for lr in GRID["actor_lr"]]
    spans = plots.lineage_segments(initial, events, 2000)
    assert len(spans) == 4
    for m, rows in enumerate(spans):
        assert rows[0][:2] == (0.0, rows[1][0] if len(rows) > 1 else 2000.0)
        assert rows[0][2] == initial[m] and rows[-1][1] == 2000.0
        mine = [e for e in events if e["member"] == m]
        assert [v for _, _, v in rows[1:]] == [e["new"] for e in mine]
    final = [rows[-1][2] for rows in spans]
    assert final == pbt.replay(json_cfg(run), events)


def json_cfg(run_dir):
    from jaxspreeze.setup.config import from_dict

    return from_dict(json.loads((run_dir / "config.json").read_text()))


def test_the_host_copy_of_a_spread_agent_makes_the_same_copies(runs):
    """What the split and data-parallel placements run (pbt.placed_exploit_explore: the agent
    through the host and laid out again) gives the on-device copies bitwise."""
    run = runs[0]
    cfg = json_cfg(run.run_dir)
    events = [{"member": 3, "copied": 1, "new": {"actor_lr": 2.5e-3, "gamma": 0.5}}]
    agent = run.state.agent
    device = jax.devices()[0]
    laid_out = []

    def place(tree):
        laid_out.append(tree)
        return jax.device_put(tree, device)

    got = pbt.placed_exploit_explore(agent, cfg, events, place)
    want = pbt.exploit_explore(agent, cfg, events)
    assert laid_out and jax.tree.structure(got) == jax.tree.structure(want)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert x.dtype == y.dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()
