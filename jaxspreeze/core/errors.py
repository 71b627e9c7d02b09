"""The errors every layer raises: the shared vocabulary of failure, importing nothing of ours.

The CLI maps :class:`ConfigError` (bad input: exit 2) and the others (a fault: exit 1)
to one line each.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad config value: names the field and says how to fix it."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


class PlacementError(ConfigError):
    """The requested placement is impossible on this machine (field ``placement``)."""

    def __init__(self, message: str):
        super().__init__("placement", message)


class UnknownEnvError(ValueError):
    """Raised for an environment name that no adapter knows."""


class NonFiniteError(RuntimeError):
    """Training produced NaN/inf: the message names the step and the quantity."""


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or does not fit the state it restores into."""


class HostEnvError(RuntimeError):
    """A host env's sampling worker failed or stopped answering: names the env and the worker."""


class ProcessError(RuntimeError):
    """A multi-process run cannot go on: another process failed, died or disagrees."""
