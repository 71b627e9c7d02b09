"""`jaxspreeze score`'s peers with their own settings, one evaluation protocol per row,
and `--peer-settings own|matched|both`.

The own-settings table (jaxspreeze/score/settings.py) is the one place the peers'
published settings live: every entry names its source, and every row a built-in peer
runs has an entry from which the peer's arguments build (no peer library needed: the
builders are plain Python). The protocol: every side of a row is evaluated on the same
number of episodes with fresh starts; rejax's policy by jaxspreeze's evaluator from the
key jaxspreeze's side draws its starts from, SBX's on the gymnasium starts jaxspreeze's
host evaluator uses. The CLI runs with stand-in sides (no JAX in the sides' processes).
"""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxspreeze.cli import main
from jaxspreeze.core import envids
from jaxspreeze.score import goal as score_goal
from jaxspreeze.score import peers as score_peers
from jaxspreeze.score import runners as score
from jaxspreeze.score import runs as score_run
from jaxspreeze.score import settings as score_settings
from jaxspreeze.score import sides as score_sides
from jaxspreeze.score import tasks as score_tasks

ROW = "sac-Pendulum-v1"
PEERS = {s.name: s for s in score_sides.BUILTIN if s.name != "jaxspreeze"}


def _claimed():
    """(peer, row) for every row a built-in peer runs."""
    return [
        (peer, task)
        for task in score_tasks.ROWS.values()
        for peer, side in PEERS.items()
        if side.runs(task.family, task.algo)
    ]


def test_every_entry_names_its_source_and_every_claimed_row_has_one():
    keys = [(p.peer, p.algo, p.env) for p in score_settings.TABLE]
    assert len(keys) == len(set(keys))  # one entry per (peer, algo, env)
    for entry in score_settings.TABLE:
        assert entry.source and entry.budget, entry
        assert entry.peer in PEERS
        # an entry is its peer's published options (the budget among them), or its
        # documented defaults, which it says
        assert entry.defaults or entry.budget in entry.options, entry
        if entry.defaults:
            assert "default" in entry.source and "publishes no" in entry.source
    claimed = {(peer, t.algo, t.env) for peer, t in _claimed()}
    assert claimed == set(keys)  # no row without settings, no entry without a row


@pytest.mark.parametrize("peer, task", _claimed(), ids=lambda x: getattr(x, "name", x))
def test_the_peers_arguments_build_for_every_row_it_claims(peer, task):
    """Scaled to the row's budget only: every other option is the published one."""
    # what the builders read of the row's config: the budget and the seed
    cfg = SimpleNamespace(total_steps=12_345, seed=0)
    entry = score_settings.published(peer, task.algo, task.env)
    own = score_settings.own(peer, task, 12_345)
    assert own.options[entry.budget] == 12_345 and own.source == entry.source
    unchanged = {k: v for k, v in own.options.items() if k != entry.budget}
    assert unchanged == {
        k: v for k, v in entry.options.items() if k != entry.budget and v is not None
    }
    assert own.record()["kind"] == "own"
    if peer == "rejax":
        options, _ = score_peers.rejax_own_config(cfg, task)
        assert options["total_timesteps"] == 12_345
        assert options["eval_freq"] == task.eval_every and options["skip_initial_evaluation"]
        assert "env" not in options and None not in options.values()
        # rejax pops a network's activation from its table: the table must not change
        for v in options.values():
            if isinstance(v, dict):
                v.pop("activation", None)
        assert score_peers.rejax_own_config(cfg, task)[0] == dict(
            score_settings.own(peer, task, 12_345).options,
            eval_freq=task.eval_every,
            skip_initial_evaluation=True,
        )
    elif peer == "brax":
        kw, network, _ = score.brax_own_kwargs(cfg, task)
        assert kw["num_timesteps"] == 12_345 and kw["deterministic_eval"]
        assert kw["num_eval_envs"] == score_settings.episodes(task)
        # evaluations no closer than one of brax's updates (else brax overruns the budget)
        per_update = score.brax_steps_per_update(task.algo, kw)
        assert (kw["num_evals"] - 1) * per_update <= max(12_345, 2 * per_update)
        assert "network_factory" not in kw and isinstance(network, dict)
    else:
        n_envs, kwargs, _ = score_peers.sbx_own_options(task, 12_345)
        assert n_envs >= 1 and "n_timesteps" not in kwargs and "policy" not in kwargs
        assert kwargs.get("action_noise", ("normal", 0.1))[0] == "normal"


def test_the_table_is_read_from_one_place(monkeypatch):
    """A changed entry in settings.TABLE is what every peer's builder then gives."""
    task = score_tasks.ROWS["ppo-inverted_pendulum"]
    entry = score_settings.published("brax", "ppo", task.env)
    changed = score_settings.Published(
        entry.peer, entry.algo, entry.env, {**entry.options, "learning_rate": 0.123},
        "a test's table", entry.budget,
    )  # fmt: skip
    table = tuple(changed if p is entry else p for p in score_settings.TABLE)
    monkeypatch.setattr(score_settings, "TABLE", table)
    kw, _, used = score.brax_own_kwargs(SimpleNamespace(total_steps=300_000, seed=0), task)
    assert kw["learning_rate"] == 0.123 and used.source == "a test's table"


def test_brax_updates_beyond_the_budget_are_said_and_its_cadence_is_reported():
    """brax's train() evaluates between whole updates, the budget split over num_evals - 1
    epochs and rounded up: its own PPO on inverted_pendulum (updates of 1024 x 32 x 5 =
    163,840 env steps) evaluates once, at 327,680; on reacher one update (256 x 32 x 50 x
    4) is 1,638,400, 5.5x a 300k budget, which its settings' note says."""
    small = SimpleNamespace(total_steps=300_000, seed=0)
    task = score_tasks.ROWS["ppo-inverted_pendulum"]
    kw, _, used = score.brax_own_kwargs(small, task)
    assert score.brax_eval_every(task, kw) == 327_680 == score.brax_env_steps(task, kw)
    assert "make brax run" not in used.note  # 1.09x: whole updates, as every side's
    task = score_tasks.ROWS["ppo-reacher"]
    kw, _, used = score.brax_own_kwargs(small, task)
    assert score.brax_eval_every(task, kw) == 1_638_400
    assert "make brax run 1,638,400, 5.5x the row's budget (300,000)" in used.note
    assert score_settings.protocol(task, "brax", 1_638_400)["every"] == 1_638_400
    assert score_settings.protocol(task, "brax")["every"] == task.eval_every
    # SAC: the prefill's env steps first, then epochs of whole actor steps
    sac = score_tasks.ROWS["sac-reacher"]
    kw = {"num_timesteps": 20_000, "num_envs": 4, "min_replay_size": 1_001, "num_evals": 11}
    assert score.brax_eval_every(sac, kw) == 4 * -(-(20_000 - 1_004) // (10 * 4)) == 1_900
    assert score.brax_env_steps(sac, kw) == 1_004 + 10 * 1_900


def test_a_published_warmup_beyond_the_budget_is_said():
    task = score_tasks.ROWS["td3-HalfCheetah-v5"]  # rl-zoo3: learning_starts 10,000
    assert "does not learn within it" in score_settings.own("sbx", task, 8_000).note
    assert "does not learn" not in score_settings.own("sbx", task, 30_000).note


# ----------------------------------------------------------------------------- protocol
def test_every_side_of_a_row_has_the_rows_episodes():
    task = score_tasks.ROWS[ROW]  # jaxspreeze's side: its preset planned with them
    assert score.preset_config(task).cfg.eval_episodes == score_settings.episodes(task)
    # brax's side, its own settings and matched (what brax_kwargs reads of a plan)
    task = score_tasks.ROWS["sac-inverted_pendulum"]
    cfg = SimpleNamespace(total_steps=20_000, num_envs=8, seed=0, batch_size=128, grad_steps=8,
                          rollout_steps=1, learning_starts=1000, buffer_size=20_000)  # fmt: skip
    a = SimpleNamespace(gamma=0.99, critic_lr=1e-3, tau=0.005, hidden=(64, 64))
    planned = SimpleNamespace(cfg=cfg, algo_config=a)
    n = score_settings.episodes(task)
    assert score.brax_kwargs(planned, task)["num_eval_envs"] == n
    assert score.brax_own_kwargs(cfg, task)[0]["num_eval_envs"] == n
    # unset: jaxspreeze's default (128 on a device env, 16 on a host env)
    assert score_settings.episodes(score_tasks.ROWS["sac-Pendulum-v1"]) == 128
    assert score_settings.episodes(score_tasks.ROWS["sac-gymnasium-Pendulum-v1"]) == 16
    # a row on a family whose default depends on the backend names its own count
    for task in score_tasks.ROWS.values():
        family = envids.family_of(task.env)
        assert task.eval_episodes or not family.cpu_eval_episodes, task.name


def _toward_zero(actor, obs):
    """A stand-in peer's batched deterministic policy (the actor scales a fixed action)."""
    return jnp.broadcast_to(actor["w"], (obs.shape[0], 1)) * jnp.tanh(obs[:, :1])


def test_a_peer_policy_is_evaluated_as_jaxspreezes_side_is():
    """rejax's evaluation (jaxspreeze's evaluator, the seed's evaluation key folded with
    the step) draws what jaxspreeze's side draws: the same step and seed the same starts,
    another step fresh ones."""
    from jaxspreeze.agent.evaluate import eval_seed, make_evaluate, make_seed_evaluate, start_key
    from jaxspreeze.envs import make_env

    env = make_env("gymnax/Pendulum-v1", 4)
    policy = score_peers.PeerPolicy(_toward_zero)
    actor = {"w": jnp.float32(-2.0)}
    key = jax.random.split(jax.random.key(eval_seed(3)), 1)[0]  # as run_rejax
    peer = jax.jit(make_evaluate(policy, env))
    ours = make_seed_evaluate(policy, env, jax.random.split(jax.random.key(eval_seed(3)), 1))
    for step in (1000, 2000):
        a = peer(actor, start_key(key, step))
        b = ours(jax.tree.map(lambda x: x[None], actor), step)
        np.testing.assert_allclose(a.return_mean, b.return_mean[0], rtol=1e-6)
        np.testing.assert_allclose(a.return_se, b.return_se[0], rtol=1e-6)
    first, second = (peer(actor, start_key(key, s)).return_mean for s in (1000, 2000))
    assert first != second  # fresh starts at every evaluation


def test_sbx_is_evaluated_on_the_host_evaluators_starts():
    """SBX's evaluation resets episode j with the seed jaxspreeze's host evaluator gives
    env j: a stand-in model's returns equal the host evaluator's, step by step."""
    pytest.importorskip("gymnasium")
    from jaxspreeze.agent.evaluate import eval_seed, make_host_evaluate

    class Model:  # SB3's predict of a zero action
        def predict(self, obs, deterministic=False):
            assert deterministic
            return np.zeros(1, np.float32), None

    policy = score_peers.PeerPolicy(lambda actor, obs: jnp.zeros((obs.shape[0], 1)))
    host = make_host_evaluate(policy, "gymnasium/Pendulum-v1", 3, eval_seed(5))
    for step in (1000, 2000):
        mean, se = score_peers.sbx_evaluate(Model(), "Pendulum-v1", 3, 5, step)
        ours = host({"w": np.zeros((1,))}, step)
        np.testing.assert_allclose(mean, ours.return_mean[0], rtol=1e-4)
        np.testing.assert_allclose(se, ours.return_se[0], rtol=1e-3)
    assert score_peers.sbx_evaluate(Model(), "Pendulum-v1", 3, 5, 1000) != (
        score_peers.sbx_evaluate(Model(), "Pendulum-v1", 3, 5, 2000)
    )


# ----------------------------------------------------------------------------- the CLI
FAKE = textwrap.dedent(
    '''
    """Stand-in sides for tests/test_score_settings.py (no JAX)."""
    import os, time
    from jaxspreeze.score.rows import row
    from jaxspreeze.score.sides import Side

    def _run(name, returns, task, run, kind):
        with open(os.environ["FAKE_SCORE_LOG"], "a") as f:
            f.write(f"{name} {run.seed} {run.peer_settings}\\n")
        curve = [{"env_steps": 1000 * (i + 1), "return": r, "return_se": 2.0,
                  "wall_s": 0.1 * (i + 1), "command_s": 1.0 + i}
                 for i, r in enumerate(returns)]
        settings = {"kind": kind, "source": f"{name}: {kind} source", "defaults": False,
                    "note": "", "options": {"learning_rate": 0.01 if kind == "own" else 3e-4}}
        evaluation = {"episodes": 128, "every": 1000, "starts": "fresh at every evaluation",
                      "deterministic": True, "by": f"{name}'s evaluator"}
        return row(name, task, curve, compile_s=0.5, settings=settings,
                   evaluation=evaluation)

    def run_ours(task, run):
        return _run("jaxspreeze", [-900.0, -150.0], task, run, "preset")

    def run_peer(task, run):  # its own settings reach the threshold, matched ones do not
        own = run.peer_settings == "own"
        return _run("peer", [-150.0] if own else [-900.0, -800.0], task, run,
                    run.peer_settings)

    SIDES = [
        Side("jaxspreeze", "fakeboth:run_ours", ("*",), ("*",)),
        Side("peer", "fakeboth:run_peer", ("gymnax",), ("*",)),
    ]
    '''
)


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    (tmp_path / "fakeboth.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import os

    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep + path if path else ''}")
    monkeypatch.setenv(score_sides.PLUGIN_VAR, "fakeboth:SIDES")
    log = tmp_path / "runs.log"
    monkeypatch.setenv("FAKE_SCORE_LOG", str(log))
    return log


def test_both_gives_two_labelled_columns(stand_ins, tmp_path):
    out = tmp_path / "out"
    argv = ["score", "--rows", ROW, "--seeds", "1", "--no-warm", "--out", str(out)]
    assert main([*argv, "--sides", "jaxspreeze", "peer", "--peer-settings", "both"]) == 0
    # jaxspreeze's side runs its preset once; the peer its own settings, then matched
    runs = [line.split() for line in stand_ins.read_text().splitlines()]
    assert [(side, kind) for side, _, kind in runs] == [
        ("jaxspreeze", "own"),  # (the flag reaches it; it runs its preset either way)
        ("peer", "own"),
        ("peer", "matched"),
    ]
    doc = json.loads((out / "score.json").read_text())
    assert doc["peer_settings"] == ["own", "matched"]
    assert [(r["side"], r["settings"]) for r in doc["runs"]] == [
        ("jaxspreeze", "preset"),
        ("peer", "own"),
        ("peer", "matched"),
    ]
    labels = [s["label"] for s in doc["summary"]]
    assert labels == ["jaxspreeze", "peer (own)", "peer (matched)"]
    own, matched = doc["summary"][1:]
    assert (own["reached"], matched["reached"]) == (1, 0)
    assert own["used"]["source"] == "peer: own source" and own["final_return_se"] == 2.0

    # the goal: one verdict per peers' settings (the matched peer never reaches it)
    verdicts = score_goal.judge(doc["summary"])
    assert [(v["peer_settings"], v["reference"]) for v in verdicts] == [
        ("own", "peer (own)"),
        ("matched", "peer (matched)"),
    ]
    assert verdicts[1]["verdict"] == "met: jaxspreeze reaches it, the reference does not"
    assert not verdicts[0]["met"]  # 2.0 s against the peer's 1.0 s

    md = (out / "score.md").read_text()
    assert f"| {ROW} (gymnax/Pendulum-v1, thr. -200) | peer (own) | 1/1 |" in md
    assert f"| {ROW} (gymnax/Pendulum-v1, thr. -200) | peer (matched) | 0/1 |" in md
    assert "| -150.0 ± 2.0 |" in md
    assert "| peers' settings |" in md and f"| {ROW} | cold | matched |" in md
    assert "jaxspreeze's side runs each row's preset (not its defaults)" in md
    # the settings and their source beside each side, and how each was evaluated
    assert f"- {ROW}, peer (own): settings from peer: own source: learning_rate=0.01." in md
    assert "peer (matched): settings from peer: matched source: learning_rate=0.0003." in md
    assert "on 128 episodes, starts fresh at every evaluation, by peer's evaluator." in md


def test_own_is_the_default_and_matched_is_todays(stand_ins, tmp_path):
    for flags, kinds in (([], ["own"]), (["--peer-settings", "matched"], ["matched"])):
        out = tmp_path / "-".join(kinds)
        argv = ["score", "--rows", ROW, "--seeds", "1", "--no-warm", "--out", str(out), *flags]
        argv += ["--sides", "jaxspreeze", "peer"]
        assert main(argv) == 0
        doc = json.loads((out / "score.json").read_text())
        assert [r["settings"] for r in doc["runs"] if r["side"] == "peer"] == kinds


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--rows", ROW, "--peer-settings", "mine"],
         "--peer-settings: choose from own, matched, both, got 'mine'"),
        (["--rows", ROW, "--run-timeout-s", "-5"],
         "--run-timeout-s: must be a number of seconds > 0, got -5"),
        (["--rows", ROW, "--out", "/proc/no-such/report"],
         "--out: /proc/no-such/report cannot be made"),
        (["--merge", "{tmp}", "--peer-settings", "both"], "--merge runs nothing: leave out --peer-settings"),
    ],
)  # fmt: skip
def test_refusals_come_before_any_side_runs(stand_ins, tmp_path, monkeypatch, capsys, flags, says):
    monkeypatch.setattr(score_run, "run_one", lambda *a, **k: pytest.fail("a side ran"))
    flags = [f.format(tmp=tmp_path) for f in flags]
    assert main(["score", *flags]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"jaxspreeze: error: {says}"), line
    assert not stand_ins.exists()


def test_merge_keeps_a_peers_own_and_matched_columns_apart(tmp_path):
    """A run of a peer's matched settings does not replace a run of its own settings."""
    from jaxspreeze.score import merge as score_merge
    from jaxspreeze.score import rows as score_rows

    task = score_tasks.ROWS[ROW]
    curve = [{"env_steps": 1000, "return": -150.0, "wall_s": 1.0, "command_s": 2.0}]
    folders = []
    for kind in ("own", "matched"):
        run = {"task": ROW, "side": "peer", "settings": kind, "seed": 0, "cache": "cold",
               "row": score_rows.row("peer", task, curve)}  # fmt: skip
        doc = {"command": kind, "scale": "cpu", "rows": [ROW], "peer_settings": [kind],
               "runs": [run], "summary": [], "plots": []}  # fmt: skip
        folder = tmp_path / kind
        folder.mkdir()
        score_run.write(doc, folder)
        folders.append(folder)
    merged = score_merge.merge(folders, "merge")
    assert merged["replaced"] == [] and merged["peer_settings"] == ["own", "matched"]
    assert [(r["settings"], r["source"]) for r in merged["runs"]] == [("own", 0), ("matched", 1)]


def test_a_peer_with_its_own_settings_does_not_need_the_presets_plan():
    """A budget the preset's warm-up does not fit is refused for the preset's runs only."""
    from jaxspreeze.core.errors import ConfigError

    task = score_tasks.ROWS[ROW]  # sac_pendulum: 1,000 warm-up steps
    cfg, planned = score.peer_config(task, "own", total_steps=500, seed=4)
    assert planned is None and (cfg.total_steps, cfg.seed) == (500, 4)
    with pytest.raises(ConfigError, match="total_steps"):
        score.peer_config(task, "matched", total_steps=500)


# ----------------------------------------------------------------------------- PQN, DQN
Q_ROWS = ("pqn-CartPole-v1", "pqn-Acrobot-v1", "dqn-CartPole-v1", "dqn-Acrobot-v1")
MINATAR_ROWS = ("pqn-Breakout-MinAtar", "pqn-SpaceInvaders-MinAtar")


def test_the_value_based_rows_and_their_peers():
    """PQN and DQN on CartPole (475) and Acrobot (-100) and PQN on two MinAtar games, each
    run by rejax too; PQN's MinAtar rows name PPO's row of the same game as the one to
    beat; rejax's MinAtar entries are its defaults and say that it flattens the grid."""
    rows = score_tasks.ROWS
    assert {rows[n].threshold for n in Q_ROWS if "CartPole" in n} == {475.0}
    assert {rows[n].threshold for n in Q_ROWS if "Acrobot" in n} == {-100.0}
    for name in (*Q_ROWS, *MINATAR_ROWS):
        assert PEERS["rejax"].runs(rows[name].family, rows[name].algo), name
        assert score_settings.published("rejax", rows[name].algo, rows[name].env), name
    for name in MINATAR_ROWS:
        task = rows[name]
        (ppo,) = task.versus
        assert rows[ppo].algo == "ppo" and rows[ppo].env == task.env
        # a threshold no random policy scores (Breakout-MinAtar 0.33, SpaceInvaders 4.0)
        assert task.threshold >= 3 * {"Breakout": 0.33, "SpaceInvaders": 4.0}[name[4:-8]]
        entry = score_settings.published("rejax", "pqn", task.env)
        assert entry.defaults and "flattens" in entry.note
    # the rows' presets plan on their envs (PQN's classic-control preset on Acrobot too)
    assert score.preset_config(rows["pqn-Acrobot-v1"]).cfg.env == "gymnax/Acrobot-v1"


def test_rejax_matched_to_the_q_presets():
    """The preset's sizes in rejax's names: PQN's minibatches from the batch, DQN's updates
    per iteration from grad_steps and its target's polyak per iteration (rejax moves the
    target once per iteration, jaxspreeze tau every gradient step: (1 - 0.01) ** 4)."""
    pqn = score_tasks.ROWS["pqn-CartPole-v1"]
    got = score_peers._rejax_config(score.preset_config(pqn), pqn)
    assert (got["num_envs"], got["num_steps"], got["num_minibatches"]) == (32, 32, 8)
    assert (got["num_epochs"], got["td_lambda"], got["learning_rate"]) == (4, 0.9, 1e-3)
    assert (got["eps_end"], got["exploration_fraction"]) == (0.05, 0.25)
    assert "agent_kwargs" not in got  # rejax's PQN takes no hidden sizes
    dqn = score_tasks.ROWS["dqn-CartPole-v1"]
    got = score_peers._rejax_config(score.preset_config(dqn), dqn)
    assert (got["num_envs"], got["num_epochs"], got["batch_size"]) == (8, 4, 128)
    assert (got["fill_buffer"], got["buffer_size"], got["ddqn"]) == (1000, 10_000, True)
    assert got["polyak"] == pytest.approx(0.99**4) and got["target_update_freq"] == 1
    assert got["agent"] == "QNetwork" and got["agent_kwargs"] == {"activation": "relu"}


def test_a_q_networks_policy_is_its_greedy_action():
    """rejax's PQN and DQN act by the argmax of the Q-values in evaluation (a stand-in
    train state with a linear Q-network)."""
    w = jnp.array([[1.0, -1.0, 0.0], [0.0, 2.0, -3.0]])

    class Agent:
        def apply(self, params, obs):
            return obs @ params

    algo = SimpleNamespace(agent=Agent(), normalize_observations=False)
    ts = SimpleNamespace(q_ts=SimpleNamespace(params=w))
    obs = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [1.0, 1.0]])
    act = score_peers.rejax_batched_act(algo)(ts, obs)
    # q rows: [1, -1, 0], [0, 2, -3], [0, -2, 3], [1, 1, -3] (ties: the first)
    assert act.tolist() == [0, 1, 2, 0] and act.dtype == jnp.int32


@pytest.mark.slow
@pytest.mark.parametrize("name", (*Q_ROWS, *MINATAR_ROWS))
def test_rejax_builds_its_q_learners_for_every_row(name):
    """rejax itself takes the options, its own and matched (no training)."""
    rejax = pytest.importorskip("rejax")
    import gymnax

    task = score_tasks.ROWS[name]
    env, params = gymnax.make(task.env.partition("/")[2])
    cls = {"pqn": rejax.PQN, "dqn": rejax.DQN}[task.algo]
    cfg = SimpleNamespace(total_steps=task.eval_every * 2, seed=0)
    own, _ = score_peers.rejax_own_config(cfg, task)
    matched = score_peers._rejax_config(score.preset_config(task), task)
    for options in (own, matched):
        algo = cls.create(env=score_peers.FiveValueEnv(env), env_params=params, **options)
        assert algo.total_timesteps == options["total_timesteps"]
