"""The sides of time to score: jaxspreeze and the peers that run a row's env and algorithm.

Imports no JAX. A :class:`Side` names the env families and algorithms it runs, the modules
it needs (a side whose modules are missing is *skipped*, and the report says so and how
to install them) and its runner, ``"module:function"``, which the side's own process
(:mod:`jaxspreeze.score.child`) imports and calls as ``runner(task, run)``, ``run``
a :class:`SideRun`; it returns the side's row (:func:`jaxspreeze.score.rows.row`).

Peers come from the optional extra ``jaxspreeze[peers]``. More sides can be plugged in
without editing this table: ``JAXSPREEZE_SCORE_SIDES=module:NAME[,module:NAME]`` names
iterables of :class:`Side` (the tests' stand-in peers come in this way); a plugged-in
side replaces a built-in one of the same name.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

PLUGIN_VAR = "JAXSPREEZE_SCORE_SIDES"
PEERS_EXTRA = "pip install 'jaxspreeze[peers]'"


def _quiet(line: str) -> None:
    del line


class SideRun(NamedTuple):
    """What a side's runner is given besides the row: one run of one side."""

    seed: int
    scale: str  # the sizes: "cpu" (the row's own) or "gpu"
    compile_cache: str  # the compile cache's folder (fresh: a cold run)
    started: float  # the time.time() the side's process was started at
    total_steps: int | None = None  # the env-step budget instead of the row's
    say: Callable[[str], None] = _quiet  # where progress lines go
    # a peer's settings: "own" (its published ones for the task: score.settings) or
    # "matched" (the row's jaxspreeze preset); jaxspreeze's side runs its preset either way
    peer_settings: str = "own"


@dataclass(frozen=True)
class Side:
    """A trainer that runs some rows: jaxspreeze itself or a peer library."""

    name: str
    runner: str  # "module:function", imported in the side's own process
    families: tuple[str, ...]  # env families it runs ("*": all)
    algos: tuple[str, ...]  # algorithms it runs ("*": all)
    requires: tuple[str, ...] = ()  # top-level modules it imports (found, not imported)
    install: str = PEERS_EXTRA
    what: str = ""  # one line for the report

    def runs(self, family: str, algo: str) -> bool:
        """Whether this side has a trainer for ``algo`` on an env of ``family``."""
        return ("*" in self.families or family in self.families) and (
            "*" in self.algos or algo in self.algos
        )

    def missing(self) -> list[str]:
        """The modules it needs that are not installed (none: it can run)."""
        out = []
        for module in self.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                out.append(module)
        return out


BUILTIN = (
    Side(
        "jaxspreeze",
        "jaxspreeze.score.runners:run_side",
        ("*",),
        ("*",),
        what="jaxspreeze: the preset, trained by the trainer's programs (host envs: train())",
    ),
    Side(
        "brax",
        "jaxspreeze.score.runners:run_brax_side",
        ("brax", "playground"),
        ("sac", "ppo"),
        ("brax",),
        install="pip install brax (and 'jaxspreeze[playground]' for playground/ rows)",
        what="brax.training.agents.sac / ppo: its own settings for the task, or the preset",
    ),
    Side(
        "rejax",
        "jaxspreeze.score.peers:run_rejax",
        ("gymnax",),
        ("sac", "td3", "ppo", "pqn", "dqn"),
        ("rejax",),
        what="rejax (gymnax envs, the whole training one jitted program)",
    ),
    Side(
        "sbx",
        "jaxspreeze.score.peers:run_sbx",
        ("gymnasium",),
        ("sac", "td3", "ppo"),
        ("sbx", "stable_baselines3"),
        install=f"{PEERS_EXTRA} (sbx-rl needs stable-baselines3, which needs torch)",
        what="SBX (Stable Baselines Jax) on gymnasium's vector envs",
    ),
)


def sides() -> dict[str, Side]:
    """Every side by name: the built-in ones, then those :data:`PLUGIN_VAR` names."""
    out = {s.name: s for s in BUILTIN}
    for ref in filter(None, (r.strip() for r in os.environ.get(PLUGIN_VAR, "").split(","))):
        module, _, attr = ref.partition(":")
        for side in getattr(importlib.import_module(module), attr or "SIDES"):
            out[side.name] = side
    return out


def runner(side: Side):
    """The side's runner function (imports its module: JAX and the peer library)."""
    module, _, function = side.runner.partition(":")
    return getattr(importlib.import_module(module), function)
