"""Weights & Biases (``pip install wandb``); ``WANDB_MODE=offline`` works without network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxspreeze.core.types import Record
from jaxspreeze.sinks.base import scalars


class WandbSink:
    """Logs every record to a wandb run (project ``jaxspreeze``) at step ``env_steps``."""

    name = "wandb"

    def __init__(self, run_dir: str | Path, config: dict[str, Any], run_name: str = ""):
        # heavy optional dependency (an extra): imported only when this sink is used
        import wandb

        self._run = wandb.init(
            project="jaxspreeze", dir=str(run_dir), config=config, name=run_name or None
        )

    def write(self, record: Record) -> None:
        """Log every finite scalar of ``record`` at step ``env_steps``."""
        prefix = "eval" if record.get("kind") == "eval" else "train"
        data = {f"{prefix}/{k}": v for k, v in scalars(record)}
        data["env_steps"] = record["env_steps"]
        self._run.log(data)

    def close(self) -> None:
        """Finish the wandb run."""
        self._run.finish()
