"""What the handlers of a ``dbqueue worker`` subprocess in the fan-out CLI tests handled: each
appends ``<group> <value>`` to the file the environment variable ``FANOUT_LOG`` names (the
handler modules import :func:`record`; the tests use the ``handled`` fixture of
tests/sqlalchemy/conftest.py and :func:`lines`)."""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable naming the file the handlers append to.
LOG_VARIABLE = "FANOUT_LOG"


def record(group: str, value: object) -> None:
    """Append ``<group> <value>`` to the log (in the worker subprocess)."""
    with open(os.environ[LOG_VARIABLE], "a", encoding="utf-8") as log:
        log.write(f"{group} {value}\n")


def lines(log: Path) -> list[str]:
    """The log's lines, sorted (the worker's threads append in any order)."""
    return sorted(log.read_text().splitlines()) if log.exists() else []
