"""Parsing a command's options with tyro: one dataclass per command, errors on one line.

:func:`parse_grouped` parses the same options with the help in named boxes (``train``'s
70 flags): the boxes are only a view, every flag, default and value stays that of the
command's dataclass.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import io
import itertools
import sys
import textwrap
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import tyro

from jaxspreeze.cli.common import fail

BOX_EDGES = ("╭", "╰")  # tyro's error boxes (drawn by rich)

T = TypeVar("T")


def option_value(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` / ``--name=VALUE`` in argv (None if absent or valueless).

    Read before parsing for the options that decide the defaults (``--config``,
    ``--resume``); argv is left as it is and the parser sees them too.
    """
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _is_rule(line: str) -> bool:
    """A horizontal rule of tyro's error box (``───`` drawn by rich, ``---`` in ASCII)."""
    return len(line) > 2 and set(line) <= set("─-═")


def one_line(message: str) -> str:
    """The first paragraph of tyro's error box (or the last line of plain text), on one line.

    rich draws the box with box characters or, on a plain stream, in ASCII (a title line,
    then a rule); either way the message is the text before the box's first inner rule.
    """
    raw = [line.strip() for line in message.splitlines()]
    rows = [line for line in raw if line]
    if any(_is_rule(line.strip("│").strip()) for line in rows):
        lines: list[str] = []
        if rows and rows[0].startswith(BOX_EDGES):
            body = raw[raw.index(rows[0]) + 1 :]
        else:  # ASCII: the title, a rule, then the message
            first_rule = next(i for i, line in enumerate(raw) if _is_rule(line))
            body = raw[first_rule + 1 :]
        for text in body:
            line = text.strip("│").strip()
            if _is_rule(line) or text.startswith(BOX_EDGES) or (not line and lines):
                break
            if line:
                lines.append(line)
    else:
        lines = rows[-1:]
    return " ".join(" ".join(lines).split()) or "invalid arguments"


def parse(
    cls: type[T],
    argv: Sequence[str],
    prog: str,
    default: Any = None,
    markers: Sequence[Any] = (),
    description: str | None = None,
) -> T:
    """Parse ``argv`` into ``cls`` with tyro (``default``: an instance giving the defaults).

    ``description`` (default: ``cls``'s docstring) heads the help.

    ``--help`` prints the help and exits 0; bad input exits 2 with tyro's message on one
    line (SystemExit, turned into a return code by :func:`jaxspreeze.cli.main`).
    """
    captured = io.StringIO()
    kwargs: dict[str, Any] = {"args": list(argv), "prog": prog, "config": tuple(markers)}
    if description is not None:
        kwargs["description"] = description
    if default is not None:
        kwargs["default"] = default
    failed = False
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(cls, **kwargs)
    except SystemExit as e:
        if not e.code:
            raise
        failed = True
        code = fail(f"{one_line(captured.getvalue())} (see `{prog} --help`)")
        raise SystemExit(code) from None
    finally:
        if not failed:
            sys.stderr.write(captured.getvalue())  # warnings and other output pass through


@dataclass(frozen=True)
class Group:
    """One box of a command's ``--help``: its title, a line about it and its fields.

    ``title`` "" is the first box (tyro's "options", after ``--help``); tyro appends
    " options" to the others' titles.
    """

    title: str
    about: str
    fields: tuple[str, ...]


def field_docs(cls: type) -> dict[str, str]:
    """The help of each field of the dataclass ``cls``, on one line.

    A field's ``metadata["help"]`` wins, else the string written under the field in the
    source of ``cls`` or of a base class (tyro's own rule); whitespace is folded, so the
    help wraps at the box's width instead of at the source's line breaks.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):  # built at run time (RunConfig): no source
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = after.value.value
    for f in dataclasses.fields(cls):
        if "help" in f.metadata:
            docs[f.name] = f.metadata["help"]
    return {name: " ".join(text.split()) for name, text in docs.items()}


def _fields(cls: type) -> list[tuple[str, Any, str | None]]:
    """(name, annotation with its tyro markers, help) of each field of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    return [(f.name, hints[f.name], docs.get(f.name)) for f in dataclasses.fields(cls)]


def _field(name: str, hint: Any, doc: str | None, value: Any) -> tuple[str, Any, Any]:
    """A make_dataclass field spec: ``name: hint = value``, with its help."""
    metadata = {} if doc is None else {"help": doc}
    return name, hint, dataclasses.field(default_factory=lambda: value, metadata=metadata)


def _folded(section_cls: Any, value: Any) -> Any:
    """``value`` (a config section, e.g. ``PPOConfig``) as an instance of a copy of its
    class whose fields carry their help folded on one line, as the top-level flags' do
    (tyro would keep the source's line breaks)."""
    fields = [_field(*f, getattr(value, f[0])) for f in _fields(type(value))]
    copy = dataclasses.make_dataclass(type(value).__name__, fields, frozen=True)
    copy.__doc__ = type(value).__doc__
    return copy()


def parse_grouped(
    cls: type[T],
    argv: Sequence[str],
    prog: str,
    default: T,
    groups: Sequence[Group],
    inner: str = "run",
    description: str | None = None,
) -> T:
    """:func:`parse` ``cls`` (whose field ``inner`` holds a config dataclass whose fields
    are top-level flags) with the help in the boxes ``groups`` name.

    The flags are those of ``cls``: the config's fields and ``cls``'s other fields by
    their own names (a box adds no prefix), the config's dataclass fields (``--sac.*``)
    as their own boxes, last. Fields no group names go to the first box, after the ones it
    names; names of fields ``cls`` lacks are skipped (one table serves several commands).
    ``default`` gives every default, as :func:`parse`'s does.
    """
    config = getattr(default, inner)
    own = [f for f in _fields(cls) if f[0] != inner]
    config_fields = _fields(type(config))
    sections = [f for f in config_fields if dataclasses.is_dataclass(getattr(config, f[0]))]
    leaves = [f for f in config_fields if f not in sections]
    values = {name: getattr(default, name) for name, _, _ in own}
    values |= {name: getattr(config, name) for name, _, _ in leaves + sections}
    by_name = {f[0]: f for f in own + leaves}
    named = {name for g in groups for name in g.fields}
    first = [g for g in groups if not g.title]
    top = [by_name[n] for g in first for n in g.fields if n in by_name]
    top += [f for f in own + leaves if f[0] not in named]
    boxes = []
    for i, group in enumerate(g for g in groups if g.title):
        members = [by_name[n] for n in group.fields if n in by_name]
        if members:
            box = dataclasses.make_dataclass(f"Box{i}", [_field(*f, values[f[0]]) for f in members])
            about = tyro.conf.arg(name=group.title, help=group.about)
            hint = Annotated[box, about, tyro.conf.OmitArgPrefixes]
            boxes.append((f"box{i}", hint, dataclasses.field(default_factory=box)))
    folded = {name: _folded(hint, values[name]) for name, hint, _ in sections}
    view = dataclasses.make_dataclass(
        f"{cls.__name__}View",
        [
            *(_field(*f, values[f[0]]) for f in top),
            *boxes,
            *(_field(name, type(folded[name]), doc, folded[name]) for name, _, doc in sections),
        ],
    )
    parsed = parse(view, argv, prog, description=description)
    found = {name: getattr(parsed, name) for name, _, _ in top}
    for name, _, _ in sections:  # back to the section's own class
        section = getattr(parsed, name)
        own = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
        found[name] = type(values[name])(**own)
    for name, _, _ in boxes:
        box_values = getattr(parsed, name)
        found |= {f.name: getattr(box_values, f.name) for f in dataclasses.fields(box_values)}
    config_values = {name: found.pop(name) for name, _, _ in leaves + sections}
    return cls(**{inner: type(config)(**config_values), **found})
