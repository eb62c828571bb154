"""Executors over bare DB-API connections, for using the core without a framework, and for
the adapters, which run core statements on their framework's raw connection."""

from __future__ import annotations

from typing import Any

from dbqueue.dialects.base import Dialect
from dbqueue.executor import Executor


def executor_for(dialect: Dialect, connection: Any) -> Executor:
    """The core executor for a raw DB-API ``connection`` of ``dialect``."""
    if dialect.name == "postgresql":
        from dbqueue.drivers.psycopg import PsycopgExecutor

        return PsycopgExecutor(connection)
    from dbqueue.drivers.sqlite import SqliteExecutor

    return SqliteExecutor(connection)
