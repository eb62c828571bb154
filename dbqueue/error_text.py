"""Error texts a database can store: what ``fail()`` records of a handler's exception.

A handler's error text comes from anywhere (an exception message built from user input, a
traceback quoting binary data), and a text column does not take everything Python's ``str``
holds: PostgreSQL refuses NUL (``\\x00``) in text, and no UTF-8 database takes a lone surrogate
(``"\\ud800"``, which an undecodable file name or a ``surrogateescape`` decode leaves behind).
Passed as they are, the driver raises and the item cannot even be failed. So both are written
as visible escapes (``\\x00``, ``\\ud800``: nothing silently dropped), and the text is capped,
keeping its head and its tail (where a traceback names the exception), with a marker saying
how much was cut.
"""

from __future__ import annotations

#: The longest error text stored, in characters (after escaping).
MAX_ERROR_CHARS = 65_536

_NUL_ESCAPE = "\\x00"


def storable_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` with NUL and lone surrogates escaped, capped at ``limit`` characters."""
    if "\x00" in text:
        text = text.replace("\x00", _NUL_ESCAPE)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Only lone surrogates fail to encode; backslashreplace writes them as \udXXX.
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    marker = "\n[... {} characters cut by dbqueue ...]\n"
    # The marker's own length depends on the count it shows: size it for the largest count.
    room = limit - len(marker.format(len(text)))
    if room <= 0:
        return text[:limit]
    head = room // 2
    tail = room - head
    return text[:head] + marker.format(len(text) - room) + text[len(text) - tail :]
