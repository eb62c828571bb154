"""A REPEATABLE READ transaction whose snapshot is older than a compaction sees the queue as it
was at its snapshot, and answers from it: cancel() finds the items that existed then, retry()
and purge() count them. Where it must change a row that changed after its snapshot,
PostgreSQL refuses (a serialization failure) and dbqueue says so, as SnapshotTooOld, never as
a missing item or as the database being unavailable. PostgreSQL only: SQLite has no
snapshots older than its writers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import (
    CancelOutcome,
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    SnapshotTooOld,
    SplitQueue,
    get_dialect,
)
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements, drop_statements
from tests.core.upkeep.support import compacted

pytestmark = pytest.mark.postgresql

PG = get_dialect("postgresql")
FIELDS = (Field("order_id", FieldKind.INTEGER),)


class Bed:
    """A split queue, its autocommit connection, and an old snapshot's connection."""

    def __init__(self, dsn: str, table: str, **options: Any) -> None:
        self.spec = QueueSpec(table, FIELDS, QueueOptions(**options))
        self.queue = SplitQueue(self.spec, PG)
        self.ex = PsycopgExecutor(psycopg.connect(dsn, autocommit=True))
        for statement in create_statements(self.spec, PG):
            self.ex.execute(statement, {})
        self.old_conn = psycopg.connect(dsn)
        self.old_conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.old = PsycopgExecutor(self.old_conn)

    def snapshot(self) -> None:
        """The old connection takes its snapshot now, on another table."""
        self.old_conn.rollback()
        self.old_conn.execute("SELECT count(*) FROM pg_class")

    def close(self) -> None:
        self.old_conn.close()
        for statement in drop_statements(self.spec, PG):
            self.ex.execute(statement, {})
        self.ex.close()


@pytest.fixture
def bed(pg_dsn: str, table_name: str) -> Iterator[Bed]:
    made = Bed(pg_dsn, table_name, max_attempts=1)
    yield made
    made.close()


def test_cancel_finds_what_the_snapshot_saw_and_refuses_what_changed_since(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    kept, taken = q.push_many(ex, [{"order_id": 1}, {"order_id": 2}])
    bed.snapshot()
    (leased,) = q.pop_batch(ex, 1)  # item `kept` leased after the snapshot
    assert leased.id == kept
    assert compacted(q, ex).compacted  # VACUUM FULL: the old snapshot's rows are kept
    # `taken` is untouched since the snapshot: cancelled, not reported missing.
    assert q.cancel(bed.old, [taken]) == {taken: CancelOutcome.CANCELLED}
    bed.old_conn.commit()
    bed.snapshot()
    q.ack(ex, [leased])  # `kept` changes (is acked) after this snapshot
    with pytest.raises(SnapshotTooOld, match="serialization failure") as raised:
        q.cancel(bed.old, [kept])
    assert raised.value.operation == "cancel"
    assert raised.value.__cause__ is not None  # the driver's error, chained
    bed.old_conn.rollback()
    assert q.cancel(bed.old, [kept]) == {kept: CancelOutcome.MISSING}  # a new snapshot: gone


def test_retry_and_purge_count_what_the_snapshot_saw(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    ids = q.push_many(ex, [{"order_id": i} for i in range(4)])
    q.fail(ex, q.pop_batch(ex, 4), "boom")  # max_attempts=1: failed for good
    bed.snapshot()
    q.push_many(ex, [{"order_id": 10 + i} for i in range(3)])  # after the snapshot
    assert compacted(q, ex).compacted
    assert q.count(bed.old, "failed") == 4
    assert q.retry(bed.old, ids[:2]) == 2
    assert q.purge(bed.old, "failed") == 2
    assert q.count(bed.old, "ready") == 2  # the two retried; not the three pushed after
    bed.old_conn.commit()
    assert q.count(ex, "ready") == 5


def test_a_unique_push_that_lost_its_key_to_a_later_push_is_told_so(
    pg_dsn: str, table_name: str
) -> None:
    made = Bed(pg_dsn, table_name, unique=("order_id",))
    try:
        q = made.queue
        made.snapshot()
        q.push(made.ex, {"order_id": 7})  # committed after the old snapshot
        with pytest.raises(SnapshotTooOld) as raised:
            q.push(made.old, {"order_id": 7})
        assert "unavailable" not in str(raised.value)
        made.old_conn.rollback()
        pushed = q.push(made.old, {"order_id": 7})  # a new snapshot sees the holder
        assert pushed.duplicate
        made.old_conn.commit()
    finally:
        made.close()
