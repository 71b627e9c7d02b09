"""Parsing a command's options with tyro: one dataclass per command, errors on one line."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

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
