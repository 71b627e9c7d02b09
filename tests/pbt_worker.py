"""Runs in a subprocess with fake CPU devices (``JAX_NUM_CPU_DEVICES``) for test_pbt_placements.

``python tests/pbt_worker.py TMP PLACEMENT...`` trains test_pbt's tiny SAC population
(4 members x 2 seeds, a PBT step every 1,000 env steps) once per placement (``single``,
``split``, ``data``, ``split-data``, ``auto``) and prints one JSON line of findings: each
run's lineage, where its final agent lives, whether its learning-rate leaves hold the
lineage's values, a digest of its final state, and (``data``, ``split-data``, checked after
every chunk by ``JAXSPREEZE_DEBUG=1``) whether the replicas agree. The assertions live in
test_pbt_placements.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["JAXSPREEZE_DEBUG"] = "1"  # data-parallel: every chunk checks the replicas agree
sys.path.insert(0, str(Path(__file__).parent))

import jax
import numpy as np
import optax
from test_pbt import GRID
from test_pbt import _cfg as pbt_cfg

import jaxspreeze
from jaxspreeze.run import pbt


def raw(x):
    return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x


def digest(tree) -> str:
    """A hash of every leaf's bytes (this process's copy of each)."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(tree):
        x = raw(x)
        whole = x.addressable_shards[0].data if x.is_fully_replicated else x
        h.update(np.asarray(whole).tobytes())
    return h.hexdigest()


def run(tmp: Path, placement: str) -> dict:
    cfg = pbt_cfg(tmp, placement, placement=placement)
    result = jaxspreeze.sweep(cfg, grid=GRID, quiet=True)
    agent = result.state.agent
    events = pbt.read_lineage(result.run_dir)
    lr = optax.tree_utils.tree_get(agent.actor.opt_state, "learning_rate")
    lrs = np.asarray(lr.addressable_shards[0].data if lr.is_fully_replicated else lr)
    values = [row["values"]["actor_lr"] for row in result.summary["members"]]
    devices = lambda side: sorted({d.id for x in jax.tree.leaves(side) for d in x.devices()})
    return {
        "placement": result.summary["placement"],
        "lineage": events,
        "lr_holds_the_lineage": bool(np.array_equal(lrs, np.repeat(np.float32(values), 2))),
        "actor_devices": devices(agent.actor),
        "critic_devices": devices(agent.critic),
        "replicated": all(x.is_fully_replicated for x in jax.tree.leaves(agent)),
        "state": digest(result.state._replace(obs_buffer=None)),  # the split keeps a copy
        "agent": digest(agent),
        "final_returns": [row.get("final_return") for row in result.summary["members"]],
    }


def main() -> None:
    tmp = Path(sys.argv[1])
    found = {"devices": jax.device_count()}
    for placement in sys.argv[2:]:
        found[placement] = run(tmp, placement)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
