"""Population-based training (``jaxspreeze sweep --pbt``): exploit and explore between chunks.

Tiny SAC runs on gymnax Pendulum with fixed seeds: 4 members x 2 seeds, a chunk of 100 env
steps, a PBT step every 1,000 (the bottom quarter, one member, copies a top one).
"""

from __future__ import annotations

import json

import jax
import numpy as np
import optax
import pytest
from test_sweep import _cfg as sweep_cfg

import jaxspreeze
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.run import pbt
from jaxspreeze.run.trainer import train
from jaxspreeze.setup.config import from_dict

GRID = {"actor_lr": [1e-5, 1e-4, 1e-3, 3e-3], "gamma": [0.95]}


def _cfg(tmp_path, name: str, **changes):
    """test_sweep's tiny SAC run, 2,000 env steps, 2 seeds, a PBT step every 10 chunks."""
    pbt_run = {"total_steps": 2000, "num_seeds": 2, "grad_steps": 1, "eval_every": 0}
    base = {**pbt_run, "sinks": ["jsonl"], "pbt": True, "pbt_interval": 1000}
    return sweep_cfg(tmp_path, name, **{**base, **changes})


def _raw(x):
    return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x


def _leaves(tree):
    return [np.asarray(_raw(x)) for x in jax.tree.leaves(tree)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pbt")
    a = jaxspreeze.sweep(_cfg(tmp, "a"), grid=GRID, quiet=True)
    b = jaxspreeze.sweep(_cfg(tmp, "b"), grid=GRID, quiet=True)
    return tmp, a, b


def test_a_bad_interval_is_refused_before_compile(tmp_path):
    with pytest.raises(ConfigError, match="pbt_interval: must be a whole number of chunks"):
        jaxspreeze.sweep(_cfg(tmp_path, "bad", pbt_interval=1050), grid=GRID, quiet=True)
    with pytest.raises(ConfigError, match=r"pbt: .*at least 2 members"):
        jaxspreeze.sweep(_cfg(tmp_path, "one"), grid={"actor_lr": [1e-3]}, quiet=True)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "one").exists()


def test_choose_ranks_and_draws_from_the_seed():
    cfg = _cfg("/tmp", "x", population=("actor_lr=0.001,gamma=0.9",) * 4)
    values = [{"actor_lr": 1e-3 * (m + 1), "gamma": 0.9} for m in range(4)]
    events = pbt.choose(cfg, values, [3.0, float("nan"), 1.0, 5.0], 1, 1000)
    assert [(e["member"], e["copied"]) for e in events] == [(1, 3)]  # no episode: worst
    (e,) = events
    for name in ("actor_lr", "gamma"):
        assert e["factors"][name] in (0.8, 1.25)
        want = min(values[3][name] * e["factors"][name], 1.0)
        assert e["new"][name] == float(np.float32(want))
    assert pbt.choose(cfg, values, [3.0, float("nan"), 1.0, 5.0], 1, 1000) == events
    assert pbt.choose(cfg, values, [float("nan")] * 4, 2, 2000) == []  # nothing to rank


def test_perturbed_noise_bounds_stay_ordered():
    """FastTD3's noise_min and noise_max are perturbed apart; a draw that would put the low
    bound over the high one meets it instead (every env then explores at one scale)."""
    cfg = _cfg("/tmp", "x", population=("actor_lr=0.001",) * 4)
    values = [{"noise_min": 0.2, "noise_max": 0.2} for _ in range(4)]
    seen = set()
    for index in range(20):
        for e in pbt.choose(cfg, values, [1.0, 2.0, 3.0, 4.0], index, 1000 * index):
            assert e["new"]["noise_min"] <= e["new"]["noise_max"]
            seen.add((e["factors"]["noise_min"], e["factors"]["noise_max"]))
    assert (1.25, 0.8) in seen  # the draw that would have inverted them happened


def test_exploit_copies_the_agent_state_and_explore_sets_the_values(runs):
    _, a, _ = runs
    cfg = from_dict(json.loads((a.run_dir / "config.json").read_text()))
    event = {"member": 0, "copied": 2, "new": {"actor_lr": 2.5e-3, "gamma": 0.5}}
    agent = a.state.agent
    out = pbt.exploit_explore(agent, cfg, [event])
    lr = lambda ag: np.asarray(optax.tree_utils.tree_get(ag.actor.opt_state, "learning_rate"))
    np.testing.assert_array_equal(lr(out)[:2], np.float32(2.5e-3))
    np.testing.assert_array_equal(np.asarray(out.critic.gamma)[:2], np.float32(0.5))
    np.testing.assert_array_equal(lr(out)[2:], lr(agent)[2:])
    # every other leaf: slots 0, 1 hold slots 4, 5 bitwise; slots 2.. are untouched
    fields = lambda ag: ag._replace(
        actor=ag.actor._replace(opt_state=None), critic=ag.critic._replace(gamma=None)
    )
    for x, y in zip(_leaves(fields(out)), _leaves(fields(agent)), strict=True):
        assert x[:2].tobytes() == y[4:6].tobytes()
        assert x[2:].tobytes() == y[2:].tobytes()


def test_the_lineage_and_the_summary_say_what_was_copied(runs):
    _, a, _ = runs
    events = pbt.read_lineage(a.run_dir)
    assert [e["env_steps"] for e in events] == [1000, 2000]
    for e in events:
        assert e["copied"] != e["member"]
        assert set(e["new"]) == {"actor_lr", "gamma"}
    rows = a.summary["members"]
    assert [r["initial_values"]["actor_lr"] for r in rows] == GRID["actor_lr"]
    last = events[-1]  # made after the last chunk: the checkpoint's, never trained with
    assert rows[last["member"]]["next_values"] == last["new"]
    first = events[0]
    trained = first["new"] if first["member"] == last["member"] else None
    trained = trained or rows[last["member"]]["initial_values"]
    assert rows[last["member"]]["values"] == trained  # what it trained with, to the end
    assert rows[last["member"]]["values"] != last["new"]
    assert a.summary["pbt"]["copies"] == 2 and a.summary["pbt"]["interval"] == 1000
    assert a.summary["pbt"]["copies_after_training"] == 1
    # the final state holds the lineage's values (member m's seeds: slots 2m, 2m + 1)
    lr = np.asarray(optax.tree_utils.tree_get(a.state.agent.actor.opt_state, "learning_rate"))
    for r in rows:
        m = r["member"]
        want = np.float32(r["next_values"]["actor_lr"])
        np.testing.assert_array_equal(lr[2 * m : 2 * m + 2], want)


def test_a_copy_after_the_last_chunk_makes_no_member_best(runs):
    """The copy made after training ended is the checkpoint's (a longer run goes on from
    it); the members' final evaluations, policy files and the best member are what each
    member trained: the member perturbed then keeps its own actor, not the copied one."""
    _, a, _ = runs
    last = pbt.read_lineage(a.run_dir)[-1]
    assert last["env_steps"] == a.summary["env_steps"]
    loser, winner = last["member"], last["copied"]
    own = jaxspreeze.load(a.run_dir / f"policy-{loser}.msgpack").actor
    copied = jaxspreeze.load(a.run_dir / f"policy-{winner}.msgpack").actor
    assert any(
        x.tobytes() != y.tobytes() for x, y in zip(_leaves(own), _leaves(copied), strict=True)
    )
    # the state (the checkpoint's) holds the copy: the loser's seeds are the winner's
    state = jax.tree.leaves(a.state.agent.actor.params)[0]
    np.testing.assert_array_equal(state[2 * loser], state[2 * winner])
    finals = [r["final_return"] for r in a.summary["members"]]
    assert a.summary["best_member"] == int(np.argmax(finals))


def test_the_same_seed_gives_the_same_lineage_and_states(runs):
    _, a, b = runs
    assert pbt.read_lineage(a.run_dir) == pbt.read_lineage(b.run_dir)
    for x, y in zip(_leaves(a.state), _leaves(b.state), strict=True):
        assert x.tobytes() == y.tobytes()


@pytest.mark.slow
def test_a_resume_at_an_interval_boundary_is_bitwise(runs):
    tmp, a, _ = runs
    half = jaxspreeze.sweep(_cfg(tmp, "half", total_steps=1000), grid=GRID, quiet=True)
    cfg = from_dict(json.loads((half.run_dir / "config.json").read_text()))
    resumed = train(cfg.replace(total_steps=2000), quiet=True, resume=half.run_dir)
    for x, y in zip(_leaves(resumed.state), _leaves(a.state), strict=True):
        assert x.tobytes() == y.tobytes()
    assert pbt.read_lineage(resumed.run_dir) == pbt.read_lineage(a.run_dir)


def test_the_cli_refuses_a_bad_interval_in_one_line(run_main, tmp_path):
    args = ["sweep", "--grid", "sac.actor_lr=1e-4,1e-3", "--pbt", "--total-steps", "4000",
            "--logdir", str(tmp_path)]  # fmt: skip
    out = run_main(*args, "--pbt-interval", "1001")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--pbt-interval" in out.stderr
    out = run_main(*args, "--pbt-quantile", "0.7")
    assert out.returncode == 2 and "--pbt-quantile" in out.stderr
    assert list(tmp_path.iterdir()) == []
