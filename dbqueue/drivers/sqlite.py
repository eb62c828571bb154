"""An executor over a sqlite3 connection."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dbqueue.dialects import SQLite, get_dialect
from dbqueue.dialects.base import Dialect
from dbqueue.dialects.sqlite import check_version
from dbqueue.executor import Row, is_missing_table, missing_table


def connect(path: str, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection set up for a queue: autocommit, WAL, a busy timeout for concurrent writers."""
    check_version()
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        use_wal(conn, timeout)
        conn.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the database to WAL, waiting up to ``timeout`` for the lock that takes.

    Switching a rollback-journal database to WAL needs an exclusive lock, and SQLite returns
    "database is locked" at once instead of calling the busy handler: a worker's threads that
    opened their connections together failed their first statement (1 run in 8 of the
    SQLAlchemy CLI test). So the switch is retried here, and skipped when the database is in WAL
    already (the mode is stored in the file: every later connection finds it so).
    """
    deadline = time.monotonic() + timeout
    pause = _LOCK_PAUSE_FIRST
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _LOCK_PAUSE_MAX)


class SqliteExecutor:
    """Runs statements on one sqlite3 connection opened with ``isolation_level=None``."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        check_version()
        self.connection = connection

    @property
    def dialect(self) -> Dialect:
        return _SQLITE

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        try:
            return self.connection.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if is_missing_table(exc):
                raise missing_table(exc) from exc
            raise

    def in_transaction(self) -> bool:
        return self.connection.in_transaction

    def close(self) -> None:
        """Close the connection (a worker thread's, when it ends or after a database error)."""
        self.connection.close()

    def atomic(self) -> AbstractContextManager[object]:
        return _transaction(self.connection)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy timeout): a deferred
    # transaction that reads first can fail to upgrade to a writer and cannot be retried then.
    if conn.in_transaction:
        conn.execute("SAVEPOINT dbqueue")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO dbqueue")
            conn.execute("RELEASE dbqueue")
            raise
        conn.execute("RELEASE dbqueue")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


_SQLITE = get_dialect(SQLite.name)
#: The first and the longest pause between attempts to switch a database to WAL.
_LOCK_PAUSE_FIRST, _LOCK_PAUSE_MAX = 0.001, 0.05
