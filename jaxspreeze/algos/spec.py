"""An algorithm as the registry knows it, without JAX: :class:`AlgoSpec` and its helpers.

What ``config``, the command line's early check and the presets read of an algorithm (its
config class, on-policy or not, its run-level defaults, its checks, its member fields'
names) imports no JAX; the maths (``make`` and the member fields' setters) is in the
module :attr:`AlgoSpec.maths` names, imported when first used. ``algos/base.py`` re-exports
these names.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, get_args

from jaxspreeze.core.errors import ConfigError

if TYPE_CHECKING:
    from jaxspreeze.core.types import EnvSpec

# RunConfig's run-level sizes whose default each algorithm chooses (AlgoSpec.defaults)
RUN_SIZES = (
    "total_steps",
    "num_envs",
    "rollout_steps",
    "grad_steps",
    "batch_size",
    "buffer_size",
    "learning_starts",
    "chunk_iterations",
)

# What a config field is to a run beyond its value: the kinds a field's metadata names
# (``field(metadata=kinds("shape"))``, on RunConfig's fields and on every algorithm's
# config); ``config.fields_of(kind)`` reads them (resume, the program cache)
FIELD_KINDS = {
    "shape": "changes the shapes of the training state: a resume refuses a change",
    "start": "acts only when a run starts (the saved state carries its effect): a resume "
    "refuses a change",
    "off_policy": "read by off-policy algorithms only (for an on-policy one it is neither a "
    "shape nor a start field, and a change is unused)",
    "location": "where a run's files live: a resumed run takes it from its run directory",
    "autotune": "read by autotune only: a resume does not use a change",
    "program_free": "reaches no compiled program: not part of the program cache's key",
}


def kinds(*names: str, **metadata: Any) -> dict[str, Any]:
    """A config field's metadata naming its :data:`FIELD_KINDS` (``metadata`` added; e.g.
    ``absent=value``: what a saved config from before the field existed meant, read by
    ``config.saved_before``)."""
    unknown = [n for n in names if n not in FIELD_KINDS]
    if unknown:
        raise ValueError(f"unknown field kind {unknown[0]!r}; known: {', '.join(FIELD_KINDS)}")
    return {**metadata, "kinds": frozenset(names)}


# the run-level sizes SAC, TD3 and DDPG share when the user sets none (the default
# ``jaxspreeze train``): 8 envs x 1 step and 8 gradient steps of 256 per iteration
OFF_POLICY_DEFAULTS = {
    "total_steps": 10_000,
    "num_envs": 8,
    "rollout_steps": 1,
    "grad_steps": 8,
    "batch_size": 256,
    "buffer_size": 100_000,
    "learning_starts": 1_000,
    "chunk_iterations": 100,
}


def _one(cfg: Any) -> int:
    """The default gradient-step multiple: any number of steps per iteration."""
    return 1


class MemberSetters(Mapping[str, Any]):
    """An algorithm's member fields by name (known without JAX), each read as its setter
    from the maths module's ``MEMBER_FIELDS`` (imported at the first read)."""

    def __init__(self, names: tuple[str, ...], maths: str):
        self.names, self.maths = tuple(names), maths

    def _setters(self) -> Mapping[str, Any]:
        setters = importlib.import_module(self.maths).MEMBER_FIELDS
        if set(setters) != set(self.names):
            raise ValueError(
                f"{self.maths}.MEMBER_FIELDS names {sorted(setters)}, its spec {sorted(self.names)}"
            )
        return setters

    def __getitem__(self, name: str) -> Any:
        if name not in self.names:
            raise KeyError(name)
        return self._setters()[name]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def _members(given: Any, maths: str) -> Mapping[str, Any]:
    """``member_fields`` as the spec keeps it: names -> :class:`MemberSetters`; a mapping
    of setters (given whole) as it is."""
    if isinstance(given, MemberSetters):
        return MemberSetters(given.names, maths)
    if isinstance(given, Mapping):
        return MappingProxyType(dict(given))
    return MemberSetters(tuple(given), maths)


@dataclass(frozen=True, eq=False)
class AlgoSpec:
    """One algorithm as the registry (``jaxspreeze.algos``) knows it.

    - ``name``: the ``--algo`` value and the name of its RunConfig section (``[sac]``).
    - ``config_cls``: the dataclass of its own hyperparameters (``--sac.actor-lr``).
    - ``on_policy``: learns from the fresh rollout (no replay buffer, no warm-up).
    - ``defaults``: its value of every run-level size in :data:`RUN_SIZES`, used where the
      user set none (``config.resolve``).
    - ``accelerator_defaults``: given, the sizes that differ on a GPU or TPU (JAX's
      default backend when the config is resolved), e.g. the fast recipes' 1,024 envs and
      batch 32,768; empty: the same everywhere. Stored as every size on an accelerator
      (``defaults`` with these over them), which :func:`defaults_on` returns.
    - ``supports(env_spec) -> str | None``: why it cannot train that env (None: it can).
    - ``validate(cfg, prefix, run) -> None``: ConfigError naming ``<prefix><field>`` for
      a bad hyperparameter; ``run`` is the resolved RunConfig when this algorithm is the
      one in use (then run-level checks particular to it run too), None to check its own
      section only.
    - ``maths``: the module of its JAX maths (``jaxspreeze.algos.sac``), imported at the
      first :meth:`make` or member setter: it exports ``make(cfg, env_spec, run) ->
      Algorithm`` and ``MEMBER_FIELDS`` (a setter per member field).
    - ``grad_step_multiple(cfg) -> int``: gradient steps per iteration must be a
      multiple of this (TD3: ``policy_delay``).
    - its config's fields that change the state's shapes (resume refuses a change) say
      so in their metadata: ``hidden: ... = field(default=..., metadata=kinds("shape"))``.
    - ``label``: its name in help texts (default: ``name`` in capitals).
    - ``member_fields``: the float fields of its config that a population may vary per
      member (``jaxspreeze sweep``), given by name; read as a mapping to the setter that
      writes a member's value into a fresh one-slot ``AgentState`` (``algos/members.py``,
      the maths module's ``MEMBER_FIELDS``, imported at the first read of a setter); every
      other field changes the program or the shapes.
    - ``field_defaults``: the fields of its own config whose default depends on the env's
      family (declared ``None``: "the family's"), with their value where no family says
      otherwise; ``family_defaults``: per env family (``brax``, ``playground``, ...), the
      values of those fields that differ there (:func:`fields_on`). ``config.resolve``
      fills what the user left unset.
    - ``splits``: its state has a critic side worth a device of its own (False: one
      network learns and acts, e.g. PQN's Q-network on the actor side; the plan refuses
      ``--placement split`` and ``split-data`` and ``auto`` keeps it on one device).
    """

    name: str
    config_cls: type
    on_policy: bool
    defaults: Mapping[str, int]
    supports: Callable[[EnvSpec], str | None]
    validate: Callable[[Any, str, Any], None]
    maths: str
    grad_step_multiple: Callable[[Any], int] = _one
    label: str = field(default="")
    accelerator_defaults: Mapping[str, int] = field(default_factory=dict)
    member_fields: Mapping[str, Any] = field(default_factory=dict)
    field_defaults: Mapping[str, Any] = field(default_factory=dict)
    family_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    splits: bool = True

    def __post_init__(self) -> None:
        missing = set(RUN_SIZES) - set(self.defaults)
        extra = set(self.defaults) - set(RUN_SIZES)
        if missing or extra:
            raise ValueError(
                f"{self.name}: defaults must give exactly {RUN_SIZES}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        unknown = set(self.accelerator_defaults) - set(RUN_SIZES)
        if unknown:
            raise ValueError(f"{self.name}: accelerator_defaults names {sorted(unknown)}")
        on_accelerator = MappingProxyType({**self.defaults, **self.accelerator_defaults})
        object.__setattr__(self, "accelerator_defaults", on_accelerator)
        object.__setattr__(self, "member_fields", _members(self.member_fields, self.maths))
        own = {f.name: f.default for f in dataclasses.fields(self.config_cls)}
        not_none = [n for n in self.field_defaults if own.get(n, 0) is not None]
        if not_none:
            raise ValueError(f"{self.name}: field_defaults names {not_none}, not None fields")
        for family, values in self.family_defaults.items():
            unknown = set(values) - set(self.field_defaults)
            if unknown:
                raise ValueError(
                    f"{self.name}: family_defaults[{family!r}] names {sorted(unknown)}"
                )
        object.__setattr__(self, "field_defaults", MappingProxyType(dict(self.field_defaults)))
        object.__setattr__(
            self,
            "family_defaults",
            MappingProxyType(
                {k: MappingProxyType(dict(v)) for k, v in self.family_defaults.items()}
            ),
        )
        if not self.label:
            object.__setattr__(self, "label", self.name.upper())

    def make(self, cfg: Any, env_spec: EnvSpec, run: Any) -> Any:  # an algos.base.Algorithm
        """Bind the algorithm to its config, the env and the resolved run's sizes (imports
        its maths, and JAX)."""
        return importlib.import_module(self.maths).make(cfg, env_spec, run)


def defaults_on(spec: AlgoSpec, backend: str) -> Mapping[str, int]:
    """``spec``'s run-level sizes on JAX's ``backend`` (``cpu``, ``gpu``, ``tpu``, ...)."""
    return spec.defaults if backend == "cpu" else spec.accelerator_defaults


def fields_on(spec: AlgoSpec, family: str = "") -> dict[str, Any]:
    """The values of ``spec``'s family-dependent config fields (``field_defaults``) for an
    env of ``family``."""
    own = spec.family_defaults.get(family, {})
    return {k: own.get(k, v) for k, v in spec.field_defaults.items()}


def family_of(env: str) -> str:
    """An env id's family: ``brax/halfcheetah`` -> ``brax`` (a bare name: '')."""
    head, slash, _ = env.partition("/")
    return head if slash else ""


def filled(spec: AlgoSpec, cfg: Any, family: str = "") -> Any:
    """``cfg`` (``spec``'s section) with its unset family-dependent fields filled for an
    env of ``family`` (the same object when none is unset)."""
    unset = {k: v for k, v in fields_on(spec, family).items() if getattr(cfg, k) is None}
    return dataclasses.replace(cfg, **unset) if unset else cfg


def check_positive(cfg: Any, prefix: str, names: tuple[str, ...]) -> None:
    """ConfigError unless every named field is a number > 0."""

    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"{prefix}{name}", f"must be > 0, got {value!r}")


def check_unit(cfg: Any, prefix: str, names: tuple[str, ...]) -> None:
    """ConfigError unless every named field lies in [0, 1]."""

    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"{prefix}{name}", f"must be in [0, 1], got {value!r}")


def check_hidden(cfg: Any, prefix: str) -> None:
    """ConfigError unless ``cfg.hidden`` is a non-empty tuple of positive widths."""

    hidden = cfg.hidden
    if not hidden or any(not isinstance(w, int) or w <= 0 for w in hidden):
        raise ConfigError(f"{prefix}hidden", f"must be positive layer widths, got {hidden!r}")


# the values of every algorithm's ``torso`` field (its Literal names the same): auto and
# the names of jaxspreeze.networks.TORSOS (tests/test_networks.py compares)
# the --<algo>.torso choices (every algorithm's config types its field with it)
Torso = Literal["auto", "mlp", "minatar", "nature", "impala"]
TORSOS: tuple[str, ...] = get_args(Torso)


# the recurrent cells of --<algo>.memory ("none": feed-forward)
MEMORIES = ("none", "gru", "lstm")


def check_memory(cfg: Any, prefix: str) -> None:
    """ConfigError naming ``memory`` unless it is one of :data:`MEMORIES`, or
    ``memory_size`` unless it is an integer > 0 (a recurrent policy's cell)."""
    if cfg.memory not in MEMORIES:
        choices = ", ".join(MEMORIES)
        raise ConfigError(f"{prefix}memory", f"choose one of {choices}, got {cfg.memory!r}")
    size = cfg.memory_size
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ConfigError(f"{prefix}memory_size", f"must be an integer > 0, got {size!r}")


def check_torso(cfg: Any, prefix: str) -> None:
    """ConfigError unless ``cfg.torso`` is one of :data:`TORSOS`."""
    if cfg.torso not in TORSOS:
        raise ConfigError(f"{prefix}torso", f"must be one of {', '.join(TORSOS)}, got {cfg.torso!r}")
