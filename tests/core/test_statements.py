"""How a queue's statements run (dbqueue.statements): a statement that is its own transaction
and meets a serialization failure, because REPEATABLE READ is the connection's default (a
role's ``default_transaction_isolation``, a driver option), is run again with a new snapshot;
in the caller's transaction the failure is the caller's (SnapshotTooOld). PostgreSQL only:
SQLite has no such failure."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, SnapshotTooOld, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements, drop_statements

pytestmark = pytest.mark.postgresql

PG = get_dialect("postgresql")


@pytest.fixture
def queue(pg_dsn: str, table_name: str) -> Iterator[SplitQueue]:
    spec = QueueSpec(table_name, (Field("n", FieldKind.INTEGER),))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for statement in create_statements(spec, PG):
            admin.execute(statement)
        yield SplitQueue(spec, PG)
        for statement in drop_statements(spec, PG):
            admin.execute(statement)


def _ack_behind_a_change(queue: SplitQueue, dsn: str, *, in_transaction: bool) -> list[Any]:
    """Pop an item on a REPEATABLE READ connection, let another transaction lock its meta row
    and change it (a new version, same values) while the ack waits for that lock; return what
    the ack returned or raised."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET default_transaction_isolation = 'repeatable read'")
    ex = PsycopgExecutor(conn)
    queue.push(ex, {"n": 1})
    (message,) = queue.pop_batch(ex, 1)
    other = psycopg.connect(dsn)
    other.execute(f'UPDATE "{queue.spec.meta_table}" SET priority = priority')
    outcome: list[Any] = []

    def ack() -> None:
        try:
            if in_transaction:
                with ex.atomic():
                    outcome.append(queue.ack(ex, [message]))
            else:
                outcome.append(queue.ack(ex, [message]))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=ack)
    thread.start()
    thread.join(0.5)
    other.commit()
    thread.join()
    other.close()
    conn.close()
    return outcome


def test_a_statement_of_its_own_is_run_again_after_a_serialization_failure(
    queue: SplitQueue, pg_dsn: str
) -> None:
    (acked,) = _ack_behind_a_change(queue, pg_dsn, in_transaction=False)
    assert acked == [1]  # the ids it acked: the queue's first item


def test_in_the_caller_s_transaction_it_is_the_caller_s_to_retry(
    queue: SplitQueue, pg_dsn: str
) -> None:
    (raised,) = _ack_behind_a_change(queue, pg_dsn, in_transaction=True)
    assert isinstance(raised, SnapshotTooOld)
