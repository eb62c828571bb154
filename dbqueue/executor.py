"""The seam between the core and a database connection.

The core hands an executor a statement's SQL and a dict of bound values; the executor runs it on
*its* connection (Django's, a SQLAlchemy Session's, a bare psycopg or sqlite3 connection) and
returns the rows. Nothing else crosses the seam, so the same operations join whatever
transaction the caller has open.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from dbqueue.dialects.base import Dialect
from dbqueue.errors import QueueTableMissing

Row = tuple[Any, ...]


class UnloadedRow(tuple[Any, ...]):
    """A row some of whose values the driver could not turn into Python objects (a timestamp
    past year 9999, written by SQL outside dbqueue): those are None, and ``errors`` says what
    went wrong. An executor returns it in place of the row, so that one bad row does not
    take its statement's other rows down with it (a pop reads the rest, see
    :meth:`dbqueue.layout.Layout._read_each`)."""

    errors: list[str]

    def __new__(cls, values: list[Any], errors: list[str]) -> UnloadedRow:
        row = super().__new__(cls, values)
        row.errors = errors
        return row


def columns_from(row: Row, start: int) -> Row:
    """``row[start:]``, still an :class:`UnloadedRow` if ``row`` was one."""
    if isinstance(row, UnloadedRow):
        return UnloadedRow(list(row[start:]), row.errors)
    return row[start:]


class Executor(Protocol):
    """Runs SQL on one connection. Implemented by every front end."""

    @property
    def dialect(self) -> Dialect:
        """The dialect of the connection."""
        ...

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        """Run one statement (prepared where the driver can) and return its rows, if any.

        Raises :class:`~dbqueue.errors.QueueTableMissing` when a table does not exist.
        """
        ...

    def in_transaction(self) -> bool:
        """True if a statement run now would not be committed on its own when it returns."""
        ...

    def atomic(self) -> AbstractContextManager[object]:
        """A transaction, or a savepoint inside the caller's, for multi-statement blocks."""
        ...

    # Optional: ``sleep(seconds)``, how the core waits between attempts (a push into a full
    # ring) on this executor's thread; ``time.sleep`` when the executor has none. An executor
    # driven from an event loop gives the loop back instead of blocking it.


_MISSING_TABLE_SQLSTATE = "42P01"


def is_missing_table(exc: BaseException) -> bool:
    """True if a driver exception says a table does not exist (psycopg, sqlite3)."""
    if getattr(exc, "sqlstate", None) == _MISSING_TABLE_SQLSTATE:
        return True
    return type(exc).__name__ == "OperationalError" and "no such table" in str(exc)


def missing_table(exc: BaseException) -> QueueTableMissing:
    """The QueueTableMissing error for a driver exception that :func:`is_missing_table`."""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return QueueTableMissing(first_line)
