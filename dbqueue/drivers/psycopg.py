"""An executor over a psycopg 3 connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from dbqueue.dialects import PostgreSQL, get_dialect
from dbqueue.dialects.base import Dialect
from dbqueue.executor import Row, UnloadedRow, is_missing_table, missing_table


class PsycopgExecutor:
    """Runs statements on one psycopg connection, prepared server-side.

    With an autocommit connection each operation commits on its own (what at-most-once and
    at-least-once pops need); inside ``with conn.transaction():`` operations join it.
    """

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection
        self._local = threading.local()

    def _cursor(self) -> psycopg.Cursor[Any]:
        # One cursor per thread, reused: building a cursor per statement cost ~30 us of client
        # CPU per push, a tenth of a whole prepared single-row push (bench/README.md). A plain
        # Cursor, whatever the connection's cursor_factory: Django, for one, installs
        # ClientCursor, which interpolates values client-side and never prepares.
        cursor: psycopg.Cursor[Any] | None = getattr(self._local, "cursor", None)
        if cursor is None or cursor.closed:
            cursor = self._local.cursor = psycopg.Cursor(self.connection)
        return cursor

    @property
    def dialect(self) -> Dialect:
        return _POSTGRESQL

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        cursor = self._cursor()
        try:
            # The SQL was rendered from validated identifiers only; values stay bound.
            # Binary transfer: text-format arrays escape every element on the client, which
            # cost push_many of 1,000 rows about a third of its time (bench: 46 -> 29 ms).
            cursor.execute(sql, params, prepare=True, binary=True)
        except psycopg.Error as exc:
            if is_missing_table(exc):
                raise missing_table(exc) from exc
            raise
        result = cursor.pgresult
        # The status, not cursor.description, which builds Column objects nobody reads here.
        return fetch_rows(cursor) if result and result.status == _TUPLES_OK else []

    def in_transaction(self) -> bool:
        status = self.connection.info.transaction_status
        return not self.connection.autocommit or status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        """Close the connection (a worker thread's, when it ends or after a database error)."""
        self.connection.close()

    def upkeep_connector(self) -> tuple[str, Callable[[], PsycopgExecutor]]:
        """Where the keeper of this process opens its own connection to this database
        (:mod:`dbqueue.upkeep.keeper`): see :func:`connector_of`."""
        return connector_of(self.connection)

    def atomic(self) -> AbstractContextManager[object]:
        return self.connection.transaction()


def connector_of(
    connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> tuple[str, Callable[[], PsycopgExecutor]]:
    """A key naming the database ``connection`` is to (its parameters, without the
    password), and how to open a new autocommit connection to it with the same parameters, as
    an executor: what the keeper of API consumers runs queues' upkeep rounds on
    (:mod:`dbqueue.upkeep.keeper`), named ``dbqueue keeper`` in ``pg_stat_activity``."""
    info = connection.info
    key = make_conninfo(**info.get_parameters())  # every parameter set, but the password
    password = info.password

    def connect() -> PsycopgExecutor:
        secret = {"password": password} if password else {}
        conninfo = make_conninfo(key, application_name=KEEPER_NAME, **secret)
        return PsycopgExecutor(psycopg.connect(conninfo, autocommit=True))

    return key, connect


#: How the keeper's connections are named (``application_name``).
KEEPER_NAME = "dbqueue keeper"
_POSTGRESQL = get_dialect(PostgreSQL.name)
_TUPLES_OK = pq.ExecStatus.TUPLES_OK


def fetch_rows(cursor: psycopg.Cursor[Any]) -> list[Row]:
    """Every row of the cursor's result. A value psycopg cannot load (a timestamp past year
    9999 or 'infinity', written by SQL outside dbqueue) fails only its own row, which comes
    back as an :class:`~dbqueue.executor.UnloadedRow`."""
    try:
        return cursor.fetchall()
    except psycopg.DataError:
        return _load_each(cursor)


async def afetch_rows(cursor: psycopg.AsyncCursor[Any]) -> list[Row]:
    """:func:`fetch_rows` of an asyncio cursor."""
    try:
        return await cursor.fetchall()
    except psycopg.DataError:
        return _load_each(cursor)


def _load_each(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> list[Row]:
    result = cursor.pgresult
    assert result is not None
    loaders = [
        cursor.adapters.get_loader(result.ftype(c), pq.Format(result.fformat(c)))
        for c in range(result.nfields)
    ]
    rows: list[Row] = []
    for r in range(result.ntuples):
        values: list[Any] = []
        errors: list[str] = []
        for c, loader in enumerate(loaders):
            data = result.get_value(r, c)
            if data is None:
                values.append(None)
                continue
            try:
                assert loader is not None
                values.append(loader(result.ftype(c), cursor).load(data))
            except Exception as exc:  # the loader's own error: the value is not readable
                values.append(None)
                errors.append(f"{type(exc).__name__}: {exc}")
        rows.append(UnloadedRow(values, errors) if errors else tuple(values))
    return rows
