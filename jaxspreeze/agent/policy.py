"""The trained policy of a run: ``<run>/policy.msgpack`` (flax serialization).

A small, separate format for rendering and evaluating a finished run: the actor side of
every seed (leaves ``[S, ...]``). Full resumable checkpoints are a different module.
:func:`save_policy_file` writes a standalone file that also holds the run's config (what
``jaxspreeze.load(...).save(path)`` writes); :func:`load_policy` reads either.
The policy acts on the observation of the run's env built with the run's observation
keys (``make_env(cfg.env, n, cfg.obs_keys)``); with asymmetric keys it reads only the
actor's columns of it.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import serialization

from jaxspreeze.algos import members
from jaxspreeze.algos.base import Algorithm
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import PyTree
from jaxspreeze.setup import config as config_lib
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import RunPlan

POLICY_FILE = "policy.msgpack"
FILE_FORMAT = "jaxspreeze-policy"  # the marker of a standalone policy file


def member_file(member: int) -> str:
    """The standalone policy file of a population's member ``member`` (``jaxspreeze sweep``)."""
    return f"policy-{member}.msgpack"


class Policy(NamedTuple):
    """A run's config, its algorithm (bound to the env) and the actor of every seed."""

    cfg: RunConfig
    algo: Algorithm
    actor: PyTree  # leaves [S, ...]
    seed_index: int = 0  # the seed to act with (a standalone policy file names one)

    def seed(self, i: int = 0) -> PyTree:
        """The actor of seed ``i`` (leaves without the seed axis)."""
        return jax.tree.map(lambda x: x[i], self.actor)


def save_policy(run_dir: str | Path, actor: PyTree, name: str = POLICY_FILE) -> Path:
    """Write the actor of every seed to ``<run_dir>/<name>`` (``policy.msgpack``, or
    ``policy-best.msgpack`` for the best evaluation's), atomically; returns the path."""
    path = Path(run_dir) / name
    host = jax.tree.map(np.asarray, jax.device_get(actor))
    tmp = path.with_name(f".{name}.tmp")
    tmp.write_bytes(serialization.to_bytes(host))
    os.replace(tmp, path)
    return path


def save_policy_file(path: str | Path, policy: Policy, seed_index: int = 0) -> Path:
    """Write ``policy`` as one self-contained file (its config, the actor of every seed and
    the seed to act with), which :func:`load_policy` reads back; returns the path."""
    path = Path(path)
    host = jax.tree.map(np.asarray, jax.device_get(policy.actor))
    data = {
        "format": FILE_FORMAT,
        "version": 1,
        "config": json.dumps(config_lib.to_dict(policy.cfg)),
        "seed_index": int(seed_index),
        "actor": serialization.to_state_dict(host),
    }
    if path.is_dir():  # os.replace would fail after the temporary file is written
        raise IsADirectoryError(
            errno.EISDIR, "is a directory: give a file path, e.g. DIR/agent.msgpack", str(path)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(serialization.msgpack_serialize(data))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no temporary file left behind
        raise
    return path


def best_slot(run_dir: str | Path, cfg: RunConfig) -> int:
    """The slot a run acts with by default: 0, or for a population (``jaxspreeze sweep``)
    the first seed of the best member its ``summary.json`` names (0 before it is written)."""
    if cfg.members <= 1:
        return 0
    try:
        best = json.loads((Path(run_dir) / "summary.json").read_text()).get("best_member")
    except (OSError, ValueError):
        return 0
    return int(best) * cfg.num_seeds if isinstance(best, int) else 0


def load_policy(path: str | Path) -> Policy:
    """Read a policy: a finished run directory (its ``config.json`` and ``policy.msgpack``),
    a run's policy file (``config.json`` read beside it) or a file :func:`save_policy_file`
    wrote (self-contained). A population's ``policy.msgpack`` holds every member's seeds and
    acts with the best member's first seed (:func:`best_slot`)."""
    path = Path(path)
    file = path / POLICY_FILE if path.is_dir() else path
    if not file.exists():
        if path.is_dir():
            raise FileNotFoundError(
                f"{file} not found: the run has no saved policy (train it to the end first)"
            )
        raise FileNotFoundError(f"{file} not found: give a run directory or a policy file")
    damaged = (
        f"{file} is damaged or is not this run's policy ({{}}); "
        "evaluate the run's checkpoint instead (jaxspreeze eval RUN_DIR)"
    )
    try:
        state = serialization.msgpack_restore(file.read_bytes())
    except Exception as e:  # msgpack raises many kinds for a damaged file
        raise ValueError(damaged.format(f"{type(e).__name__}: {e}")) from None
    seed_index = 0
    standalone = isinstance(state, dict) and state.get("format") == FILE_FORMAT
    config_file = file.parent / "config.json"
    try:
        if standalone:
            config_file = file
            cfg = config_lib.from_dict(config_lib.saved_before(json.loads(state["config"])))
            seed_index, state = int(state["seed_index"]), state["actor"]
        else:
            cfg = config_lib.load(config_file)
            seed_index = best_slot(file.parent, cfg)
        saved = RunPlan.saved(cfg)  # the saved run's plan: its algorithm bound to its env
    except ConfigError as e:
        raise ValueError(f"{config_file}: {str(e).split(': ', 1)[1]}") from None
    cfg, algo = saved.cfg, saved.make_algorithm()
    keys = jax.random.split(jax.random.key(0), cfg.slots)
    target: Any = jax.eval_shape(jax.vmap(algo.init), keys).actor
    predates = _added_missing(state, serialization.to_state_dict(target))
    if predates:  # a file from before some hyperparameter leaves: the config's values
        fresh = serialization.to_state_dict(jax.device_get(jax.jit(jax.vmap(algo.init))(keys)))
        for where in predates:
            _put_in(state, where, _get_in(fresh["actor"], where))
    try:
        actor = serialization.from_state_dict(target, state)
        actor = jax.tree.map(np.asarray, actor)
        _check_shapes(actor, target)
    except Exception as e:  # flax raises many kinds for a state of another shape
        raise ValueError(damaged.format(f"{type(e).__name__}: {e}")) from None
    return Policy(cfg, algo, actor, seed_index)


def _added_missing(saved: Any, want: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The keys (paths) of the added hyperparameter leaves (``members.ADDED_LEAVES``) that
    the state dict ``want`` has and the saved one ``saved`` lacks (a file written before)."""
    if not isinstance(saved, dict) or not isinstance(want, dict):
        return []
    out = []
    for k, v in want.items():
        if k in saved:
            out += _added_missing(saved[k], v, (*prefix, k))
        elif members.is_added(str(k)):
            out.append((*prefix, k))
    return out


def _get_in(tree: dict[str, Any], where: tuple[str, ...]) -> Any:
    for k in where:
        tree = tree[k]
    return tree


def _put_in(tree: dict[str, Any], where: tuple[str, ...], value: Any) -> None:
    _get_in(tree, where[:-1])[where[-1]] = value


def _check_shapes(actor: PyTree, target: PyTree) -> None:
    """ValueError unless every leaf of ``actor`` has the shape and dtype of ``target``'s."""
    for got, want in zip(jax.tree.leaves(actor), jax.tree.leaves(target), strict=True):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(f"a leaf is {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
