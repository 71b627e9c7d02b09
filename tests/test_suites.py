"""The JAX suites as device families: ``craftax/``, ``xminigrid/``, ``navix/``.

Each adapter is stepped beside its suite's own step on the same states, actions and keys
(one jitted scan): rewards, terminations, truncations and final observations are the
suite's, the next observation is the suite's or, where an episode ended, the start drawn
ahead; the reset is the suite's reset on the keys the contract hands it. Observations keep
the suite's dtype. The ids are listed (``jaxspreeze envs``), a misspelled id is answered
with the nearest one before JAX starts, an XLand-MiniGrid benchmark id and a missing extra
are one line each. Craftax compiles for minutes on a CPU: its tests are ``slow``, and so
are the training runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxspreeze import cli
from jaxspreeze.cli import envs as envs_cli
from jaxspreeze.cli import fastcheck
from jaxspreeze.core import envids
from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.envs import VecEnv, check_env_name, env_ids
from jaxspreeze.envs import craftax as craftax_family
from jaxspreeze.envs import navix as navix_family
from jaxspreeze.envs import xminigrid as xminigrid_family

FAMILIES = {"craftax": craftax_family, "xminigrid": xminigrid_family, "navix": navix_family}


def needs(family: str):
    """Skip unless the suite is installed."""
    module = FAMILIES[family]
    return pytest.mark.skipif(
        not module.installed(), reason=f"{family} is not installed: {module.INSTALL}"
    )


def listed_version(family: str) -> bool:
    """Whether the installed suite is the version the family table's ids were read from."""
    distribution, version = envids.FAMILIES[family].ids_from
    try:
        return importlib.metadata.version(distribution) == version
    except importlib.metadata.PackageNotFoundError:
        return False


# ------------------------------------------------------------ the adapters against the suites
def against_the_suite(parts, suite_step, steps: int, n: int = 16, seed: int = 0):
    """``steps`` steps of ``n`` envs with uniform random actions, each step also taken by
    ``suite_step(library_state, action) -> (obs, reward, terminated, truncated)`` from the
    same state: (the reset's obs, the per-env keys it was given, the stacked outputs)."""
    env = VecEnv.from_parts(parts, n)

    def run(key):
        k_reset, k_run = jax.random.split(key)
        obs0, state = env.reset(k_reset)

        def body(state, k):
            k_act, k_step = jax.random.split(k)
            action = jax.random.randint(k_act, (n,), 0, env.spec.action_dim)
            # the state this step starts from (an episode that ended: its start)
            suite = jax.vmap(suite_step)(state.inner.current(), action)
            before = state.inner.start_obs
            obs, state, reward, terminated, truncated, final_obs = env.step(k_step, state, action)
            # the start an episode that ended here takes: the plain order draws after the
            # step (the one before it), the lean order at the next step (the one after)
            start_obs = before if state.inner.ended is None else state.inner.start_obs
            return state, (obs, reward, terminated, truncated, final_obs, start_obs, *suite)

        return (
            obs0,
            jax.random.split(k_reset, n),
            jax.lax.scan(body, state, jax.random.split(k_run, steps))[1],
        )

    return jax.jit(run)(jax.random.key(seed))


def check_against_the_suite(
    parts,
    suite_step,
    suite_reset,
    steps: int,
    ends: bool = True,
    reset_close: float = 1.0,
    tile: int = 1,
):
    obs0, reset_keys, out = against_the_suite(parts, suite_step, steps)
    obs, reward, terminated, truncated, final_obs, start_obs, s_obs, s_reward, s_term, s_trunc = out
    dtype = np.dtype(parts.spec.obs_dtype)
    assert obs0.dtype == dtype and obs.dtype == dtype and final_obs.dtype == dtype
    assert obs0.shape[1:] == parts.spec.obs_shape
    # the reset: the suite's, on the first half of each env's key (the second draws its start)
    k_now = jax.vmap(lambda k: jax.random.split(k)[0])(reset_keys)
    same = np.asarray(obs0) == np.asarray(jax.vmap(suite_reset)(k_now))
    if tile > 1:  # an image's tiles (tile x tile pixels, every channel): the same or not
        n, h, w, c = same.shape
        same = same.reshape(n, h // tile, tile, w // tile, tile, c).all(axis=(2, 4, 5))
    assert same.mean() >= reset_close, same.mean()
    # each step: the suite's outputs; the next observation the start drawn ahead where it ended
    np.testing.assert_array_equal(reward, s_reward.astype(np.float32))
    np.testing.assert_array_equal(terminated, s_term)
    np.testing.assert_array_equal(truncated, s_trunc & ~s_term)
    np.testing.assert_array_equal(final_obs, s_obs)
    done = np.asarray(terminated | truncated)
    mask = done.reshape(done.shape + (1,) * (obs.ndim - 2))
    np.testing.assert_array_equal(obs, np.where(mask, start_obs, s_obs))
    if ends:  # the run is long enough for both kinds of end: the check can fail on them
        assert terminated.any() and truncated.any()


@needs("xminigrid")
def test_xminigrid_steps_as_its_suite():
    parts = xminigrid_family.make("MiniGrid-Empty-5x5")
    env, params = parts.render_state
    assert parts.spec.obs_dtype == "uint8" and parts.spec.max_episode_steps == params.max_steps

    def suite_step(timestep, action):
        t = env.step(params, timestep, action)
        return t.observation, t.reward, t.last() & (t.discount == 0), t.last() & (t.discount > 0)

    def suite_reset(key):
        return env.reset(params, key).observation

    check_against_the_suite(parts, suite_step, suite_reset, steps=params.max_steps + 10)


@needs("navix")
def test_navix_steps_as_its_suite():
    parts = navix_family.make("Navix-Empty-5x5-v0")
    env = parts.render_state
    assert parts.spec.obs_dtype == "uint8" and parts.spec.max_episode_steps == env.max_steps

    def suite_step(timestep, action):
        t = env.step(timestep, action)  # navix's own step: it resets only after a done
        return t.observation, t.reward, t.is_termination(), t.is_truncation()

    def suite_reset(key):
        return env.reset(key).observation

    check_against_the_suite(parts, suite_step, suite_reset, steps=env.max_steps + 10)


@pytest.mark.slow
@needs("craftax")
@pytest.mark.parametrize("name", ["Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1"])
def test_craftax_steps_as_its_suite(name):
    """Craftax's own step (its key carried in the state, split as the adapter does); its
    episodes run for hundreds of steps, so the ends are not asserted here (the shared
    auto-reset's are, above)."""
    parts = craftax_family.make(name)
    env, params = parts.render_state
    assert parts.spec.obs_dtype == "float32"

    def suite_step(inner, action):
        state, key = inner
        obs, state, reward, done, _ = env.step(jax.random.split(key)[1], state, action, params)
        truncated = done & (state.timestep >= params.max_timesteps)
        return obs, reward, done & ~truncated, truncated

    def suite_reset(key):
        return env.reset(jax.random.split(key)[0], params)[0]

    # Craftax's world generation thresholds float noise, which XLA fuses differently in two
    # programs: a few tiles of a world may differ between them (1% of the symbolic view's
    # entries; of the pixels' 7 x 7 tiles, each tile many pixels, 5%)
    pixels = "Pixels" in name
    check_against_the_suite(
        parts,
        suite_step,
        suite_reset,
        steps=40,
        ends=False,
        reset_close=0.95 if pixels else 0.99,
        tile=7 if pixels else 1,
    )


# ------------------------------------------------------------------------- ids and refusals
@needs("xminigrid")
def test_xminigrid_lists_the_ids_that_need_no_download(capsys):
    assert cli.main(["envs", "xminigrid"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "xminigrid/MiniGrid-Empty-8x8" in listed and "xminigrid/MiniGrid-DoorKey-5x5" in listed
    assert not any(n.startswith("xminigrid/XLand-") for n in listed)
    assert set(listed) < {f"xminigrid/{n}" for n in envids.FAMILIES["xminigrid"].ids}


@pytest.mark.parametrize("family", ["craftax", "navix"])
def test_a_family_lists_its_ids(family, capsys):
    if not FAMILIES[family].installed():
        pytest.skip(f"{family} is not installed")
    assert cli.main(["envs", family]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == [f"{family}/{n}" for n in envids.FAMILIES[family].ids]


@needs("xminigrid")
def test_a_benchmark_id_is_one_line_naming_what_is_missing():
    with pytest.raises(UnknownEnvError) as e:
        check_env_name("xminigrid/XLand-MiniGrid-R1-9x9")
    text = str(e.value)
    assert len(text.splitlines()) == 1
    assert "benchmark" in text and "xminigrid/MiniGrid-" in text


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_missing_suite_is_one_line_naming_its_extra(family, monkeypatch, capsys):
    module = FAMILIES[family]
    monkeypatch.setattr(module, "installed", lambda: False)
    task = envids.FAMILIES[family].ids[-1]
    with pytest.raises(UnknownEnvError, match=rf'pip install "jaxspreeze\[{family}\]"'):
        check_env_name(f"{family}/{task}")
    assert module.names() == ()
    assert cli.main(["envs", family]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f'"jaxspreeze[{family}]"' in err


@pytest.mark.parametrize(
    ("family", "wrong", "nearest"),
    [
        ("craftax", "Craftax-Clasic-Symbolic-v1", "Craftax-Classic-Symbolic-v1"),
        ("xminigrid", "MiniGrid-DorKey-6x6", "MiniGrid-DoorKey-6x6"),
        ("navix", "Navix-DoorKey-8x8-v1", "Navix-DoorKey-8x8-v0"),
    ],
)
def test_a_misspelled_id_is_answered_with_the_nearest_one(family, wrong, nearest, monkeypatch):
    """The early check (the family table's ids, no JAX) and the full check both name it."""
    if not listed_version(family):
        pytest.skip(f"{family} is not the version the ids were read from")
    for name in (fastcheck.ENV_REGISTRY, envids.FAMILIES[family].registry):
        if name:
            monkeypatch.delitem(sys.modules, name, raising=False)
    said = fastcheck.check_env(f"{family}/{wrong}")
    assert said is not None and f"did you mean {family}/{nearest}?" in said
    monkeypatch.undo()
    with pytest.raises(UnknownEnvError, match=f"did you mean {family}/{nearest}"):
        check_env_name(f"{family}/{wrong}")


CHILD = """
import json, sys
from jaxspreeze.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "jax": "jax" in sys.modules}))
"""


def test_the_misspelling_is_refused_before_jax_starts():
    if not listed_version("xminigrid"):
        pytest.skip("xminigrid is not the version the ids were read from")
    argv = ["train", "--algo", "ppo", "--env", "xminigrid/MiniGrid-Empy-8x8"]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert result == {"rc": 2, "jax": False}, out.stderr
    assert len(err) == 1 and "did you mean xminigrid/MiniGrid-Empty-8x8?" in err[0]


# -------------------------------------------------------------------------- jaxspreeze envs
def test_the_summary_is_one_line_per_family(monkeypatch, capsys):
    """Without a family: name, kind, the ids here, installed or the pip line, in the
    table's order (the registry's answers stood in for)."""

    def fake_ids(family):
        if family == "navix":  # a refusal without an install command: said as it is
            raise UnknownEnvError("navix/ is broken here")
        if family == "craftax":
            raise UnknownEnvError(f"craftax/ needs Craftax: {craftax_family.INSTALL}")
        return [f"{family}/t{i}" for i in range(len(family))]

    import jaxspreeze.envs

    monkeypatch.setattr(jaxspreeze.envs, "env_ids", fake_ids)
    assert cli.main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(envids.FAMILIES) + 1 and "--all" in lines[-1]
    for line, (name, entry) in zip(lines, envids.FAMILIES.items(), strict=False):
        words = line.split()
        assert words[:2] == [name, "host" if entry.host else "device"]
        if name == "craftax":
            assert words[2:] == [
                "-",
                "ids",
                "not",
                "installed:",
                "pip",
                "install",
                '"jaxspreeze[craftax]"',
            ]
        elif name == "navix":
            assert line.endswith(" - ids  navix/ is broken here")
        else:
            assert words[2:] == [str(len(name)), "ids", "installed"]


def test_all_lists_every_familys_ids(monkeypatch, capsys):
    import jaxspreeze.envs

    monkeypatch.setattr(jaxspreeze.envs, "env_ids", lambda f: [f"{f}/a", f"{f}/b"])
    assert cli.main(["envs", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        f"{next(iter(envids.FAMILIES))} (2):",
        *(f"  {next(iter(envids.FAMILIES))}/{t}" for t in "ab"),
    ]
    assert len(lines) == 3 * len(envids.FAMILIES)


def test_the_summary_reads_the_real_registry_for_one_family(monkeypatch):
    """``summary_lines`` on the real registry (the other families stood in for)."""
    import jaxspreeze.envs

    real = jaxspreeze.envs.env_ids
    monkeypatch.setattr(jaxspreeze.envs, "env_ids", lambda f: real(f) if f == "brax" else ["x/y"])
    line = next(s for s in envs_cli.summary_lines() if s.startswith("brax "))
    assert line.split()[1:] == ["device", str(len(env_ids("brax"))), "ids", "installed"]


# ------------------------------------------------------------------------- training, slow
@pytest.mark.slow
@pytest.mark.parametrize(
    "env",
    [
        "xminigrid/MiniGrid-Empty-5x5",
        "xminigrid/MiniGrid-DoorKey-5x5",
        "xminigrid/MiniGrid-FourRooms",
        "navix/Navix-Empty-5x5-v0",
        "navix/Navix-DoorKey-5x5-v0",
        "navix/Navix-FourRooms-v0",
        "craftax/Craftax-Classic-Symbolic-v1",
        "craftax/Craftax-Symbolic-v1",
        "craftax/Craftax-Classic-Pixels-v1",
    ],
)
def test_ppo_trains_with_the_defaults(env, tmp_path):
    family = env.partition("/")[0]
    if not FAMILIES[family].installed():
        pytest.skip(f"{family} is not installed")
    from jaxspreeze.run.trainer import train
    from jaxspreeze.setup import config

    cfg = config.RunConfig(algo="ppo", env=env, total_steps=2048, logdir=str(tmp_path))
    summary = train(cfg, quiet=True).summary
    assert np.isfinite(summary["final_eval_return"]) and summary["env_steps"] >= 2048
