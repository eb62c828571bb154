"""A queue operation during an outage raises QueueUnavailable (a DBQueueError chaining the
driver's error) that says whether the message is known not stored, on PostgreSQL (a server
that dropped the connection) and SQLite (a database locked by another writer)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, QueueUnavailable, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.drivers.sqlite import SqliteExecutor, connect
from dbqueue.errors import DBQueueError
from dbqueue.schema import create_statements

FIELDS = (Field("n", FieldKind.INTEGER),)


@pytest.fixture
def pg_queue(pg_dsn: str, table_name: str) -> Iterator[SplitQueue]:
    queue = SplitQueue(QueueSpec(table_name, FIELDS), get_dialect("postgresql"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for statement in create_statements(queue.spec, queue.dialect):
            conn.execute(statement)
        yield queue
        conn.execute(
            f'DROP TABLE "{queue.spec.table}", "{queue.spec.meta_table}", "{queue.spec.head_table}"'
        )


def _terminate(pg_dsn: str, victim: psycopg.Connection) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])


def _count(pg_dsn: str, queue: SplitQueue) -> int:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{queue.spec.meta_table}"').fetchone()
        return int(row[0]) if row else 0


@pytest.mark.postgresql
def test_a_push_on_a_dropped_connection_raises_queue_unavailable(
    pg_dsn: str, pg_queue: SplitQueue
) -> None:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    ex = PsycopgExecutor(conn)
    pg_queue.push(ex, {"n": 1})
    _terminate(pg_dsn, conn)  # a restart, an admin, a failover
    with pytest.raises(QueueUnavailable) as err:
        pg_queue.push(ex, {"n": 2})
    assert isinstance(err.value, DBQueueError)
    assert isinstance(err.value.__cause__, psycopg.Error)  # the driver's error, chained
    assert err.value.operation == "push" and err.value.queue == pg_queue.spec.table
    # Terminated while idle: either the server's own word (refused: not stored) or a broken
    # socket (unknown); here nothing was stored, whichever the driver saw first.
    assert err.value.stored in (False, None)
    assert "unavailable during push" in str(err.value)
    assert _count(pg_dsn, pg_queue) == 1
    conn.close()


@pytest.mark.postgresql
def test_in_a_transaction_the_message_is_known_not_stored(
    pg_dsn: str, pg_queue: SplitQueue
) -> None:
    conn = psycopg.connect(pg_dsn)  # a transaction opens at the first statement
    ex = PsycopgExecutor(conn)
    pg_queue.push(ex, {"n": 1})
    _terminate(pg_dsn, conn)
    with pytest.raises(QueueUnavailable) as err:
        pg_queue.push(ex, {"n": 2})
    assert err.value.stored is False and "nothing was written" in str(err.value)
    assert _count(pg_dsn, pg_queue) == 0  # the first push went with the transaction
    conn.close()


@pytest.mark.sqlite
def test_a_locked_sqlite_database_raises_queue_unavailable(
    sqlite_path: str, table_name: str
) -> None:
    queue = SplitQueue(QueueSpec(table_name, FIELDS), get_dialect("sqlite"))
    holder = connect(sqlite_path)
    for statement in create_statements(queue.spec, queue.dialect):
        holder.execute(statement)
    ex = SqliteExecutor(connect(sqlite_path, timeout=0.05))
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    with pytest.raises(QueueUnavailable) as err:
        queue.push(ex, {"n": 1})
    assert err.value.stored is False and "locked" in str(err.value)
    holder.execute("ROLLBACK")
    assert queue.push(ex, {"n": 1}) == 1  # the same connection works once the lock is gone
