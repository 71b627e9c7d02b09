"""Where the modules of jaxspreeze 0.1's flat top level live now, and the import hook
that keeps their old paths working.

``import jaxspreeze.config`` (or ``from jaxspreeze import config``) loads
``jaxspreeze.setup.config`` and registers the same module object under the old name, so
scripts and notebooks written against the flat layout keep running and nothing is
loaded twice. New code imports the new paths. No JAX here: ``import jaxspreeze`` stays
cheap.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

# the old module (under jaxspreeze) -> where it lives now
MOVED: dict[str, str] = {
    "errors": "core.errors",
    "types": "core.types",
    "clock": "core.clock",
    "terminal": "core.terminal",
    "envids": "core.envids",
    "cachedir": "core.cachedir",
    "programs": "core.programs",
    "compiles": "core.compiles",
    "hostenvs": "host.hostenvs",
    "workers": "host.workers",
    "replay": "data.replay",
    "transfer": "data.transfer",
    "rollout": "data.rollout",
    "config": "setup.config",
    "plan": "setup.plan",
    "devices": "setup.devices",
    "distributed": "setup.distributed",
    "population": "setup.population",
    "memory": "setup.memory",
    "iteration": "schedules.iteration",
    "metrics": "sinks.metrics",
    "plots": "sinks.figures",
    "policy": "agent.policy",
    "evaluate": "agent.evaluate",
    "render": "agent.render",
    "checkpoint": "store.checkpoint",
    "rundir": "store.rundir",
    "resume": "store.resume",
    "trainer": "run.trainer",
    "starting": "run.starting",
    "threads": "run.threads",
    "checkpointing": "run.checkpointing",
    "checkpoint_eval": "run.checkpoint_eval",
    "faults": "run.faults",
    "summary": "run.summary",
    "console": "run.lines",
    "stopping": "run.stopping",
    "guards": "run.guards",
    "evalwatch": "run.evalwatch",
    "pbt": "run.pbt",
    "records": "run.records",
    "caches": "run.caches",
    "sweeping": "run.sweeping",
    "bench.score": "score.runners",
    "bench.score_child": "score.child",
    "bench.score_goal": "score.goal",
    "bench.score_merge": "score.merge",
    "bench.score_peers": "score.peers",
    "bench.score_rows": "score.rows",
    "bench.score_run": "score.runs",
    "bench.score_sides": "score.sides",
    "bench.score_tasks": "score.tasks",
}


class _Alias(importlib.abc.Loader):
    """Loads a moved module by importing its new path."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module ran under its new name): give it back its own spec,
        which the import system replaced with the alias's."""
        module.__spec__ = self.spec


class OldPaths(importlib.abc.MetaPathFinder):
    """Finds ``jaxspreeze.<old>`` for every entry of :data:`MOVED`."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        old = fullname.removeprefix("jaxspreeze.")
        if fullname == old or old not in MOVED:
            return None
        new = f"jaxspreeze.{MOVED[old]}"
        return importlib.machinery.ModuleSpec(fullname, _Alias(new), origin=new)


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once (a stale copy of an old module
    elsewhere on the path must not load beside the new one)."""
    if not any(isinstance(f, OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, OldPaths())
