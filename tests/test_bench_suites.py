"""`jaxspreeze bench`'s suite rows: a JAX suite's env stepping, jaxspreeze's adapter against
the suite's own vmapped scan (its own reset practice) and the bare transition (no reset).

The rows' sizes and timings are the benchmark's; here a tiny row (4 envs x 8 steps) checks
what a row records and reports, and a probe env checks the optimistic resets written
after Craftax_Baselines' wrapper.
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.bench import references, report, suite
from jaxspreeze.cli import main
from jaxspreeze.envs import FAMILIES

CHEAP = "navix/Navix-Empty-8x8-v0"


def test_the_suite_rows_of_each_selection(capsys) -> None:
    """Quick: the cheap suites at 64 envs; full: every suite at every size; Craftax's
    heavy rows only with --full or when --only names them."""
    ids = lambda cases: [c.id for c in cases if c.kind == "suite"]
    quick, full = ids(suite.selection(scale="cpu")), ids(suite.selection(True, "cpu"))
    assert quick == [f"suite-{e}-64" for e in suite.SUITE_ENVS if not e.startswith("craftax/")]
    assert set(quick) < set(full)
    for env in suite.SUITE_ENVS:
        assert {f"suite-{env}-64", f"suite-{env}-256"} <= set(full)
    named = ids(suite.selection(scale="cpu", only=("craftax",)))
    craftax = [i for i in full if "craftax" in i]
    assert craftax and [i for i in named if "craftax" in i] == craftax
    assert main(["bench", "--list", "--scale", "cpu", "--only", "suite-craftax"]) == 0
    assert capsys.readouterr().out.split() == craftax


def test_each_suite_has_its_own_practice_and_the_bound() -> None:
    for env in suite.SUITE_ENVS:
        first, *_, last = references.suite_variants(env)
        assert first == "own" and last == references.BOUND
    assert "builtin" in references.suite_variants("craftax/Craftax-Classic-Symbolic-v1")
    with pytest.raises(ValueError, match="suite rows step"):
        references.suite_variants("gymnax/CartPole-v1")


@pytest.mark.skipif(importlib.util.find_spec("navix") is None, reason="navix is not installed")
def test_a_tiny_suite_row_times_jaxspreeze_and_both_references() -> None:
    rec = suite.suite_row(CHEAP, 4, references, rounds=2, warmup=1, steps=8)
    refs = rec["references"]
    assert list(refs) == ["own", "bound"]
    # every side steps the same env steps a call, and was timed the same rounds
    assert rec["env_steps_per_s"] * rec["seconds_per_call"] == pytest.approx(32)
    for ref in refs.values():
        assert "error" not in ref, ref
        assert ref["env_steps_per_s"] * ref["seconds_per_call"] == pytest.approx(32)
        assert ref["env_steps_per_cpu_s"] * ref["cpu_seconds_per_call"] == pytest.approx(32)
        assert ref["rounds"] == rec["rounds"] == 2 and ref["steps"] == rec["steps"] == 8
        assert ref["compile_s"] > 0
    # the row's ratio is against the suite's own practice; every ratio is ours / theirs
    assert rec["reference"]["variant"] == "own"
    for variant, r in rec["ratios"].items():
        assert r["wall"] == pytest.approx(rec["env_steps_per_s"] / refs[variant]["env_steps_per_s"])
        assert r["cpu"] == pytest.approx(
            rec["env_steps_per_cpu_s"] / refs[variant]["env_steps_per_cpu_s"]
        )
    assert rec["ratio_vs_reference"] == pytest.approx(rec["ratios"]["own"]["wall"])
    cells = report.cells({"id": "suite-x", **rec})
    assert len(cells) == len(report.COLUMNS) and cells[4] == "env steps/s"
    assert cells[3] == f"{rec['ratio_vs_reference']:.2f}"
    assert "reference: Navix's step" in cells[6] and "upper bound, no reset" in cells[6]
    assert "per CPU s" in cells[6] and "load" in cells[6]


def test_a_missing_suite_is_a_skipped_row_naming_its_pip_install(monkeypatch) -> None:
    monkeypatch.setattr(FAMILIES["navix"], "installed", lambda: False)
    rec = suite.measure(suite.Case("suite", {"env": CHEAP, "num_envs": 4}), references)
    assert rec["skipped"].endswith('pip install "jaxspreeze[navix]"'), rec
    assert "\n" not in rec["skipped"] and "skipped: " in report.row(rec)


class Probe:
    """A gymnax-style env whose state is a number: a reset draws a new one (>= 1000) from
    its key, a step adds 1 and ends the episode where the action is 1."""

    default_params = None

    def reset(self, key, params):
        state = 1000 + jax.random.randint(key, (), 0, 2**30)
        return state.astype(jnp.float32)[None], state

    def step(self, key, state, action, params):
        state = state + 1
        return state.astype(jnp.float32)[None], state, 1.0, action == 1, {}


@pytest.mark.parametrize("ends", [1, 2, 5, 8])
def test_optimistic_resets_hand_fresh_states_to_the_envs_that_ended(ends) -> None:
    """8 envs, reset_ratio 4 (2 fresh states a step): an env that goes on adds 1; an env
    that ended takes a fresh state, each its own while no more envs end than there are
    fresh states, shared among its block's envs beyond."""
    n, ratio = 8, 4
    step = jax.jit(references.optimistic_resets(Probe(), None, n, ratio))
    state = jnp.arange(n)  # below any reset's state
    action = (jnp.arange(n) < ends).astype(jnp.int32)
    for seed in range(5):
        obs, new, reward = step(jax.random.key(seed), state, action)
        new, obs = np.asarray(new), np.asarray(obs)
        np.testing.assert_array_equal(new[ends:], np.arange(ends, n) + 1)
        fresh = new[:ends]
        assert (fresh >= 1000).all()
        np.testing.assert_array_equal(obs[:, 0], new.astype(np.float32))
        assert len(set(fresh.tolist())) == min(ends, n // ratio)
        np.testing.assert_array_equal(reward, np.ones(n))
