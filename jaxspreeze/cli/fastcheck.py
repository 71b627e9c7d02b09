"""Checks of a command line that need no JAX and no simulator, run before either is imported.

:func:`check` reads a command's argv against the real tables: every flag's name (a
misspelled one is named with the nearest flags, ``did you mean --total-steps?``), the
values of the integer, float and choice flags (``--algo``, with the nearest algorithm)
and ``--env`` (the family, and the task from the family's static id list). The first
problem is one line and exit 2, without JAX started; what passes is parsed as before, by
tyro, after the command's module (and JAX) is imported.

Nothing here is a copy. The flags are generated (:func:`flags`) from the command's options
dataclass (``<Command>Args`` in ``jaxspreeze.cli.<command>``, whose module imports no JAX:
its heavy imports wait for ``main``) and the dataclasses inside it (``RunConfig`` and each
algorithm's config, from the no-JAX registry), by tyro's rules; ``tests/test_fast_cli.py``
compares them with tyro's parsers (:func:`live_flags`). The algorithm names and placements
are the registries' (``algos.NAMES``, ``config.PLACEMENTS``, read through the flags); the
families and their ids are the family table's (:data:`jaxspreeze.core.envids.FAMILIES`). An id
list is used only while the installed simulator is the version it was taken from; another
version, a family without a list (envpool) or a gymnasium id naming its module
(``pkg.mod:Env-v0``) is left to the full check after JAX starts (slower, never wrong). A
gymnasium id is checked against gymnasium's own registry (gymnasium imports no JAX).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import importlib.util
import sys
import typing
from collections.abc import Sequence
from types import ModuleType, UnionType
from typing import Any

from jaxspreeze.cli.common import fail
from jaxspreeze.core import envids

# A flag's kind: "0" takes no value, "*" any number of values (not checked here),
# "int"/"float"/"str" one value ("int?"/"float?": or None), a tuple: one of these choices.
Kind = str | tuple[str, ...]

ENVS_HINT = "see `jaxspreeze envs {family}`"


# --- the flags, generated from the commands' dataclasses ----------------------------------


def command_module(command: str) -> ModuleType:
    """``jaxspreeze.cli.<command>`` (its imports are light: no JAX, no simulator)."""
    return importlib.import_module(f"jaxspreeze.cli.{command}")


def args_class(module: ModuleType) -> type:
    """The options dataclass of a command's module: the ``*Args`` class it defines."""
    return next(
        v
        for k, v in vars(module).items()
        if k.endswith("Args") and isinstance(v, type) and v.__module__ == module.__name__
    )


def _kind(hint: Any, append: bool) -> Kind:
    """The kind of a flag of type ``hint`` (tyro's reading: ``X | None`` also takes None;
    a tuple takes any number of values, or one per use with ``UseAppendAction``)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, UnionType):
        inner = [a for a in args if a is not type(None)]
        kind = _kind(inner[0], append) if len(inner) == 1 else "str"
        if isinstance(kind, tuple):
            return (*kind, "None")
        return f"{kind}?" if kind in ("int", "float") else kind
    if origin is typing.Literal:
        return tuple(str(a) for a in args)
    if origin is tuple:
        return _kind(args[0], False) if append and args else "*"
    if hint is bool:
        return "0"
    if hint in (int, float):
        return hint.__name__
    return "str"


def _dataclass_flags(cls: type, prefix: str, pairs_off: bool, out: dict[str, Kind]) -> None:
    """Add the flags of the dataclass ``cls`` (its fields under ``prefix``) to ``out``."""
    import tyro  # the command's module imported it already

    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint, markers = hints[f.name], ()
        if typing.get_origin(hint) is typing.Annotated:
            hint, *markers = typing.get_args(hint)
        if any(m is tyro.conf.Positional for m in markers):
            continue
        names = [getattr(m, "name", None) for m in markers if hasattr(m, "metavar")]
        name = next((n for n in names if n is not None), f.name)
        if dataclasses.is_dataclass(hint):
            _dataclass_flags(hint, f"{prefix}{name}." if name else prefix, pairs_off, out)
            continue
        flag = "--" + f"{prefix}{name}".replace("_", "-")
        if hint is bool:
            if pairs_off or any(m is tyro.conf.FlagCreatePairsOff for m in markers):
                default = f.default if f.default is not dataclasses.MISSING else False
                out[f"--{prefix}no-{name}".replace("_", "-") if default else flag] = "0"
            else:
                out[flag] = out["--" + f"{prefix}no-{name}".replace("_", "-")] = "0"
            continue
        out[flag] = _kind(hint, any(m is tyro.conf.UseAppendAction for m in markers))


def flags(command: str) -> dict[str, Kind]:
    """Every flag of ``command``'s parser with its kind, generated from its options
    dataclass and the module's tyro markers (``FLAGS``)."""
    import tyro

    module = command_module(command)
    pairs_off = tyro.conf.FlagCreatePairsOff in tuple(getattr(module, "FLAGS", ()))
    out: dict[str, Kind] = {}
    _dataclass_flags(args_class(module), "", pairs_off, out)
    return out


# --- env ids ------------------------------------------------------------------------------

# once jaxspreeze's env registry is imported in this process (a notebook, a test, `cli.main`
# called from Python), envs registered or patched in at run time may be there, and the full
# check costs no import: it decides, not the static list
ENV_REGISTRY = "jaxspreeze.envs"


def _did_you_mean(word: str, known: Sequence[str], n: int = 1, cutoff: float = 0.6) -> str:
    """``"; did you mean X?"`` for the nearest of ``known`` (case-insensitive), else ``""``."""
    lower: dict[str, str] = {}
    for k in known:
        lower.setdefault(k.lower(), k)
    near = difflib.get_close_matches(word.lower(), list(lower), n=n, cutoff=cutoff)
    return f"; did you mean {' or '.join(lower[m] for m in near)}?" if near else ""


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _static_ids(family: str) -> tuple[str, ...] | None:
    """The family's task names from the table's static list, or None (no list, another
    version, or its registry already imported here)."""
    entry = envids.family(family)
    if entry is None or entry.ids is None:
        return None
    if entry.registry and (ENV_REGISTRY in sys.modules or entry.registry in sys.modules):
        return None  # brax: jaxspreeze's own list (no registry), never changed at run time
    if entry.ids_from is not None and _installed_version(entry.ids_from[0]) != entry.ids_from[1]:
        return None
    return entry.ids


def _registry_ids(registry: str) -> tuple[str, ...] | None:
    """The ids of a host family's own registry (gymnasium's: it imports no JAX), or None
    when it is not installed (the full check names the install command)."""
    if importlib.util.find_spec(registry) is None:
        return None
    return tuple(importlib.import_module(registry).registry)  # lazy: only for its envs


def check_env(name: str) -> str | None:
    """The problem with the env id ``name`` that can be known without JAX, or None."""
    families = tuple(envids.FAMILIES)
    family, sep, task = name.partition("/")
    entry = envids.family(family) if sep else None
    if entry is None:
        suggested = [f for f, e in envids.FAMILIES.items() if e.suggested]
        known = [f"{f}/{t}" for f in suggested for t in (_static_ids(f) or ())]
        hint = _did_you_mean(name, [*known, *(f"{f}/" for f in families)])
        if not hint:
            hint = _did_you_mean(
                name, [k for k in known if k.partition("/")[2].lower() == name.lower()], cutoff=0
            )
        return (
            f"--env: unknown environment {name!r}: names are <family>/<task> with family "
            f"one of {', '.join(families)} (see `jaxspreeze envs`){hint}"
        )
    if not task:
        return f"--env: {name!r} names no task; {ENVS_HINT.format(family=family)}"
    if entry.host and entry.registry:
        if ":" in task:
            return None  # importing its module registers the id: the full check
        ids = _registry_ids(entry.registry)
    else:
        ids = _static_ids(family)
    if ids is None or task in ids:
        return None
    hint = _did_you_mean(name, [f"{family}/{t}" for t in ids])
    return f"--env: unknown environment {name!r}{hint} ({ENVS_HINT.format(family=family)})"


# --- flags --------------------------------------------------------------------------------


def _value_problem(flag: str, kind: Kind, value: str) -> str | None:
    """What is wrong with ``value`` for a flag of ``kind`` (as tyro would refuse it), or None."""
    if isinstance(kind, tuple):
        if value in kind:
            return None
        what = "algorithm" if flag == "--algo" else "choice"
        return (
            f"{flag}: unknown {what} {value!r}{_did_you_mean(value, kind)} "
            f"(choose one of {', '.join(k for k in kind if k != 'None')})"
        )
    base = kind.rstrip("?")
    if base not in ("int", "float") or (kind.endswith("?") and value == "None"):
        return None
    try:
        int(value) if base == "int" else float(value)
    except ValueError:
        a = "an integer" if base == "int" else "a number"
        return f"{flag}: expected {a}{' or None' if kind.endswith('?') else ''}, got {value!r}"
    return None


def check_flags(argv: Sequence[str], table: dict[str, Kind], prog: str) -> str | None:
    """The first problem with ``argv``'s flags and simple values, or None.

    Only ``--name`` tokens are read as flags (``_`` read as ``-``, as tyro does); the token
    after a one-value flag is its value, so ``--totl-steps 100`` names one unknown flag.
    """
    i = 0
    argv = list(argv)
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token in ("--", "--debug"):
            continue
        name, eq, value = token.partition("=")
        name = "--" + name[2:].replace("_", "-")
        kind = table.get(name)
        if kind is None:
            return (
                f"unknown flag {token.partition('=')[0]}{_did_you_mean(name, list(table))} "
                f"(see `{prog} --help`)"
            )
        if kind in ("0", "*"):
            continue
        if not eq:
            if i >= len(argv) or (argv[i].startswith("--") and len(argv[i]) > 2):
                return f"{name}: missing its value (see `{prog} --help`)"
            value = argv[i]
            i += 1
        if problem := _value_problem(name, kind, value):
            return problem if isinstance(kind, tuple) else f"{problem} (see `{prog} --help`)"
        if name == "--env" and (problem := check_env(value)):
            return problem
    return None


def check(command: str, argv: Sequence[str]) -> int | None:
    """Check a command's argv before its module (and JAX) is imported: exit code 2 after
    one line for the first problem found, None when the full parse should go on."""
    table = flags(command)
    own, rest = list(argv), []
    if command == "launch" and "--" in own:
        cut = own.index("--")
        own, rest = own[:cut], own[cut + 1 :]
    if "-h" in own or "--help" in own:
        return None  # tyro prints the help
    problem = check_flags(own, table, f"jaxspreeze {command}")
    if problem is None and command == "launch" and "--exec-command" not in own:
        train = rest[1:] if rest[:1] == ["train"] else rest
        if "-h" not in train and "--help" not in train:
            problem = check_flags(train, flags("train"), "jaxspreeze train")
    return None if problem is None else fail(problem)


# --- what the tables are compared with (the parsers and simulators; for the tests) -------


def live_flags(command: str) -> dict[str, Kind]:
    """The flags of ``command``'s tyro parser as :func:`flags` writes them (builds the
    parser: slower than :func:`flags`)."""
    import warnings

    import tyro

    module = command_module(command)
    cls = args_class(module)
    kwargs = {"config": tuple(getattr(module, "FLAGS", ()))}
    if command in ("train", "autotune", "sweep"):
        from jaxspreeze.setup.config import RunConfig

        kwargs["default"] = cls(run=RunConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parser = tyro.extras.get_parser(cls, **kwargs)
    out: dict[str, Kind] = {}
    for action in parser._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        metavar = str(action.metavar)
        if action.nargs == 0:
            kind: Kind = "0"
        elif action.choices is not None:
            kind = tuple(str(c) for c in action.choices)
        elif action.nargs in ("*", "+"):
            kind = "*"
        elif metavar in ("INT", "FLOAT", "{None}|INT", "{None}|FLOAT"):
            kind = metavar.removeprefix("{None}|").lower() + ("?" if "None" in metavar else "")
        elif metavar.startswith("{") and "|" not in metavar:
            kind = tuple(metavar.strip("{}").split(","))
        else:
            kind = "str"
        for option in action.option_strings:
            out[option] = kind
    return out


def live_env_ids(family: str) -> tuple[str, ...]:
    """The task names of a device family's adapter (``names()``: its simulator's own
    registry, imported)."""
    entry = envids.family(family)
    if entry is None or entry.host:
        raise ValueError(f"{family!r} is not a device family of the table")
    return tuple(importlib.import_module(entry.adapter).names())
