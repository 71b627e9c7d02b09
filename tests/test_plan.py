"""The run plan: a config resolved and checked once, what a run derives from it, and the
field kinds (shape, start, program-free ...) read from the fields' own metadata."""

from __future__ import annotations

import dataclasses

import pytest

from jaxspreeze import algos, schedules
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup import config, devices
from jaxspreeze.setup import plan as plan_lib
from jaxspreeze.setup.config import RunConfig, fields_of
from jaxspreeze.setup.plan import RunPlan, plan
from jaxspreeze.store import resume

# the sets each kind held as lists in resume.py and trainer.py before they became metadata
SHAPE = {"algo", "env", "actor_obs_key", "critic_obs_key", "num_envs", "num_seeds", "buffer_size",
         "population"}  # fmt: skip
START = {"seed", "learning_starts"}
OFF_POLICY = {"grad_steps", "buffer_size", "learning_starts"}
LOCATION = {"logdir", "run_name"}
AUTOTUNE = {"replay_ratio", "autotune_budget_s"}
PROGRAM_FREE = {
    "seed",
    "eval_every",
    "logdir",
    "run_name",
    "sinks",
    "checkpoint_every",
    "keep_checkpoints",
    "compile_cache",
    "autotune_budget_s",
    "host_stall_timeout_s",
    "stop_at_return",
    "pbt",
    "pbt_interval",
    "pbt_quantile",
}
ALGO_SHAPE = {"sac": {"hidden", "torso", "normalize_obs"}, "td3": {"hidden", "torso", "normalize_obs"},
              "ddpg": {"hidden", "torso", "normalize_obs"},
              "ppo": {"hidden", "torso", "normalize_obs", "policy", "tanh_std", "memory",
                      "memory_size"},
              "fasttd3": {"num_atoms", "actor_hidden", "critic_hidden", "torso", "critic_layer_norm", "normalize_obs"},
              "fastsac": {"num_atoms", "actor_hidden", "critic_hidden", "torso", "critic_layer_norm", "normalize_obs"},
              "pqn": {"hidden", "torso", "layer_norm", "optimizer", "memory", "memory_size", "last_action"},
              "dqn": {"hidden", "torso", "layer_norm"}}  # fmt: skip


def test_field_sets_are_pinned():
    """Each kind holds exactly the fields it held as a list before (resume, program cache)."""
    assert set(fields_of("shape")) == SHAPE
    assert set(fields_of("shape", on_policy=True)) == SHAPE - {"buffer_size"}
    assert set(fields_of("start")) == START
    assert set(fields_of("start", on_policy=True)) == {"seed"}
    assert set(fields_of("off_policy")) == OFF_POLICY
    assert set(fields_of("location")) == LOCATION
    assert set(fields_of("autotune")) == AUTOTUNE
    assert set(fields_of("program_free")) == PROGRAM_FREE
    for spec in algos.all_specs():
        assert set(fields_of("shape", spec.config_cls)) == ALGO_SHAPE[spec.name], spec.name
        assert set(resume.shape_fields(spec)) == (
            (SHAPE - ({"buffer_size"} if spec.on_policy else set()))
            | {f"{spec.name}.{n}" for n in ALGO_SHAPE[spec.name]}
        )
    with pytest.raises(ValueError, match="unknown field kind"):
        fields_of("shapes")


def test_the_kinds_are_on_the_fields_themselves():
    """The metadata sits on RunConfig's fields (the registry's redeclared ones too) and on
    the algorithms' configs: no list elsewhere names them."""
    meta = {f.name: f.metadata.get("kinds", frozenset()) for f in dataclasses.fields(RunConfig)}
    assert "shape" in meta["algo"] and "shape" in meta["num_envs"]  # both redeclared by the registry
    assert meta["buffer_size"] == {"shape", "off_policy"}
    for name in ("PROGRAM_FREE_FIELDS", "STATE_FIELDS", "START_FIELDS", "AUTOTUNE_FIELDS"):
        assert not hasattr(resume, name), name
    assert not hasattr(algos.get("ppo"), "shape_fields")


def test_a_plan_resolves_and_derives_the_sizes():
    """The plan holds the resolved config, the registry entry, the env spec; its derived
    sizes are those the trainer runs (SAC's defaults: a warm-up of 1000, 1125 iterations)."""
    p = plan(RunConfig(), devices.single())
    # torso "auto" is resolved like the sizes: the MLP for Pendulum's vector; compile
    # "auto" on the placement: a short run (12 chunks) on a CPU compiles quick
    assert p.cfg == config.resolve(RunConfig()).replace(sac={"torso": "mlp"}, compile="quick")
    assert p.algo_spec is algos.get("sac")
    assert "Pendulum" in p.env_spec.name
    assert p.steps_per_iteration == 8 and p.warmup_steps == 1000 and p.num_iterations == 1125
    assert p.algo_config == p.cfg.sac and not p.on_policy
    ppo = plan(RunConfig(algo="ppo", env="gymnax/CartPole-v1", learning_starts=64), on_devices=False)
    assert ppo.on_policy and ppo.warmup_steps == 0  # no warm-up on-policy, whatever is set
    assert ppo.steps_per_iteration == 16 * 64
    assert ppo.num_iterations == -(-ppo.cfg.total_steps // ppo.steps_per_iteration)
    odd = plan(RunConfig(num_envs=3, learning_starts=10, total_steps=100), on_devices=False)
    assert odd.warmup_steps == 12  # rounded up to a multiple of num_envs
    assert odd.num_iterations == 88 // 3 + 1
    assert plan(p.cfg, devices.single()).cfg is p.cfg  # a resolved config comes back as is


def test_placement_and_schedule_kind():
    """With devices the plan has a placement and names its schedule; without, neither (a
    host env's schedule is known without devices); ``placed`` adds one later."""
    bare = plan(RunConfig(), on_devices=False)
    assert bare.placement is None and bare.schedule is None
    placed = bare.placed(devices.single())
    assert placed.schedule == "fused" and placed.cfg == bare.cfg.replace(compile="quick")
    assert placed.placed(devices.single()).cfg is placed.cfg  # resolved once
    assert plan(RunConfig(placement="single")).schedule == "fused"  # resolved on this host
    host = RunConfig(env="gymnasium/Pendulum-v1", num_envs=2)
    assert plan(host, on_devices=False).schedule == "host-async"
    ppo_host = host.replace(algo="ppo", batch_size=16, rollout_steps=8)
    assert plan(ppo_host, on_devices=False).schedule == "host-rollout"
    with pytest.raises(ValueError, match="with a placement"):
        schedules.make(bare)
    schedule = schedules.make(placed)
    assert schedule.plan is placed and schedule.cfg is placed.cfg
    assert schedule.placement is placed.placement


def test_relocated_changes_location_fields_only():
    p = plan(RunConfig(), on_devices=False)
    moved = p.relocated(logdir="elsewhere", run_name="r1")
    assert (moved.cfg.logdir, moved.cfg.run_name) == ("elsewhere", "r1")
    assert moved.algo_spec is p.algo_spec and moved.env_spec == p.env_spec
    with pytest.raises(ValueError, match="location fields only"):
        p.relocated(num_envs=4)


def test_resolution_and_lookup_happen_once(monkeypatch):
    """One plan: the registry is asked once for the algorithm and the config resolved once."""
    gets, resolves = [], []
    real_get, real_resolve = algos.get, config.resolve
    monkeypatch.setattr(algos, "get", lambda name: gets.append(name) or real_get(name))
    monkeypatch.setattr(
        config, "resolve", lambda cfg, spec=None: resolves.append(cfg) or real_resolve(cfg, spec)
    )
    p = plan(RunConfig(algo="td3"), on_devices=False)
    assert gets == ["td3"] and len(resolves) == 1
    schedules.make(p.placed(devices.single()))  # the schedule reads the plan: no look-up
    assert gets == ["td3"] and len(resolves) == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"algo": "a2c"}, "algo"),
        ({"num_envs": 0}, "num_envs"),
        ({"total_steps": 1000}, "total_steps"),  # the warm-up leaves no room
        ({"buffer_size": 4, "batch_size": 8}, "batch_size"),
        ({"env": "gymnax/CartPole-v1"}, "algo"),  # SAC cannot train a discrete env
        ({"sac": {"tau": 2.0}}, "sac.tau"),
    ],
)
def test_errors_are_one_line_config_errors_before_any_compile(changes, field, monkeypatch):
    """A bad config is one ConfigError (exit 2, one line) naming the field; the plan
    compiles, allocates and builds no env for it."""
    import jax

    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled while planning"))
    with pytest.raises(ConfigError) as e:
        plan(config.from_dict(changes), on_devices=False)
    assert e.value.field == field and "\n" not in str(e.value)


def test_plan_rejects_what_is_not_a_config():
    with pytest.raises(ConfigError) as e:
        plan({"algo": "sac"})  # type: ignore[arg-type]
    assert e.value.field == "config"
    assert isinstance(plan_lib.plan(RunConfig(), on_devices=False), RunPlan)


@pytest.mark.slow  # a whole run (the default run stays under 10 minutes)
def test_a_run_plans_once(tiny_cfg, monkeypatch):
    """``train`` plans its config once: one plan, one registry look-up, one resolution
    (nothing re-derives the config after the set-up)."""
    from jaxspreeze.run import starting, trainer

    # tiny_cfg's run (the compile cache holds its programs), made before the counting
    cfg = tiny_cfg.replace(sinks=(), placement="single")
    calls = {"plan": 0, "get": 0, "resolve": 0}
    real_plan, real_get, real_resolve = starting.plan, algos.get, config.resolve

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)

        return wrapper

    monkeypatch.setattr(starting, "plan", counted("plan", real_plan))
    monkeypatch.setattr(algos, "get", counted("get", real_get))
    monkeypatch.setattr(config, "resolve", counted("resolve", real_resolve))
    result = trainer.train(cfg, quiet=True, save=False)
    assert result.summary["env_steps"] >= cfg.total_steps
    assert calls == {"plan": 1, "get": 1, "resolve": 1}


def test_a_saved_config_is_planned_without_its_checks_again():
    """A finished run's config (here one today's budget check refuses) still gives its
    plan: resolved, its algorithm and env spec, no placement."""
    cfg = RunConfig(total_steps=1000)  # SAC's warm-up of 1000 leaves no room today
    with pytest.raises(ConfigError):
        plan(cfg, on_devices=False)
    saved = RunPlan.saved(cfg)
    assert saved.cfg == config.resolve(cfg).replace(sac={"torso": "mlp"})
    assert saved.algo_spec is algos.get("sac")
    assert saved.placement is None and saved.make_algorithm().name == "sac"


def test_a_refusal_names_the_flag_the_user_gave_not_a_default_that_follows():
    from jaxspreeze.core.errors import ConfigError
    from jaxspreeze.setup.config import RunConfig

    with pytest.raises(ConfigError) as e:
        plan(RunConfig(num_envs=10**9), on_devices=False)
    assert e.value.field == "num_envs" and "raise --buffer-size" in str(e.value)
    with pytest.raises(ConfigError) as e:
        plan(RunConfig(buffer_size=100), on_devices=False)
    assert e.value.field == "buffer_size"
    with pytest.raises(ConfigError) as e:  # both given: the buffer is what is too small
        plan(RunConfig(num_envs=10**9, buffer_size=10**6), on_devices=False)
    assert e.value.field == "buffer_size"


def test_the_plan_names_the_torso_auto_picks():
    """``auto`` becomes the torso built for the env (saved in config.json, compared on
    resume); a config saved before the field existed means ``mlp``."""
    grid = plan(RunConfig(algo="ppo", env="gymnax/Breakout-MinAtar", learning_starts=0), on_devices=False)
    assert grid.algo_config.torso == "minatar"
    vector = plan(RunConfig(algo="ppo", env="gymnax/CartPole-v1", learning_starts=0), on_devices=False)
    assert vector.algo_config.torso == "mlp"
    chosen = RunConfig(algo="ppo", env="gymnax/Breakout-MinAtar", learning_starts=0)
    chosen = chosen.replace(ppo={"torso": "mlp"})
    assert plan(chosen, on_devices=False).algo_config.torso == "mlp"  # given: kept
    old = config.to_dict(grid.cfg)  # a grid run saved before the field: it built an MLP
    del old["ppo"]["torso"]
    saved = config.from_dict(config.saved_before(old))
    assert saved.ppo.torso == "mlp" and RunPlan.saved(saved).algo_config.torso == "mlp"
