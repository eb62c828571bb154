"""The executor over a Django database connection: the only place the adapter touches SQL."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from dbqueue.dialects import get_dialect
from dbqueue.dialects.base import Dialect
from dbqueue.drivers import executor_for
from dbqueue.errors import UnsupportedDatabase
from dbqueue.executor import Row

#: Django's vendor names for the engines the core supports.
VENDORS = {"postgresql": "postgresql", "sqlite": "sqlite"}


def dialect_for(connection: BaseDatabaseWrapper) -> Dialect:
    """The core dialect of a Django connection, or UnsupportedDatabase."""
    name = VENDORS.get(connection.vendor)
    if name is None:
        raise UnsupportedDatabase(
            f"database alias {connection.alias!r} uses {connection.vendor!r}; dbqueue supports "
            f"{', '.join(sorted(VENDORS))}"
        )
    return get_dialect(name)


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
        driver = executor_for(self._dialect, conn.connection)
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

    def atomic(self) -> AbstractContextManager[object]:
        return transaction.atomic(using=self.alias)
