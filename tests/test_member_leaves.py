"""The hyperparameters moved from program constants into float32 scalar leaves of the
state (``algos.members.ADDED_LEAVES``): target entropy scale, exploration noise (and
FastTD3's per-env noise bounds), target policy smoothing, PPO's clip range, entropy and
value coefficients and reward scale.

Each is a member field (a population member with a value equals the single run with it),
PBT perturbs it, and a run saved before the leaves existed still loads, evaluates and
resumes (the missing leaves take the run's config values; the resume is bitwise the one
of the same run saved with them).
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import serialization

import jaxspreeze
from jaxspreeze import algos
from jaxspreeze.algos import members
from jaxspreeze.envs import env_spec
from jaxspreeze.run import pbt
from jaxspreeze.run.checkpoint_eval import evaluate_checkpoint
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import population
from jaxspreeze.setup.config import from_dict
from jaxspreeze.store.checkpoint import list_checkpoints

# each algorithm's added member fields, with a non-default value each (a second member
# takes 0.5x the first field's)
NEW_FIELDS = {
    "sac": {"target_entropy_scale": 0.5},
    "fastsac": {"target_entropy_scale": 2.0},
    "ddpg": {"exploration_noise": 0.3},
    "td3": {"exploration_noise": 0.3, "target_noise": 0.1, "target_noise_clip": 0.3},
    "fasttd3": {"noise_min": 0.05, "noise_max": 0.2, "target_noise": 0.1, "target_noise_clip": 0.3},
    "ppo": {"clip_eps": 0.3, "ent_coef": 0.01, "vf_coef": 0.25, "reward_scaling": 0.5},
}
# the added leaves kept on the actor side (the others are on the critic side)
ON_ACTOR = {"target_entropy_scale", "exploration_noise", "noise_min", "noise_max", "clip_eps"}
ON_ACTOR |= {"ent_coef"}
# the smallest networks each algorithm takes
SMALL = {
    "sac": {"hidden": (16,)},
    "fastsac": {"actor_hidden": (16,), "critic_hidden": (16,), "num_atoms": 11},
    "ddpg": {"hidden": (16,)},
    "td3": {"hidden": (16,)},
    "fasttd3": {"actor_hidden": (16,), "critic_hidden": (16,), "num_atoms": 11},
    "ppo": {"hidden": (16,), "epochs": 2},
}


def _tiny(tiny_config, algo: str, **changes):
    if algo == "ppo":
        sizes = {"env": "gymnax/CartPole-v1", "rollout_steps": 16, "batch_size": 32}
        sizes |= {"total_steps": 1_024, "chunk_iterations": 8}
    else:
        sizes = {"total_steps": 400, "learning_starts": 100, "chunk_iterations": 25}
    return tiny_config(algo=algo, **sizes).replace(**{algo: {**SMALL[algo]}}, **changes)


def _leaves(tree):
    raw = lambda x: (
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    )
    return [np.asarray(raw(x)) for x in jax.tree.leaves(tree)]


def test_every_added_leaf_is_a_member_field_where_its_config_has_it():
    """Each algorithm's config field named in ADDED_LEAVES is a float member field whose
    setter writes the leaf of its name; no bool or int field is a member field."""
    for spec in algos.all_specs():
        section = spec.config_cls()
        for name, value in vars(section).items():
            if name in members.ADDED_LEAVES:
                assert name in spec.member_fields, (spec.name, name)
            if name in spec.member_fields:
                assert type(value) is float, (spec.name, name)
        if spec.name in NEW_FIELDS:  # not PQN, born with its leaves (reward_scaling)
            assert set(NEW_FIELDS[spec.name]) == members.ADDED_LEAVES & set(vars(section))


@pytest.mark.parametrize("algo", list(NEW_FIELDS))
def test_a_new_field_is_read_from_its_leaf(algo):
    """The leaf, not the config, drives the update: a state whose leaves are set to the
    values acts and updates as the algorithm made with those values (one jitted program
    for both)."""
    from jaxspreeze.setup.plan import plan

    spec = algos.get(algo)
    run = plan(from_dict({"algo": algo, algo: SMALL[algo]}), on_devices=False).cfg
    env = env_spec(run.env)
    section = getattr(run, algo)
    plain = spec.make(section, env, run)
    valued = spec.make(type(section)(**{**vars(section), **NEW_FIELDS[algo]}), env, run)
    state = plain.init(jax.random.key(0))
    for name, value in NEW_FIELDS[algo].items():
        state = spec.member_fields[name](state, jax.numpy.float32(value))
    want = valued.init(jax.random.key(0))
    for a, b in zip(_leaves(state), _leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)
    obs = jax.numpy.zeros((4, *env.obs_shape))
    act = jax.jit(plain.act, static_argnums=4)
    np.testing.assert_array_equal(
        act(state.actor, (), obs, jax.random.key(1), False)[0],
        jax.jit(valued.act, static_argnums=4)(want.actor, (), obs, jax.random.key(1), False)[0],
    )


@pytest.mark.parametrize(
    "algo",
    [
        # every case with -m slow: a member equals its single run in test_sweep (SAC) and
        # test_pbt; an old run's leaves load and resume in the default run (further down)
        pytest.param("ppo", marks=pytest.mark.slow),
        pytest.param("td3", marks=pytest.mark.slow),
        pytest.param("sac", marks=pytest.mark.slow),
        pytest.param("ddpg", marks=pytest.mark.slow),
        pytest.param("fastsac", marks=pytest.mark.slow),
        pytest.param("fasttd3", marks=pytest.mark.slow),
    ],
)
def test_a_member_with_new_values_equals_the_single_run_with_them(tiny_config, algo):
    """Member 1 of a population over the new fields trains as the single run with its
    values and seed (to float32 rounding, grown over the run: the population vmaps more
    slots, whose kernels round otherwise); member 0, with another value, does not."""
    values = NEW_FIELDS[algo]
    first = next(iter(values))
    grid = {first: [values[first] * 0.5, values[first]]}
    grid |= {k: [v] for k, v in values.items() if k != first}
    # 2 seeds per member, as tests/test_sweep.py: the 2-slot single run's kernels round as
    # the population's (a 1-slot program rounds otherwise: SAC's drift then outgrows the
    # tolerance)
    cfg = _tiny(tiny_config, algo, run_name="pop", num_seeds=2)
    pop = jaxspreeze.sweep(cfg, grid=grid, quiet=True)
    single = train(
        _tiny(tiny_config, algo, run_name="single", num_seeds=2).replace(
            **{algo: {**SMALL[algo], **values}}
        ),
        quiet=True,
    )
    member = jax.tree.map(lambda x: x[2:4], pop.state.agent)  # member 1's two seeds
    for a, b in zip(_leaves(single.state.agent), _leaves(member), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    other = jax.tree.map(lambda x: x[0:2], pop.state.agent)  # member 0: another value
    assert not all(
        np.allclose(a, b, rtol=1e-3, atol=1e-4)
        for a, b in zip(_leaves(single.state.agent), _leaves(other), strict=True)
    )
    for name, value in values.items():  # each member's value in its leaf
        side = pop.state.agent.actor if name in ON_ACTOR else pop.state.agent.critic
        side = getattr(side, "inner", side)  # an observation-normalised actor side
        want = [values[name] * 0.5] * 2 + [values[name]] * 2 if name == first else [value] * 4
        np.testing.assert_array_equal(getattr(side, name), np.float32(want))




def test_pbt_perturbs_the_new_fields_by_its_factors():
    """PBT's explore step multiplies a new field by 0.8 or 1.25 (no range of its own) and
    writes it into the copied member's leaf with the setter."""
    cfg = from_dict({"algo": "ppo", "env": "gymnax/CartPole-v1", "ppo": {"hidden": [4]}})
    cfg = cfg.replace(
        population=population.encode(
            [{"clip_eps": 0.2, "ent_coef": 0.01}, {"clip_eps": 0.3, "ent_coef": 0.02}]
        )
    )
    values = population.member_table(cfg)
    events = pbt.choose(cfg.replace(pbt_quantile=0.5), values, [1.0, 0.0], 0, 100)
    assert [e["member"] for e in events] == [1] and events[0]["copied"] == 0
    new = events[0]["new"]
    for name in ("clip_eps", "ent_coef"):
        assert events[0]["factors"][name] in pbt.FACTORS
        assert new[name] == float(np.float32(values[0][name] * events[0]["factors"][name]))
    from jaxspreeze.setup.plan import plan

    spec, run = algos.get("ppo"), plan(cfg, on_devices=False).cfg
    algo = spec.make(run.ppo, env_spec(cfg.env), run)
    agent = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 2))
    agent = population.apply_members(agent, cfg, spec)
    out = pbt.exploit_explore(agent, cfg, events)
    np.testing.assert_array_equal(out.actor.clip_eps, np.float32([0.2, new["clip_eps"]]))
    np.testing.assert_array_equal(out.actor.ent_coef, np.float32([0.01, new["ent_coef"]]))


# ---------------------------------------------------------------- runs saved before
def _as_saved_before(run_dir) -> int:
    """Rewrite ``run_dir``'s checkpoints and policy files as a run saved before the added
    leaves would hold them (their entries and keys removed); the count of leaves removed."""
    removed = 0
    for ckpt in list_checkpoints(run_dir):
        manifest = json.loads((ckpt / "manifest.json").read_text())
        kept = [e for e in manifest["leaves"] if not members.is_added(e["path"])]
        removed += len(manifest["leaves"]) - len(kept)
        (ckpt / "manifest.json").write_text(json.dumps({**manifest, "leaves": kept}))

    def strip(tree):
        if not isinstance(tree, dict):
            return tree
        return {k: strip(v) for k, v in tree.items() if not members.is_added(str(k))}

    for file in run_dir.glob("policy*.msgpack"):
        state = serialization.msgpack_restore(file.read_bytes())
        file.write_bytes(serialization.msgpack_serialize(strip(state), in_place=True))
    return removed


@pytest.mark.parametrize("algo", [pytest.param("ppo", marks=pytest.mark.slow), pytest.param("td3", marks=pytest.mark.slow), pytest.param("sac", marks=pytest.mark.slow)])
def test_a_run_saved_before_the_leaves_loads_evaluates_and_resumes(tiny_config, algo):
    """Without the added leaves in its checkpoint and policy file, a run still loads
    (``jaxspreeze.load``), evaluates its checkpoint and resumes, bitwise as the same run
    with them: the missing leaves are its config's values."""
    values = NEW_FIELDS[algo]
    cfg = _tiny(tiny_config, algo, run_name="new").replace(**{algo: {**SMALL[algo], **values}})
    half = cfg.total_steps // 2
    new = train(cfg.replace(total_steps=half), quiet=True)
    old_dir = new.run_dir.with_name("old")
    shutil.copytree(new.run_dir, old_dir)
    assert _as_saved_before(old_dir) >= len(values)

    loaded_old, loaded_new = jaxspreeze.load(old_dir), jaxspreeze.load(new.run_dir)
    pairs = zip(_leaves(loaded_old.policy.actor), _leaves(loaded_new.policy.actor), strict=True)
    for a, b in pairs:
        np.testing.assert_array_equal(a, b)
    evaluated = [evaluate_checkpoint(d)["return_mean"] for d in (old_dir, new.run_dir)]
    assert evaluated[0] == evaluated[1]

    saved = from_dict(json.loads((new.run_dir / "config.json").read_text()))
    resumed_new = train(saved.replace(total_steps=cfg.total_steps), quiet=True, resume=new.run_dir)
    resumed_old = train(saved.replace(total_steps=cfg.total_steps), quiet=True, resume=old_dir)
    for a, b in zip(_leaves(resumed_old.state), _leaves(resumed_new.state), strict=True):
        assert a.tobytes() == b.tobytes()
    side = resumed_old.state.agent.critic if algo == "ppo" else resumed_old.state.agent.actor
    name = "reward_scaling" if algo == "ppo" else next(iter(values))
    np.testing.assert_array_equal(getattr(side, name), np.float32(values[name]))
