"""The executor over a SQLAlchemy ``Connection``: the only place the adapter runs SQL.

Statements go through ``Connection.exec_driver_sql``, so the core's SQL reaches the DB-API
cursor as it is (psycopg's ``%(name)s``/``%(name)b``, sqlite3's ``:name``), on the connection
the Session (or the caller) already holds: no second connection, and every operation joins
the caller's transaction. psycopg prepares a statement server-side once it has run five times
on a connection, so the core's statements are prepared as with the other fronts.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util.concurrency import await_only, in_greenlet

from dbqueue.dialects.base import Dialect
from dbqueue.drivers.psycopg import connector_of, fetch_rows
from dbqueue.executor import Row, is_missing_table, missing_table
from dbqueue_sa.psycopg_async import CORE_ROWS, rows_of
from dbqueue_sa.tables import core_dialect_of


class SAExecutor:
    """Runs core statements on one SQLAlchemy ``Connection`` inside its transaction.

    A Session's work is committed by ``session.commit()``, so :meth:`in_transaction` is True:
    only an operation that opened its own transaction to commit it at once (an at-most-once
    pop outside any transaction, see :class:`dbqueue_sa.queue.SAQueue`) is made with
    ``commits=True``.
    """

    def __init__(self, connection: sa.Connection, *, commits: bool = False) -> None:
        self.connection = connection
        self._dialect = core_dialect_of(connection.dialect)
        self._commits = commits
        self._sqlite = self._dialect.name == "sqlite"
        #: asyncpg takes numbered parameters ($1, ...) in a tuple, not psycopg's named ones.
        self._numbered = connection.dialect.driver == "asyncpg"
        #: SQLAlchemy's asyncio psycopg adapter: rows read as in dbqueue_sa.psycopg_async.
        async_psycopg = connection.dialect.driver == "psycopg" and connection.dialect.is_async
        self._options = {CORE_ROWS: True} if async_psycopg else None

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    def _begin_sqlite(self) -> None:
        # pysqlite (and aiosqlite) begin a transaction only before a plain INSERT, UPDATE,
        # DELETE or REPLACE: a WITH ... UPDATE, which the core's pops are, would run in
        # autocommit and commit behind the Session's back. BEGIN IMMEDIATE takes the write lock
        # up front, as the core's own SQLite executor does. Engines that emit BEGIN themselves
        # (SQLAlchemy's recipe for SAVEPOINT support) are already in a transaction here.
        raw: Any = self.connection.connection.driver_connection
        if not raw.in_transaction:
            self.connection.exec_driver_sql("BEGIN IMMEDIATE")

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        if self._sqlite:
            self._begin_sqlite()
        bound: Any = dict(params)
        if self._numbered:
            sql, names = numbered(sql)
            bound = tuple(params[name] for name in names)
        try:
            # The SQL was rendered from validated identifiers only; values stay bound.
            result = self.connection.exec_driver_sql(sql, bound, execution_options=self._options)
        except DBAPIError as exc:
            if exc.orig is not None and is_missing_table(exc.orig):
                raise missing_table(exc.orig) from exc
            raise
        if not result.returns_rows:
            return []
        cursor: Any = result.cursor
        if self._options is not None:
            rows = rows_of(cursor)
            result.close()
            return rows
        if isinstance(cursor, psycopg.Cursor):
            # Read by the core's own fetch: a value psycopg cannot load fails its row only.
            rows = fetch_rows(cursor)
            result.close()
            return rows
        return [tuple(row) for row in result]

    def sleep(self, seconds: float) -> None:
        """Wait between attempts (a push into a full ring): under ``AsyncSession.run_sync``
        this code runs in a greenlet on the event loop's thread, so the wait goes back to the
        loop (``asyncio.sleep``) instead of stopping every other task for it."""
        if in_greenlet():
            await_only(asyncio.sleep(seconds))
        else:
            time.sleep(seconds)

    def in_transaction(self) -> bool:
        return not self._commits

    def upkeep_connector(self) -> Any:
        """Where the keeper of this process connects to this database for its upkeep rounds
        (:mod:`dbqueue.upkeep.keeper`): the parameters of the psycopg connection the session
        holds, sync or asyncio (None for any other driver)."""
        raw: Any = self.connection.connection.driver_connection
        if isinstance(raw, psycopg.Connection | psycopg.AsyncConnection):
            return connector_of(raw)
        return None

    def atomic(self) -> AbstractContextManager[object]:
        """A savepoint in the connection's transaction (the transaction itself when this
        operation commits on its own)."""
        if self._commits:
            return nullcontext()
        if self._sqlite:
            self._begin_sqlite()
        return self.connection.begin_nested()


_NAMED = re.compile(r"%\((\w+)\)[sb]|%%")


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """The core's psycopg SQL (``%(name)s``, binary ``%(name)b``, ``%%`` for a percent sign)
    with numbered parameters instead (``$1``...; a name used twice keeps its number), and the
    names in number order: what asyncpg prepares. Rendered once per statement (cached)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _NAMED.sub(number, sql), tuple(names)
