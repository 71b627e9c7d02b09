"""Population-based training on every placement of one process (a subprocess with fake CPU
devices: pbt_worker.py), and the refusal of what it does not run on, before any compile.

Fake CPU devices prove placement and correctness, not speed: they share the same cores.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import fake_devices
import numpy as np
import pytest
from test_pbt import _cfg as pbt_cfg

from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup import population

WORKER = Path(__file__).with_name("pbt_worker.py")


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> dict:
    """The same PBT population on one device, split over two and data-parallel over two."""
    tmp = tmp_path_factory.mktemp("pbt_placements")
    return fake_devices.run_worker(
        WORKER, str(tmp), "single", "split", "data", devices=2, timeout=1200
    )


@pytest.mark.slow
def test_pbt_on_the_split_is_the_fused_run_bitwise(found):
    single, split = found["single"], found["split"]
    assert split["actor_devices"] == [0] and split["critic_devices"] == [1]
    assert single["lineage"] and split["lineage"] == single["lineage"]  # same copies
    assert split["agent"] == single["agent"] and split["state"] == single["state"]
    assert split["lr_holds_the_lineage"] and single["lr_holds_the_lineage"]
    assert split["final_returns"] == single["final_returns"]


@pytest.mark.slow
def test_pbt_on_data_parallel_keeps_the_agent_replicated(found):
    """Every chunk checks that the replicas agree (JAXSPREEZE_DEBUG=1); after the copies the
    agent is laid out as before, over both devices, and holds the lineage's values. (Its
    shards draw their own keys, so its lineage is its own: not the one-device run's.)"""
    data = found["data"]
    assert data["placement"].startswith("data-parallel over 2")
    assert data["actor_devices"] == data["critic_devices"] == [0, 1]
    assert data["replicated"] and data["lr_holds_the_lineage"]
    assert [e["env_steps"] for e in data["lineage"]] == [1000, 2000]


@pytest.mark.slow
def test_pbt_on_split_data_is_the_data_parallel_run(found, tmp_path):
    """Four devices, two actor/critic pairs: the same copies and the same agent, bitwise, as
    data parallelism over two devices (each side's replicas equal after every chunk)."""
    four = fake_devices.run_worker(WORKER, str(tmp_path), "split-data", devices=4, timeout=1200)
    both, data = four["split-data"], found["data"]
    assert both["actor_devices"] == [0, 1] and both["critic_devices"] == [2, 3]
    assert both["replicated"] and both["lr_holds_the_lineage"]
    assert both["lineage"] == data["lineage"] and both["agent"] == data["agent"]


def _placement(processes: list[int], kind: str = "data"):
    devices = np.array([SimpleNamespace(process_index=p) for p in processes])
    return SimpleNamespace(mesh=SimpleNamespace(devices=devices), critic_mesh=None, kind=kind)


def test_pbt_over_several_processes_is_refused_when_placed(tmp_path):
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.plan import plan

    cfg = pbt_cfg(tmp_path, "x", population=population.encode([{"actor_lr": 1e-3}] * 2))
    population.check_pbt_placement(cfg, _placement([0, 0]))  # one process: fine
    with pytest.raises(ConfigError, match=r"placement: --pbt runs in one process so far"):
        population.check_pbt_placement(cfg, _placement([0, 1]))
    population.check_pbt_placement(cfg.replace(pbt=False), _placement([0, 1]))
    # the plan checks it as it is placed, before a schedule exists (auto resolved too)
    planned = plan(cfg, on_devices=False)
    assert planned.placed(devices.resolve("auto")).placement is not None
    with pytest.raises(ConfigError, match="one process"):
        planned.placed(_placement([0, 1]))
