"""Populations (``jaxspreeze sweep``): members that differ in member fields, in one program.

Tiny SAC runs on gymnax Pendulum with fixed seeds. A member of a population trains the
same maths as the single run with its values and seed: slot ``m * num_seeds + i`` is keyed
``seed + i`` and its values are written into the fresh state. The population's program
vmaps more slots than the single run's, and on CPU a batch of 4 and a batch of 1 compile
to different kernels (tests/test_seeds.py), so a member equals the single run to float32
rounding; two populations of the same size whose member 0 has the same values give
member 0 bitwise equal (the other members do not leak into it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import fake_devices
import jax
import numpy as np
import pytest

import jaxspreeze
from jaxspreeze import algos
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.run.trainer import train
from jaxspreeze.setup import population
from jaxspreeze.setup.config import from_dict

SAC = algos.get("sac")


def _cfg(tmp_path, name: str, **changes):
    data = {
        "total_steps": 400,
        "num_envs": 4,
        "learning_starts": 100,
        "batch_size": 32,
        "grad_steps": 2,
        "buffer_size": 1_000,
        "chunk_iterations": 25,
        "eval_episodes": 2,
        "eval_every": 200,
        "logdir": str(tmp_path),
        "run_name": name,
        "sinks": ["jsonl", "csv"],
        "sac": {"hidden": [16]},
        **changes,
    }
    return from_dict(data)


def _leaves(tree):
    """The leaves as numpy arrays (typed PRNG keys as their raw data)."""
    raw = lambda x: (
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    )
    return [np.asarray(raw(x)) for x in jax.tree.leaves(tree)]


# ------------------------------------------------------------------ parsing (no JAX runs)
def test_grid_is_the_product_and_field_names_take_every_spelling():
    grid = population.parse_grid(SAC, ["sac.actor-lr=1e-3,3e-4", "gamma=0.9,0.99"])
    assert grid == {"actor_lr": [1e-3, 3e-4], "gamma": [0.9, 0.99]}
    members = population.members_of(0, grid, {}, 1)
    assert members == [
        {"actor_lr": 1e-3, "gamma": 0.9},
        {"actor_lr": 1e-3, "gamma": 0.99},
        {"actor_lr": 3e-4, "gamma": 0.9},
        {"actor_lr": 3e-4, "gamma": 0.99},
    ]
    assert population.decode(population.encode(members)) == members  # exact round trip


def test_samples_are_deterministic_for_a_seed_and_in_range():
    law = population.parse_sample(SAC, ["actor_lr=log-uniform:1e-4:1e-2", "tau=uniform:0:0.1"])
    a = population.members_of(3, {}, law, 8)
    assert a == population.members_of(3, {}, law, 8)
    assert a != population.members_of(4, {}, law, 8)
    assert all(1e-4 <= m["actor_lr"] <= 1e-2 and 0 <= m["tau"] <= 0.1 for m in a)
    grid = population.parse_grid(SAC, ["gamma=0.9,0.99"])
    assert len(population.members_of(3, grid, law, 2)) == 4  # 2 draws per grid point


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("sac.hidden=16,32", "sac.hidden is not a member field of sac"),
        ("num_envs=4,8", "num_envs is not a member field of sac"),
        ("td3.actor_lr=1e-3", "td3.actor_lr is not a field of --algo sac"),
        ("actor_lr", "expected FIELD=VALUES"),
        ("actor_lr=fast", "'fast' is not a number"),
    ],
)
def test_a_refused_grid_names_itself(item, says):
    with pytest.raises(ConfigError, match=says):
        population.parse_grid(SAC, [item])


def test_bad_samples_are_refused():
    for law in ("actor_lr=normal:0:1", "actor_lr=log-uniform:0:1", "actor_lr=uniform:2:1"):
        with pytest.raises(ConfigError):
            population.parse_sample(SAC, [law])


def test_every_member_field_has_a_setter_on_a_state_leaf():
    """Each algorithm's member fields are float fields of its config, and the setter moves
    exactly the leaves it names (a plain init with another value gives the same leaves)."""
    from jaxspreeze.envs import env_spec
    from jaxspreeze.setup.plan import plan

    for spec in algos.all_specs():
        assert spec.member_fields, spec.name
        section = spec.config_cls()
        env = "gymnax/Pendulum-v1"  # CartPole for the discrete-only algorithms (PQN)
        if spec.supports(env_spec(env)) is not None:
            env = "gymnax/CartPole-v1"
        cfg = _cfg("/tmp", "unused", algo=spec.name, env=env)
        run = plan(cfg, on_devices=False).cfg
        key = jax.random.key(0)
        first = spec.make(section, env_spec(env), run).init(key)
        for name, setter in spec.member_fields.items():
            assert isinstance(getattr(section, name), float), (spec.name, name)
            value = getattr(section, name) * 0.5
            changed = type(section)(**{**section.__dict__, name: value})
            algo_b = spec.make(changed, env_spec(env), run)
            set_ = setter(first, jax.numpy.float32(value))
            for x, y in zip(_leaves(set_), _leaves(algo_b.init(key)), strict=True):
                np.testing.assert_array_equal(x, y, err_msg=f"{spec.name}.{name}")


def test_a_population_that_does_not_fit_names_the_members_that_would(monkeypatch):
    from jaxspreeze.setup import memory
    from jaxspreeze.setup.plan import plan

    cfg = _cfg("/tmp", "unused", population=population.encode([{"gamma": 0.9}] * 8))
    planned = plan(cfg, on_devices=False)
    need = memory.estimate_memory(planned)["total"]
    monkeypatch.setattr(memory, "available_memory", lambda device: (need * 3 // 8 + 8, "the host"))
    with pytest.raises(
        ConfigError, match=r"population: a population of 8 members .* 3 members would fit"
    ):
        memory.check_memory(planned)
    assert (
        memory.estimate_memory(plan(cfg.replace(population=()), on_devices=False))["replay_buffer"]
        * 8
        == memory.estimate_memory(planned)["replay_buffer"]
    )


def test_where_one_flag_cannot_make_room_the_flags_that_can_are_named(monkeypatch):
    from jaxspreeze.setup import memory
    from jaxspreeze.setup.plan import plan

    planned = plan(_cfg("/tmp", "unused", buffer_size=100_000), on_devices=False)
    est = memory.estimate_memory(planned)
    buffer = est["replay_buffer"]
    rest = est["total"] - buffer
    assert buffer > rest  # the buffer is the biggest share
    monkeypatch.setattr(memory, "available_memory", lambda device: (rest + 8, "the host"))
    with pytest.raises(ConfigError) as one:  # lowering the buffer alone makes room
        memory.check_memory(planned)
    assert one.value.field == "buffer_size" and " and --" not in str(one.value)
    monkeypatch.setattr(memory, "available_memory", lambda device: (rest // 2, "the host"))
    with pytest.raises(ConfigError) as two:  # it cannot: the others are named too
        memory.check_memory(planned)
    message = str(two.value)
    assert two.value.field == "buffer_size" and "lower --buffer-size (now 100000) and --" in message
    assert "lowering --buffer-size alone cannot fit the run" in message


def test_a_toml_preset_carries_a_sweep_table(tmp_path):
    from jaxspreeze.cli import sweep as cli_sweep

    preset = tmp_path / "pop.toml"
    preset.write_text(
        'algo = "td3"\n[td3]\nhidden = [16]\n'
        '[sweep]\ngrid = {"td3.actor_lr" = [1e-3, 3e-4]}\n'
        'sample = {tau = "uniform:0.001:0.01"}\nmembers = 2\n'
    )
    _, cfg = cli_sweep.parse(["--config", str(preset), "--grid", "gamma=0.9,0.99"])
    members = population.decode(cfg.population)
    assert len(members) == 8 and {m["actor_lr"] for m in members} == {1e-3, 3e-4}
    assert all(0.001 <= m["tau"] <= 0.01 for m in members)


# ------------------------------------------------------------------ the CLI
def test_the_cli_refuses_a_shape_field_before_compiling(run_main, tmp_path, monkeypatch):
    import jaxspreeze.cli.sweep as cli_sweep

    monkeypatch.setattr(cli_sweep, "train", lambda *a, **k: pytest.fail("trained"))
    out = run_main("sweep", "--grid", "sac.hidden=16,32", "--logdir", str(tmp_path))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "sac.hidden" in lines[0] and "separate sweeps" in lines[0]
    out = run_main("sweep", "--grid", "gamma=1.5", "--logdir", str(tmp_path))
    assert out.returncode == 2 and "gamma" in out.stderr
    out = run_main(
        "sweep", "--grid", "gamma=0.9", "--env", "gymnasium/Pendulum-v1", "--logdir", str(tmp_path)
    )
    assert out.returncode == 2 and "--env" in out.stderr
    assert not list(tmp_path.iterdir())  # no run directory


@pytest.mark.parametrize(
    "table, says",
    [
        ('grid = {tau = "01"}', "grid.tau must be a list of numbers, e.g. [0.005, 0.01]; got '01'"),
        ("grid = {tau = 0.01}", "grid.tau must be a list of numbers"),
        ("grid = {tau = [0.01, true]}", "grid.tau must be a list of numbers"),
        ("grid = {tau = []}", "grid.tau must be a list of numbers"),
        ('grid = "tau=0.01"', "grid must be a table, e.g. grid = {gamma = [0.9, 0.99]}"),
        ("sample = {tau = 0.01}", "sample.tau must be a string"),
        ('members = "2"', "members must be an integer >= 1; got '2'"),
        ("members = 0", "members must be an integer >= 1; got 0"),
        ("runs = 3", "[sweep] holds grid, sample and members only"),
    ],
)
def test_a_toml_sweep_table_of_the_wrong_types_is_refused_in_one_line(
    run_main, tmp_path, monkeypatch, table, says
):
    import jaxspreeze.cli.sweep as cli_sweep

    monkeypatch.setattr(cli_sweep, "train", lambda *a, **k: pytest.fail("trained"))
    preset = tmp_path / "pop.toml"
    preset.write_text(f"[sweep]\n{table}\n")
    out = run_main("sweep", "--config", str(preset), "--logdir", str(tmp_path / "runs"))
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 2 and line.startswith(f"jaxspreeze: error: --config: {preset}")
    assert says in line
    assert not (tmp_path / "runs").exists()


SWEEP_OF = textwrap.dedent(
    """
    import resource, sys
    from jaxspreeze import cli
    from jaxspreeze.run import sweeping  # JAX and the trainer loaded: what a sweep imports
    with open("/proc/self/statm") as f:
        now = int(f.read().split()[0]) * resource.getpagesize()
    cap = now + 512 * 2**20  # a population of 10^8 needs gigabytes to be built
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    sys.exit(cli.main(["sweep", *sys.argv[1:]]))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and RLIMIT_AS")
@pytest.mark.parametrize(
    "flags, says",
    [
        (
            ["--sample", "actor_lr=log-uniform:1e-4:1e-2", "--members", "100000000"],
            "--members: 100,000,000 draws x 1 grid point(s) = 100,000,000 members; one "
            "population holds at most 65,536: give --members 65,536 or fewer",
        ),
        (
            [
                "--grid",
                "gamma=" + ",".join(["0.9"] * 300),
                "--grid",
                "tau=" + ",".join(["0.01"] * 300),
            ],
            "--grid: the grids give 90,000 points (90,000 members)",
        ),
        (
            [
                "--grid",
                "gamma=0.9,0.99",
                "--sample",
                "tau=uniform:0.001:0.01",
                "--members",
                "40000",
            ],
            "--members: 40,000 draws x 2 grid point(s) = 80,000 members; one population holds "
            "at most 65,536: give --members 32,768 or fewer",
        ),
    ],
)
def test_a_population_too_big_is_refused_before_it_is_built(tmp_path, flags, says):
    """Refused with one line naming the flag, in a process whose memory could not hold the
    population: the count is checked before any member is drawn."""
    out = subprocess.run(
        [sys.executable, "-c", SWEEP_OF, *flags, "--logdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("jaxspreeze: error: --") and says in line
    assert not list(tmp_path.iterdir())


def test_the_population_size_guard_counts_without_building():
    population.check_size({"gamma": [0.9] * 256}, {}, 1)  # 256 members: fine
    population.check_size({}, {"tau": ("uniform", 0.0, 1.0)}, population.MAX_MEMBERS)
    with pytest.raises(ConfigError, match=r"members: .*give --members 65,536 or fewer"):
        population.members_of(0, {}, {"tau": ("uniform", 0.0, 1.0)}, population.MAX_MEMBERS + 1)


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def pop(tmp_path_factory):
    """A population of 2 members x 2 seeds (actor_lr 1e-3 and 3e-3, gamma 0.95)."""
    tmp = tmp_path_factory.mktemp("pop")
    cfg = _cfg(tmp, "pop", num_seeds=2, sinks=["jsonl", "csv", "plots"])
    result = jaxspreeze.sweep(cfg, grid={"actor_lr": [1e-3, 3e-3], "gamma": [0.95]}, quiet=True)
    return cfg, result


def test_a_member_equals_the_single_run_with_its_values(pop, tmp_path):
    cfg, result = pop
    single = train(
        cfg.replace(run_name="single", sac={"actor_lr": 3e-3, "gamma": 0.95, "hidden": [16]}),
        quiet=True,
    )
    member = jax.tree.map(lambda x: x[2:4], result.state.agent)  # member 1's two seeds
    for a, b in zip(_leaves(single.state.agent), _leaves(member), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # the evaluation of slot m * num_seeds + i starts from seed i's envs, as the single run's
    np.testing.assert_allclose(
        result.summary["final_eval_return_per_seed"][2:4],
        single.summary["final_eval_return_per_seed"],
        rtol=1e-3,
    )
    gammas = np.asarray(result.state.agent.critic.gamma)
    np.testing.assert_array_equal(gammas, np.float32(0.95))


def test_member_zero_does_not_see_the_others_bitwise(pop, tmp_path):
    cfg, result = pop
    other = jaxspreeze.sweep(
        cfg.replace(run_name="other"),
        grid={"actor_lr": [1e-3, 1e-4], "gamma": [0.95]},
        quiet=True,
    )
    first = lambda r: jax.tree.map(lambda x: x[0:2], r.state.agent)
    for a, b in zip(_leaves(first(result)), _leaves(first(other)), strict=True):
        assert a.tobytes() == b.tobytes()


def test_every_member_is_a_run_you_can_use(pop):
    _, result = pop
    summary = json.loads((result.run_dir / "summary.json").read_text())
    members = summary["members"]
    assert [m["values"] for m in members] == [
        {"actor_lr": 1e-3, "gamma": 0.95},
        {"actor_lr": 3e-3, "gamma": 0.95},
    ]
    finals = summary["final_eval_return_per_seed"]
    for m in members:
        assert m["final_return"] == pytest.approx(
            np.mean(finals[2 * m["member"] : 2 * m["member"] + 2])
        )
    # members and seeds named as such: 2 members of 2 seeds, member-major
    assert (summary["num_members"], summary["seeds_per_member"], summary["num_seeds"]) == (2, 2, 2)
    assert summary["final_eval_return_per_member_seed"] == [finals[0:2], finals[2:4]]
    assert summary["final_eval_return_per_member"] == pytest.approx(
        [m["final_return"] for m in members]
    )
    assert result.final_return == summary["final_eval_return"] == pytest.approx(np.mean(finals))
    assert result.final_return_se == summary["final_eval_return_se"]
    for m in members:
        assert m["best_return"] is not None and m["steps_to_best"] in (200, 400)
    assert summary["best_member"] == int(np.argmax([m["final_return"] for m in members]))
    evals = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").open()]
    evals = [r for r in evals if r.get("kind") == "eval"]
    assert all(len(r["eval_return_per_member"]) == 2 for r in evals)
    assert (result.run_dir / "members.png").is_file()  # every member's curve, the best drawn thick
    header = (result.run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "eval_return_member1" in header
    # each member's own policy file loads and acts like its slots of the run's state
    for m in (0, 1):
        agent = jaxspreeze.load(result.run_dir / f"policy-{m}.msgpack")
        obs = np.zeros((3, 3), np.float32)
        action = agent.predict(obs)
        assert np.asarray(action).shape == (3, 1)
        mine = jax.tree.map(lambda x, m=m: x[2 * m], result.state.agent.actor.params)
        for a, b in zip(_leaves(agent.policy.seed(0).params), _leaves(mine), strict=True):
            np.testing.assert_array_equal(a, b)
    # the run itself acts with the best member's first seed (its policy.msgpack holds all)
    best = summary["best_member"]
    assert jaxspreeze.load(result.run_dir).seed_index == 2 * best
    assert jaxspreeze.load(result.run_dir, seed_index=1).seed_index == 1


def test_a_population_resumes_bitwise(pop, tmp_path):
    cfg, result = pop
    grid = {"actor_lr": [1e-3, 3e-3], "gamma": [0.95]}
    half = jaxspreeze.sweep(cfg.replace(run_name="half", total_steps=200), grid=grid, quiet=True)
    resumed = train(
        from_dict(json.loads((half.run_dir / "config.json").read_text())).replace(total_steps=400),
        quiet=True,
        resume=half.run_dir,
    )
    for a, b in zip(_leaves(resumed.state), _leaves(result.state), strict=True):
        assert a.tobytes() == b.tobytes()
    assert len(resumed.summary["members"]) == 2


def test_eval_and_render_pick_a_member(pop, run_main):
    from jaxspreeze.cli.common import member_slot

    _, result = pop
    assert member_slot(str(result.run_dir), 1, 1) == 3  # member 1's second seed
    best = json.loads((result.run_dir / "summary.json").read_text())["best_member"]
    assert member_slot(str(result.run_dir), None, 1) == 2 * best + 1  # no --member: the best
    assert member_slot(str(result.run_dir / "policy-1.msgpack"), None, 1) == 1  # its own seeds
    out = run_main("eval", str(result.run_dir), "--member", "1", "--episodes", "2")
    assert out.returncode == 0 and "member 1" in out.stdout
    assert out.stdout.count(" seed ") == 2, out.stdout
    text = [float(x) for x in re.findall(r"seed \d: return (-?[\d.]+)", out.stdout)]
    out = run_main("eval", str(result.run_dir), "--member", "1", "--episodes", "2", "--json")
    record = json.loads(out.stdout)  # the JSON holds member 1's seeds only, as the text
    assert record["member"] == 1 and len(record["return_mean"]) == 2
    assert [round(x, 2) for x in record["return_mean"]] == text
    out = run_main("eval", str(result.run_dir), "--member", "2")
    assert out.returncode == 2 and "the run has 2 member(s)" in out.stderr


PLACEMENT_CHILD = """
import json, sys
import jax, numpy as np
import jaxspreeze
from jaxspreeze.setup.config import from_dict
base = json.loads(sys.argv[1])
grid = {"actor_lr": [1e-3, 3e-3], "gamma": [0.95]}
out = {}
for placement in ("single", "split", "data"):
    cfg = from_dict({**base, "placement": placement, "run_name": placement})
    out[placement] = jaxspreeze.sweep(cfg, grid=grid, quiet=True).state.agent
one = jaxspreeze.train(from_dict({**base, "placement": "data", "run_name": "one",
    "sac": {"hidden": [16], "actor_lr": 3e-3, "gamma": 0.95}}), quiet=True).state.agent
same = lambda a, b: all(np.asarray(x).tobytes() == np.asarray(y).tobytes()
                        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
member1 = jax.tree.map(lambda x: x[2:4], out["data"])
print(json.dumps({"split": same(out["split"], out["single"]), "data_member": same(member1, one)}))
"""


@pytest.mark.slow  # five trainings on 2 fake devices in a subprocess (minutes on 2 cores)
def test_split_and_data_parallel_populations(tmp_path):
    """On 2 fake CPU devices: a split population equals the single-device one bitwise, and
    member 1 of a data-parallel population equals the data-parallel single run with its
    values bitwise."""
    import os
    import subprocess
    import sys

    base = {
        "total_steps": 400, "num_envs": 4, "learning_starts": 100, "batch_size": 32,
        "grad_steps": 2, "buffer_size": 1000, "chunk_iterations": 25, "eval_episodes": 2,
        "eval_every": 200, "logdir": str(tmp_path), "sinks": ["jsonl"],
        "sac": {"hidden": [16]}, "num_seeds": 2,
    }  # fmt: skip
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2"}
    env["XLA_FLAGS"] = fake_devices.QUICK_XLA_FLAGS  # not the parent's own flags
    proc = subprocess.run(
        [sys.executable, "-c", PLACEMENT_CHILD, json.dumps(base)],
        env=env, capture_output=True, text=True, timeout=1500, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"split": True, "data_member": True}


def test_a_population_run_acts_with_its_best_member_by_default(tmp_path):
    from jaxspreeze.agent.policy import best_slot
    from jaxspreeze.setup.config import RunConfig

    cfg = RunConfig(num_seeds=2, population=("actor_lr=0.001",) * 3)
    assert best_slot(tmp_path, cfg) == 0  # no summary yet
    (tmp_path / "summary.json").write_text(json.dumps({"best_member": 2}))
    assert best_slot(tmp_path, cfg) == 4  # member 2's first seed
    assert best_slot(tmp_path, RunConfig(num_seeds=2)) == 0  # a plain run: slot 0


@pytest.mark.parametrize("values", ["01", 0.1, [], ["a"], [True]])
def test_a_python_grid_entry_must_be_a_list_of_numbers(values):
    """``jaxspreeze.sweep(grid=...)``: a string is not split into its characters ("01" is
    not [0, 1]) and a scalar is not an unexpected TypeError: one ConfigError naming grid."""
    from jaxspreeze.run.sweeping import population_config

    with pytest.raises(ConfigError) as e:
        population_config(jaxspreeze.RunConfig(), grid={"sac.tau": values})
    assert e.value.field == "grid" and "list of numbers" in str(e.value)
    cfg = population_config(jaxspreeze.RunConfig(), grid={"sac.tau": [0.01, 0.02]})
    assert cfg.population == ("tau=0.01", "tau=0.02")
