"""Autotune profiles: ``autotune.json`` written, read back, checked and applied to a config.

A profile holds the measurements (both grids), the choice, the hardware and the versions.
Applying it to a run keeps the fields the user pinned and re-runs the choice rule around
them on the stored measurements.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxspreeze.autotune.choose import (
    BATCH_TOLERANCE,
    HOST_TUNED,
    TOLERANCE,
    TUNED,
    Point,
    choose,
    update_ratio,
)
from jaxspreeze.autotune.report import plot, table
from jaxspreeze.core.errors import ConfigError
from jaxspreeze.setup import config, devices
from jaxspreeze.setup.config import RunConfig
from jaxspreeze.setup.plan import plan

FORMAT = "jaxspreeze-autotune"
VERSION = 2  # 2: the choice keeps the configured gradient steps per env step (issue 17)
MIN_CHOICE = {"grad_steps": 0}  # on-policy runs have no gradient-step count of their own


class ProfileWarning(UserWarning):
    """An autotune profile applied to a run it was not measured for (other hardware...)."""


def write(profile: dict[str, Any], out_dir: Path, say: Callable[[str], None] = print) -> None:
    """Write ``autotune.json``, ``autotune.md`` and ``autotune.png`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "autotune.json").write_text(json.dumps(profile, indent=2))
    (out_dir / "autotune.md").write_text(table(profile) + "\n")
    plot(profile, out_dir / "autotune.png")
    say(f"autotune: wrote {out_dir / 'autotune.json'}, autotune.md and autotune.png")


def tuned_fields(profile: dict[str, Any]) -> tuple[str, ...]:
    """The fields a profile chooses: a host-env profile chooses the workers too."""
    return HOST_TUNED if profile.get("host") else TUNED


def points(profile: dict[str, Any], kind: str) -> list[Point]:
    """The measured points of one grid (``"sampling"`` or ``"update"``) of a profile."""
    return [Point(**p) for p in profile[kind]["points"]]


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and check an ``autotune.json`` (ConfigError("profile", ...) if it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("profile", f"no such file {str(path)!r}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("profile", f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError("profile", f"{path} is not a jaxspreeze autotune profile")
    if data.get("version") != VERSION:
        raise ConfigError(
            "profile",
            f"{path} has profile version {data.get('version')!r}, this jaxspreeze reads "
            f"{VERSION}; rerun `jaxspreeze autotune`",
        )
    try:
        choice = data["choice"]
        for key in tuned_fields(data):
            value = choice[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError("profile", f"{path}: choice.{key} must be a positive integer")
            if value < MIN_CHOICE.get(key, 1):
                raise ConfigError("profile", f"{path}: choice.{key} must be a positive integer")
        float(choice["update_ratio_target"])
        for kind in ("sampling", "update"):
            points(data, kind)
    except (KeyError, TypeError) as e:
        raise ConfigError("profile", f"{path} is incomplete or damaged ({e!r})") from None
    return data


def apply_profile(
    cfg: RunConfig, path: str | Path, pinned: set[str] | frozenset[str] = frozenset()
) -> RunConfig:
    """``cfg`` with the sizes of the autotune profile at ``path`` (pinned fields kept).

    A profile made for another algorithm or env is an error (its rates and replay ratio
    do not transfer). Other hardware, network widths, rollout length or placement only
    warn (:class:`ProfileWarning`): the profile is still a valid, if maybe slower, choice.
    With nothing pinned, the same base sizes, budget and gradient steps per env step the
    stored choice is used as is; otherwise the choice rule is re-run on the stored
    measurements around the pinned values (e.g. a pinned batch keeps the gradient steps
    per env step of ``cfg``).
    """
    cfg = config.resolve(cfg)
    profile = load_profile(path)
    if (profile["algo"], profile["env"]) != (cfg.algo, cfg.env):
        raise ConfigError(
            "profile",
            f"{path} was measured for {profile['algo']} on {profile['env']}, this run is "
            f"{cfg.algo} on {cfg.env}; rerun `jaxspreeze autotune --algo {cfg.algo} "
            f"--env {cfg.env}`",
        )
    _warn_mismatches(cfg, profile, path)
    fields = tuned_fields(profile)
    pinned = set(pinned) & set(fields)
    stored = profile["choice"]
    base_fields = ["num_envs", "batch_size", "grad_steps", "total_steps"]
    if profile.get("host"):
        base_fields.insert(1, "host_workers")
    base = {k: getattr(cfg, k) for k in base_fields}
    same = stored.get("base") == base and math.isclose(
        stored["update_ratio_target"], update_ratio(cfg, pinned & set(TUNED))
    )
    choice = stored if not pinned and same else _choose_again(cfg, profile, pinned)
    new = cfg.replace(**{k: int(choice[k]) for k in fields if k not in pinned})
    try:
        plan(new, on_devices=False)
    except ConfigError as e:
        raise ConfigError(
            "profile", f"applying {path} gives an invalid config: --{e.field}: {e}"
        ) from None
    return new


def _warn_mismatches(cfg: RunConfig, profile: dict[str, Any], path: str | Path) -> None:
    """Warn where the profile was measured on other hardware, widths or rollout length."""
    hw, here = profile.get("hardware", {}), devices.describe_hardware()
    for key, what in (
        ("backend", "backend"),
        ("devices", "devices"),
        ("cpu_count", "CPU count"),
    ):
        if hw.get(key) != here.get(key):
            _warn(f"{path}: measured on {what} {hw.get(key)}, this machine has {here.get(key)}")
    if list(profile.get("hidden", [])) != list(getattr(cfg, cfg.algo).hidden):
        _warn(
            f"{path}: measured with hidden {profile.get('hidden')}, this run uses "
            f"{list(getattr(cfg, cfg.algo).hidden)}; its rates do not apply exactly"
        )
    if profile.get("rollout_steps") != cfg.rollout_steps:
        _warn(f"{path}: measured with rollout_steps {profile.get('rollout_steps')}")


def _choose_again(cfg: RunConfig, profile: dict[str, Any], pinned: set[str]) -> dict[str, Any]:
    """The choice rule re-run on the profile's measurements, with its tolerances, for ``cfg``."""
    stored = profile["choice"]
    return choose(
        cfg,
        points(profile, "sampling"),
        points(profile, "update"),
        pinned,
        profile["memory"]["limit_bytes"],
        profile["memory"]["fixed_bytes"],
        tolerance=stored.get("tolerance", TOLERANCE),
        overlap=stored.get("overlap", False),
        batch_tolerance=stored.get("batch_tolerance", BATCH_TOLERANCE),
        host=bool(profile.get("host")),
    )


def _warn(message: str) -> None:
    warnings.warn(message, ProfileWarning, stacklevel=4)
