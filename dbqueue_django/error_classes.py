"""The exception class a failure recorded: what the admin's "error class" filter offers.

A worker stores a failed attempt's whole traceback as ``last_error`` (``traceback.format_exc``),
which ends on the exception's line, ``ValueError: bad value`` (``shop.mail.SmtpDown: ...`` for
a class outside the builtins). Code that fails an item itself may store any text: a class is
only read from a line that starts with a dotted Python name and a colon, or is that name alone.
"""

from __future__ import annotations

import re

#: A line naming an exception: ``Name`` or ``pkg.mod.Name``, then ``: message`` or nothing.
_CLASS_LINE = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)(?::|$)")
#: What a filter value may be: a dotted Python name, nothing a regex would read otherwise.
_CLASS_NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
#: The line that opens a traceback; its exception line follows the indented frames.
_TRACEBACK = "Traceback (most recent call last):"


def error_class(text: str | None) -> str | None:
    """The class of the exception ``text`` ends on, or None if it names none.

    In a traceback it is the first line after the last traceback's indented frames (a
    message may run over several lines after it); in any other text, the last line that
    looks like ``Name: message``.
    """
    if not text:
        return None
    lines = text.splitlines()
    start = max((i for i, line in enumerate(lines) if line == _TRACEBACK), default=-1)
    if start >= 0:
        for line in lines[start + 1 :]:
            if line[:1].isspace():
                continue  # a frame, or the source line and the caret of a SyntaxError
            match = _CLASS_LINE.match(line)
            return match.group(1) if match else None
        return None
    for line in reversed(lines):
        match = _CLASS_LINE.match(line)
        if match:
            return match.group(1)
    return None


def is_class_name(value: str) -> bool:
    """Whether ``value`` may be an exception class's (dotted) name."""
    return bool(_CLASS_NAME.match(value))


def class_line_pattern(name: str) -> str:
    """A regular expression, the same in PostgreSQL and Python (SQLite's REGEXP in Django),
    that finds a line naming the exception class ``name`` (checked by :func:`is_class_name`).

    It matches the classes of a chained traceback's earlier exceptions too: telling the last
    one apart in SQL would take the parsing :func:`error_class` does.
    """
    if not is_class_name(name):
        raise ValueError(f"not a class name: {name!r}")
    return r"(^|\n)" + re.escape(name) + r"(:|\r?\n|$)"
