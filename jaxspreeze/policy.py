"""The trained policy of a run: ``<run>/policy.msgpack`` (flax serialization).

A small, separate format for rendering and evaluating a finished run: the actor side of
every seed (leaves ``[S, ...]``). Full resumable checkpoints are a different module.
The policy acts on the observation of the run's env built with the run's observation
keys (``make_env(cfg.env, n, cfg.obs_keys)``); with asymmetric keys it reads only the
actor's columns of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import serialization

from jaxspreeze import config as config_lib
from jaxspreeze.algos.base import Algorithm
from jaxspreeze.config import RunConfig
from jaxspreeze.errors import ConfigError
from jaxspreeze.plan import RunPlan
from jaxspreeze.types import PyTree

POLICY_FILE = "policy.msgpack"


class Policy(NamedTuple):
    """A run's config, its algorithm (bound to the env) and the actor of every seed."""

    cfg: RunConfig
    algo: Algorithm
    actor: PyTree  # leaves [S, ...]

    def seed(self, i: int = 0) -> PyTree:
        """The actor of seed ``i`` (leaves without the seed axis)."""
        return jax.tree.map(lambda x: x[i], self.actor)


def save_policy(run_dir: str | Path, actor: PyTree) -> Path:
    """Write the actor of every seed to ``<run_dir>/policy.msgpack``; returns the path."""
    path = Path(run_dir) / POLICY_FILE
    host = jax.tree.map(np.asarray, jax.device_get(actor))
    path.write_bytes(serialization.to_bytes(host))
    return path


def load_policy(run_dir: str | Path) -> Policy:
    """Read ``config.json`` and ``policy.msgpack`` of a finished run."""
    run_dir = Path(run_dir)
    path = run_dir / POLICY_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: the run has no saved policy (train it to the end first)"
        )
    try:  # the saved run's plan: its algorithm bound to its env (no devices needed)
        saved = RunPlan.saved(config_lib.load(run_dir / "config.json"))
    except ConfigError as e:
        raise ValueError(f"{run_dir / 'config.json'}: {str(e).split(': ', 1)[1]}") from None
    cfg, algo = saved.cfg, saved.make_algorithm()
    keys = jax.random.split(jax.random.key(0), cfg.num_seeds)
    target: Any = jax.eval_shape(jax.vmap(algo.init), keys).actor
    try:
        state = serialization.msgpack_restore(path.read_bytes())
        actor = serialization.from_state_dict(target, state)
        actor = jax.tree.map(np.asarray, actor)
        _check_shapes(actor, target)
    except Exception as e:  # msgpack and flax raise many kinds for a damaged file
        raise ValueError(
            f"{path} is damaged or is not this run's policy ({type(e).__name__}: {e}); "
            "evaluate the run's checkpoint instead (jaxspreeze eval RUN_DIR)"
        ) from None
    return Policy(cfg, algo, actor)


def _check_shapes(actor: PyTree, target: PyTree) -> None:
    """ValueError unless every leaf of ``actor`` has the shape and dtype of ``target``'s."""
    for got, want in zip(jax.tree.leaves(actor), jax.tree.leaves(target), strict=True):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(f"a leaf is {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
