"""Runs in a fresh subprocess (no ``JAX_NUM_CPU_DEVICES`` unless a mode sets it) for
test_host_device: the host policy's own CPU device, which a host-env run asks JAX for
before its backend starts (:func:`jaxspreeze.setup.devices.reserve_host_device`).

``python tests/host_device_worker.py MODE DIR`` prints one JSON line of findings; the
assertions live in test_host_device.py. Modes:

- ``train``: a tiny SAC run and a tiny PPO run on host envs through ``jaxspreeze.train``:
  the devices, where the workers' parameters and the evaluations' actors lived; then
  ``placements``;
- ``placements``: after a host env's plan, what every placement mode resolves to;
- ``started``: JAX's backend started first (a notebook), then a host env's plan;
- ``device-env``: a gymnax env's plan (no host policy).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

from jaxspreeze.algos.ppo import PPOConfig
from jaxspreeze.algos.sac import SACConfig
from jaxspreeze.core.errors import PlacementError
from jaxspreeze.host import workers
from jaxspreeze.run import threads
from jaxspreeze.setup import devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

ENV = "gymnasium/Pendulum-v1"


def ids(tree) -> list[int]:
    """The ids of the devices holding ``tree``'s arrays."""
    return sorted({d.id for leaf in jax.tree.leaves(tree) for d in leaf.devices()})


def sac(logdir: str) -> RunConfig:
    """A tiny SAC run on the host Pendulum."""
    return RunConfig(
        algo="sac", env=ENV, num_envs=4, rollout_steps=2, grad_steps=2, batch_size=16,
        buffer_size=512, learning_starts=64, chunk_iterations=10, total_steps=64 + 2 * 10 * 8,
        eval_episodes=2, logdir=logdir, run_name="sac", sinks=("jsonl",),
        sac=SACConfig(hidden=(16, 16)),
    )  # fmt: skip


def ppo(logdir: str) -> RunConfig:
    """A tiny PPO run on the host CartPole (the workers' extras: log-probabilities)."""
    return RunConfig(
        algo="ppo", env="gymnasium/CartPole-v1", total_steps=384, num_envs=4,
        rollout_steps=16, batch_size=32, chunk_iterations=3, eval_episodes=1,
        logdir=logdir, run_name="ppo", sinks=("jsonl",), ppo=PPOConfig(hidden=(16, 16), epochs=2),
    )  # fmt: skip


def trained(logdir: str) -> dict:
    """Both runs; where the workers' parameters and the evaluated actors lived."""
    from jaxspreeze.run.trainer import train

    published: list[list[int]] = []
    publish = workers.ParamSlot.publish

    def publish_and_note(self, params, version, **kw):
        publish(self, params, version, **kw)
        published.append(ids(self.latest()[0]))

    evaluated: list[list[int]] = []
    make = threads.make_host_evaluate

    def make_and_note(*args, **kw):
        evaluate = make(*args, **kw)

        def noted(actor, *a, **k):
            evaluated.append(ids(actor))
            return evaluate(actor, *a, **k)

        return noted

    workers.ParamSlot.publish = publish_and_note
    threads.make_host_evaluate = make_and_note
    out = {}
    for name, cfg in (("sac", sac(logdir)), ("ppo", ppo(logdir))):
        published.clear()
        evaluated.clear()
        run = train(cfg, quiet=True)
        out[name] = {
            "placement": run.summary["placement"],
            "state": ids(run.state),
            "published": sorted({i for p in published for i in p}),
            "evaluated": sorted({i for e in evaluated for i in e}),
            "evaluations": len(evaluated),
            "env_steps": run.summary["env_steps"],
            "final_eval_return": run.summary["final_eval_return"],
        }
    out["devices"] = [d.id for d in jax.devices()]
    out["placements"] = placements(logdir)
    return out


def placements(logdir: str) -> dict:
    """Every placement mode, resolved after a host env's plan."""
    plan(sac(logdir), on_devices=False)
    out: dict = {"devices": [d.id for d in jax.devices()], "device_count": devices.device_count()}
    for mode in ("auto", "single", "split", "data", "split-data"):
        try:
            p = devices.resolve(mode)
        except PlacementError as e:
            out[mode] = {"error": str(e)}
            continue
        sides = [p.actor, p.critic] + ([] if p.mesh is None else list(p.mesh.devices.flat))
        out[mode] = {
            "sides": sorted({d.id for d in sides}),
            "eval": p.eval.id,
            "host": None if p.host is None else p.host.id,
            "host_policy": p.host_policy.id,
            "describe": p.describe(),
        }
    out["hardware_devices"] = devices.describe_hardware()["device_count"]
    return out


def started(logdir: str) -> dict:
    """JAX started before the plan: the host policy stays on the actor's device."""
    jax.devices()
    reserved = devices.reserve_host_device()
    placed = plan(sac(logdir))
    return {"reserved": reserved, "devices": len(jax.devices()), "host": placed.placement.host}


def device_env(logdir: str) -> dict:
    """A gymnax env asks for no host policy device."""
    placed = plan(RunConfig(algo="sac", env="gymnax/Pendulum-v1", logdir=logdir))
    return {"devices": len(jax.devices()), "host": placed.placement.host}


if __name__ == "__main__":
    mode, logdir = sys.argv[1:3]
    modes = {"train": trained, "placements": placements, "started": started}
    modes["device-env"] = device_env
    print(json.dumps(modes[mode](logdir)))
