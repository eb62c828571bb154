"""The executor over a Django database connection: the only place the adapter touches SQL."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from dbqueue.dialects import get_dialect
from dbqueue.dialects.base import Dialect
from dbqueue.drivers import executor_for
from dbqueue.errors import UnsupportedDatabase
from dbqueue.executor import Executor, Row

#: Django's vendor names for the engines the core supports.
VENDORS = {"postgresql": "postgresql", "sqlite": "sqlite"}

#: psycopg prepares a statement once it has run this many times. Django disables preparing
#: (``prepare_threshold=None``) to keep transaction-mode poolers working; with ``None`` psycopg
#: ignores even an explicit ``prepare=True``. dbqueue sets this unreachable threshold instead,
#: so its own statements (which ask with ``prepare=True``) are prepared and no other query is.
#: Measured (bench push_single, Django manager): unprepared 1,450 msg/s, prepared 2,400 msg/s
#: against a thin loop's 2,800 — planning the two-table CTE was most of the difference.
NEVER_AUTO_PREPARE = 2**31 - 1


def wants_prepared_statements(connection: BaseDatabaseWrapper) -> bool:
    """Whether dbqueue may prepare its statements on this PostgreSQL connection.

    Yes unless the project said otherwise: ``DBQUEUE_PREPARED_STATEMENTS = False`` (behind a
    pooler that cannot carry prepared statements, such as PgBouncer before 1.21 in transaction
    mode), or an explicit ``"prepare_threshold"`` in the database's ``OPTIONS`` (that choice,
    ``None`` included, is left exactly as given).
    """
    if not getattr(settings, "DBQUEUE_PREPARED_STATEMENTS", True):
        return False
    return "prepare_threshold" not in connection.settings_dict.get("OPTIONS", {})


def _allow_prepare(connection: BaseDatabaseWrapper) -> None:
    raw = connection.connection
    if getattr(raw, "prepare_threshold", 0) is None and wants_prepared_statements(connection):
        raw.prepare_threshold = NEVER_AUTO_PREPARE


def dialect_for(connection: BaseDatabaseWrapper) -> Dialect:
    """The core dialect of a Django connection, or UnsupportedDatabase."""
    name = VENDORS.get(connection.vendor)
    if name is None:
        raise UnsupportedDatabase(
            f"database alias {connection.alias!r} uses {connection.vendor!r}; dbqueue supports "
            f"{', '.join(sorted(VENDORS))}"
        )
    return get_dialect(name)


#: The core executor of each Django connection, with the raw DB-API connection it runs on
#: (replaced when Django reconnects). Django connections belong to one thread, so each
#: executor, and the cursor it keeps, is used by one thread only. Keyed by the wrapper: a
#: sqlite3 connection cannot be weakly referenced.
_DRIVERS: weakref.WeakKeyDictionary[BaseDatabaseWrapper, tuple[Any, Executor]] = (
    weakref.WeakKeyDictionary()
)


def _driver(dialect: Dialect, connection: BaseDatabaseWrapper) -> Executor:
    raw = connection.connection
    cached = _DRIVERS.get(connection)
    if cached is None or cached[0] is not raw:
        _allow_prepare(connection)  # once per raw connection, not per statement
        cached = _DRIVERS[connection] = (raw, executor_for(dialect, raw))
    return cached[1]


class DjangoExecutor:
    """Runs core statements on ``connections[alias]``, inside Django's transaction state."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.connection = connections[alias]
        self._dialect = dialect_for(self.connection)

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        conn = self.connection
        # As Django's own cursors do: inside an atomic block already marked for rollback,
        # refuse to run instead of working on a transaction that is going to be undone.
        conn.validate_no_broken_transaction()
        conn.ensure_connection()
        # The core's own executor runs the statement on Django's raw DB-API connection, so the
        # SQL joins whatever transaction Django has open.
        driver = _driver(self._dialect, conn)
        # A database error inside atomic() marks the block for rollback, as Django's own
        # queries do, so the caller cannot commit half of a failed operation by mistake.
        with transaction.mark_for_rollback_on_error(self.alias):
            if not conn.queries_logged:
                return driver.execute(sql, params)
            start = time.monotonic()
            try:
                return driver.execute(sql, params)
            finally:
                entry: dict[str, Any] = {"sql": sql, "params": params}
                entry["time"] = f"{time.monotonic() - start:.3f}"
                conn.queries_log.append(entry)

    def in_transaction(self) -> bool:
        return not self.connection.get_autocommit() or self.connection.in_atomic_block

    def upkeep_connector(self) -> Any:
        """Where the keeper of this process connects to this alias's database for its upkeep
        rounds (:mod:`dbqueue.upkeep.keeper`): the parameters of the connection Django has
        open (PostgreSQL; None elsewhere)."""
        driver = _DRIVERS.get(self.connection)
        connector = getattr(driver[1] if driver else None, "upkeep_connector", None)
        return None if connector is None else connector()

    def atomic(self) -> AbstractContextManager[object]:
        conn = self.connection
        if self._dialect.name == "sqlite" and conn.get_autocommit() and not conn.in_atomic_block:
            return _immediate(conn, transaction.atomic(using=self.alias))
        return transaction.atomic(using=self.alias)


@contextmanager
def _immediate(conn: BaseDatabaseWrapper, block: AbstractContextManager[object]) -> Iterator[None]:
    """``block`` (an outermost ``atomic()`` on SQLite) begun with ``BEGIN IMMEDIATE``, as the
    core's own SQLite driver begins its transactions: a deferred one reads under a shared lock
    first, and its first write, while a worker's pop holds the write lock and waits for readers
    to commit, fails at once with "database is locked" (SQLite's busy handler would deadlock,
    so it is not called) where an immediate one waits its turn. The connection's own
    ``transaction_mode`` (Django's OPTIONS) applies again to every other block."""
    conn.ensure_connection()
    mode = getattr(conn, "transaction_mode", None)
    conn.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
    try:
        block.__enter__()
    finally:
        conn.transaction_mode = mode  # type: ignore[attr-defined]
    try:
        yield
    except BaseException as exc:
        if not block.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        block.__exit__(None, None, None)
