"""Compaction (dbqueue.compaction): a queue's tables given back the versions a long transaction
pins, on PostgreSQL, with every message kept as it was; nothing to do on SQLite.

A REPEATABLE READ transaction on another connection of the same database holds the xmin
horizon while messages pass, as a report or an idle-in-transaction session would: the
tables grow, compaction brings them back to the size they had before, and the queue goes on
where it was (leases, payloads, numbers and ids).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    RingQueue,
    SnapshotTooOld,
    SplitQueue,
    TransactionStateError,
    compaction,
    get_dialect,
)
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import (
    SEGMENT_SLOTS,
    create_ring_statements,
    create_statements,
    drop_ring_statements,
)
from dbqueue.spec import advisory_key

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT))
NOTE = "x" * 100
CAPACITY = 256
LAYOUTS = ["ring", "split"]


def side_size(ex: Executor, table: str) -> int:
    """The bytes of one table, its indexes and TOAST included."""
    rows = ex.execute("SELECT pg_total_relation_size(%(t)s::regclass)", {"t": table})
    return int(rows[0][0])


@dataclass
class Bed:
    """One queue on the worker's PostgreSQL database, and a way to pin its xmin horizon."""

    queue: RingQueue | SplitQueue
    ex: Executor
    dsn: str

    def size(self) -> int:
        return compaction.size(self.queue, self.ex)

    def pass_messages(self, n: int, batch: int = 100) -> None:
        """Push, pop and ack ``n`` messages, in batches (each batch leaves dead versions)."""
        q, ex = self.queue, self.ex
        for start in range(0, n, batch):
            q.push_many(ex, [{"n": start + i, "note": NOTE} for i in range(batch)])
            q.ack(ex, q.pop_batch(ex, batch))

    def hold_horizon(self) -> psycopg.Connection[Any]:
        """A REPEATABLE READ transaction that has taken its snapshot, on an unrelated table."""
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM pg_class")
        return conn


@contextmanager
def ring_bed(dsn: str, spec: QueueSpec) -> Iterator[Bed]:
    """A ring of ``spec`` on a connection of its own, dropped afterwards."""
    dialect = get_dialect("postgresql")
    with psycopg.connect(dsn, autocommit=True) as conn:
        ex = executor_for(dialect, conn)
        for statement in create_ring_statements(spec, dialect):
            ex.execute(statement, {})
        yield Bed(RingQueue(spec, dialect), ex, dsn)
        for statement in drop_ring_statements(spec, dialect):
            conn.execute(statement)


@pytest.fixture(params=LAYOUTS)
def bed(request: pytest.FixtureRequest, pg_dsn: str, table_name: str) -> Iterator[Bed]:
    dialect = get_dialect("postgresql")
    conn = psycopg.connect(pg_dsn, autocommit=True)
    ex = executor_for(dialect, conn)
    queue: RingQueue | SplitQueue
    if request.param == "ring":
        spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=CAPACITY))
        statements, queue = create_ring_statements(spec, dialect), RingQueue(spec, dialect)
    else:
        spec = QueueSpec(table_name, FIELDS)
        statements, queue = create_statements(spec, dialect), SplitQueue(spec, dialect)
    for statement in statements:
        ex.execute(statement, {})
    yield Bed(queue, ex, pg_dsn)
    if request.param == "ring":
        for statement in drop_ring_statements(spec, dialect):
            conn.execute(statement)
    else:
        conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}"')
    conn.close()


@pytest.mark.postgresql
def test_compaction_gives_back_what_a_held_snapshot_kept(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY * 2)  # the ring's slots have held messages: its working size
    start = bed.size()
    holder = bed.hold_horizon()
    try:
        bed.pass_messages(5_000)
        grown = bed.size()
        assert grown > 3 * start  # the versions a snapshot may still see: nothing prunes them
        result = q.compact(ex)
    finally:
        holder.close()
    assert result.compacted and result.skipped is None
    assert (result.size_before, result.size_after) == (grown, bed.size())
    assert bed.size() <= 1.2 * start


@pytest.mark.postgresql
def test_compaction_keeps_every_message_as_it_was(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY + 50)  # the ring has gone round: numbers past its capacity
    pushed = q.push_many(ex, [{"n": i, "note": f"m{i}"} for i in range(10)])
    leased = q.pop_batch(ex, 4)
    holder = bed.hold_horizon()
    try:
        assert q.compact(ex).compacted
    finally:
        holder.close()
    # A lease taken before compaction is still fenced by its token: its ack finds it.
    assert q.ack(ex, leased) == [m.id for m in leased]
    rest = q.pop_batch(ex, 10)
    assert [(m.id, m.payload) for m in rest] == [
        (i, {"n": n, "note": f"m{n}"}) for n, i in enumerate(pushed) if n >= 4
    ]
    # Numbers and ids go on from where they were (the ring's counters, the data's identity).
    (after,) = [q.push(ex, {"n": 99, "note": "after"})]
    assert after > max(pushed)
    (m,) = q.pop_batch(ex, 5)
    assert (m.id, m.payload) == (after, {"n": 99, "note": "after"})
    assert q.ack(ex, [m, *rest]) == sorted([after, *(x.id for x in rest)])
    assert q.stats(ex).ready == 0


@pytest.mark.postgresql
def test_a_transaction_holding_the_queue_makes_compaction_skip(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    other = executor_for(q.dialect, psycopg.connect(bed.dsn, autocommit=True))
    with other.atomic():
        q.push(other, {"n": 1, "note": "in a transaction left open"})
        result = q.compact(ex, lock_timeout=compaction.LOCK_TIMEOUT)
        assert not result.compacted
        assert result.skipped == "lock not granted in 20 ms"
        assert result.size_before == result.size_after == bed.size()
    # Nothing was left behind: the queue and the connection work, the push is there.
    (m,) = q.pop_batch(ex, 5)
    assert m.payload == {"n": 1, "note": "in a transaction left open"}
    assert q.compact(ex).compacted


@pytest.mark.postgresql
def test_compaction_refuses_to_run_in_the_callers_transaction(bed: Bed) -> None:
    with bed.ex.atomic(), pytest.raises(TransactionStateError, match="transaction of its own"):
        bed.queue.compact(bed.ex)


@pytest.mark.postgresql
def test_compact_if_grown_waits_for_growth(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY * 2)
    first = q.compact_if_grown(ex)  # the first look compacts, unless the tables are small
    assert first is None or first.compacted
    assert q.compact_if_grown(ex) is None
    holder = bed.hold_horizon()
    try:
        bed.pass_messages(5_000)
        result = q.compact_if_grown(ex)
    finally:
        holder.close()
    assert result is not None and result.compacted
    assert q.compact_if_grown(ex) is None  # back to its baseline


@pytest.mark.postgresql
def test_a_split_queue_with_a_large_backlog_is_not_compacted(
    pg_dsn: str, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = get_dialect("postgresql")
    spec = QueueSpec(table_name, FIELDS)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ex = executor_for(dialect, conn)
        for statement in create_statements(spec, dialect):
            ex.execute(statement, {})
        q = SplitQueue(spec, dialect)
        q.push_many(ex, [{"n": i, "note": NOTE} for i in range(30)])
        monkeypatch.setattr(compaction, "MAX_ROWS", 20)
        result = q.compact(ex)
        assert not result.compacted
        assert result.skipped == "more than 20 rows to copy under the lock"
        assert q.stats(ex).ready == 30
        conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}"')


@pytest.mark.sqlite
@pytest.mark.parametrize("layout", LAYOUTS)
def test_sqlite_has_nothing_to_compact(sqlite_conn: sqlite3.Connection, layout: str) -> None:
    dialect = get_dialect("sqlite")
    ex = executor_for(dialect, sqlite_conn)
    queue: RingQueue | SplitQueue
    if layout == "ring":
        spec = QueueSpec("jobs", FIELDS, QueueOptions(capacity=8))
        statements, queue = create_ring_statements(spec, dialect), RingQueue(spec, dialect)
    else:
        spec = QueueSpec("jobs", FIELDS)
        statements, queue = create_statements(spec, dialect), SplitQueue(spec, dialect)
    for statement in statements:
        ex.execute(statement, {})
    queue.push(ex, {"n": 1, "note": "kept"})
    result = queue.compact(ex)
    assert (result.compacted, result.skipped) == (False, "sqlite keeps no dead versions")
    assert queue.compact_if_grown(ex) is None
    assert [m.payload for m in queue.pop_batch(ex, 5)] == [{"n": 1, "note": "kept"}]


@pytest.mark.postgresql
def test_a_long_transaction_that_read_the_queue_keeps_compaction_away(bed: Bed) -> None:
    """A report that read the queue in REPEATABLE READ holds a lock on its tables until it
    ends: compaction skips (it never waits longer than its lock timeout), and the report's
    snapshot still sees what it saw, since nothing was truncated under it."""
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i, "note": NOTE} for i in range(3)])
    table = q.spec.meta_table if isinstance(q, SplitQueue) else q.spec.table
    with psycopg.connect(bed.dsn, autocommit=True) as report:
        report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        seen = report.execute(f'SELECT count(*) FROM "{table}"').fetchone()
        bed.pass_messages(1_000)
        result = q.compact(ex)
        assert (result.compacted, result.skipped) == (False, "lock not granted in 20 ms")
        assert report.execute(f'SELECT count(*) FROM "{table}"').fetchone() == seen
        report.execute("COMMIT")
    assert q.compact(ex).compacted
    assert len(q.pop_batch(ex, 10)) == 3  # as many as before (the passes took the first 3)


@pytest.mark.postgresql
def test_one_process_compacts_a_queue_at_a_time(bed: Bed) -> None:
    """Two workers that see the same growth: the second leaves it to the first, at once,
    rather than queueing behind its lock."""
    q, ex = bed.queue, bed.ex
    key = advisory_key(f"dbqueue-compact:{q.spec.table}")
    with psycopg.connect(bed.dsn, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        result = q.compact(ex)
        assert (result.compacted, result.skipped) == (False, compaction.BUSY)
        other.execute("COMMIT")
    assert q.compact(ex).compacted


@pytest.mark.postgresql
def test_a_snapshot_older_than_a_compaction_is_told_so(bed: Bed) -> None:
    """TRUNCATE is not MVCC-safe: a REPEATABLE READ transaction whose snapshot predates a
    compaction, and that touches the queue only after it, sees the tables empty. What it
    cannot do (a ring push, an ack) raises SnapshotTooOld, not a misleading error; its pops
    find nothing; nothing is lost, and the connection goes on once it rolls back."""
    q, ex = bed.queue, bed.ex
    (kept,) = [q.push(ex, {"n": 1, "note": "before"})]
    (leased,) = q.pop_batch(ex, 1)
    conn = psycopg.connect(bed.dsn)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    old = executor_for(q.dialect, conn)

    def stale() -> None:
        conn.rollback()
        conn.execute("SELECT count(*) FROM pg_class")  # the snapshot, on another table
        assert q.compact(ex).compacted

    stale()
    assert q.pop_batch(old, 5) == []  # the snapshot sees no message
    with pytest.raises(SnapshotTooOld, match="compacted after this transaction took"):
        q.ack(old, [leased])
    if isinstance(q, RingQueue):
        stale()
        with pytest.raises(SnapshotTooOld, match="push cannot run in it; nothing was written"):
            q.push(old, {"n": 2, "note": "stale"})
    conn.rollback()
    # In a transaction of today, everything is where it was: the lease, and its ack.
    assert q.ack(old, [leased]) == [kept]
    conn.commit()
    (again,) = [q.push(old, {"n": 3, "note": "after"})]
    conn.commit()
    assert [(m.id, m.payload) for m in q.pop_batch(ex, 5)] == [(again, {"n": 3, "note": "after"})]
    conn.close()


@pytest.mark.postgresql
def test_a_rings_side_table_is_compacted_with_its_slots(
    pg_dsn: str, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed messages pass through the ring's side table (an insert, then a delete when an
    operator purges or retries them): under a held horizon it grows too, and compaction gives
    it back, in the slots' transaction while both fit under the lock, else in one of its own
    while it fits alone."""
    spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=CAPACITY, max_attempts=1))
    with ring_bed(pg_dsn, spec) as bed:
        q, ex = bed.queue, bed.ex

        def fail_and_purge(n: int) -> None:
            for start in range(0, n, 100):
                q.push_many(ex, [{"n": start + i, "note": NOTE} for i in range(100)])
                q.fail(ex, q.pop_batch(ex, 100), "boom")
                assert q.purge(ex, "failed") == 100

        fail_and_purge(CAPACITY * 2)
        start = bed.size()
        holder = bed.hold_horizon()
        try:
            fail_and_purge(3_000)
            grown = bed.size()
            assert grown > 2 * start
            kept = CAPACITY + 44
            for start_n in range(0, kept, 100):
                batch = min(100, kept - start_n)
                q.push_many(ex, [{"n": start_n + i, "note": "kept"} for i in range(batch)])
                q.fail(ex, q.pop_batch(ex, batch), "kept failed")
            side_grown = side_size(ex, spec.failed_table)
            monkeypatch.setattr(compaction, "MAX_ROWS", kept - 1)  # the side does not fit
            assert q.compaction_plan(ex, kept - 1) == [(("compact", {"segment": table_name}),)]
            assert q.compact(ex).compacted
            # The slots were compacted, the side table left as it was. Compared on the side
            # table alone: the slots' share of the total varies with what pruning reclaimed
            # before the horizon was held.
            assert side_size(ex, spec.failed_table) == side_grown
            monkeypatch.setattr(compaction, "MAX_ROWS", kept)  # it fits alone
            assert [[op for op, _ in steps] for steps in q.compaction_plan(ex, kept)] == [
                ["compact"],
                ["compact_side"],
            ]
            assert q.compact(ex).compacted
            assert side_size(ex, spec.failed_table) < side_grown / 2
        finally:
            holder.close()
        assert bed.size() <= 1.2 * start
        both = q.compaction_plan(ex, CAPACITY + kept)  # both fit: one transaction
        assert [[op for op, _ in steps] for steps in both] == [["compact", "compact_side"]]
        assert q.stats(ex).failed == kept
        assert q.retry(ex, range(10_000)) == kept
        assert sorted(m.payload["n"] for m in q.pop_batch(ex, 5)) == [0, 1, 2, 3, 4]
        # A ring of more slots than the limit is not compacted at all.
        monkeypatch.setattr(compaction, "MAX_ROWS", CAPACITY - 1)
        result = q.compact(ex)
        assert (result.compacted, result.skipped) == (
            False,
            f"more than {CAPACITY - 1} rows to copy under the lock",
        )


class Clock:
    """compaction's time.monotonic, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_growth_waits_for_the_tables_to_double_or_to_settle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(compaction.time, "monotonic", clock.monotonic)
    mib = 1024 * 1024
    growth = compaction.Growth()
    assert growth.due(10 * mib)  # the first look at grown tables compacts them
    growth.record(compaction.CompactResult(True, 10 * mib, 4 * mib))
    assert not growth.due(6 * mib)  # growing: half its size in dead versions is not enough
    clock.now += 1
    assert growth.due(8 * mib)  # doubled: the copy costs about what it gives back
    growth.record(compaction.CompactResult(True, 8 * mib, 4 * mib))
    # The transaction ended at 5 MiB: 25% over, no longer growing.
    assert not growth.due(5 * mib)
    clock.now += compaction.SETTLE - 0.1
    assert not growth.due(5 * mib)
    clock.now += 0.2
    assert growth.due(5 * mib)
    growth.record(compaction.CompactResult(True, 5 * mib, 4 * mib))
    # 10% over and settled, or under MIN_GROWTH: left alone.
    clock.now += 60
    assert not growth.due(int(4.4 * mib))
    clock.now += 60
    assert not growth.due(int(4.4 * mib))
    small = compaction.Growth()
    assert not small.due(100 * 1024)
    clock.now += 60
    assert not small.due(300 * 1024)  # 200 KiB over, settled: under MIN_GROWTH


@pytest.mark.postgresql
def test_a_ring_of_many_slots_is_compacted_a_segment_at_a_time(
    pg_dsn: str, table_name: str
) -> None:
    """A ring of more slots than one lock may copy keeps them in segments (dbqueue.schema.
    ring_segment_bounds): compaction rewrites each in a transaction of its own, keeping every
    message as it was, and a segment it cannot lock stops it there (the ones before it done);
    a snapshot older than the compaction of any segment is told so."""
    capacity = SEGMENT_SLOTS + 1
    spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=capacity))
    s0, s1 = spec.segment_table(0), spec.segment_table(1)
    with ring_bed(pg_dsn, spec) as bed:
        q, ex, dialect = bed.queue, bed.ex, bed.queue.dialect

        def files() -> dict[str, int]:
            query = "SELECT relname, pg_relation_filenode(oid) FROM pg_class WHERE relname IN "
            return dict(ex.execute(query + "(%(s0)s, %(s1)s)", {"s0": s0, "s1": s1}))

        # Messages in both segments: the ring's numbers reach past the first one's slots.
        bed.pass_messages(2_995, batch=599)
        pushed = q.push_many(ex, [{"n": i, "note": f"m{i}"} for i in range(10)])
        assert [p % capacity for p in (pushed[0], pushed[-1])] == [2_995, 3_004]  # s0 to 3,000
        leased = q.pop_batch(ex, 4)
        (slots,) = ex.execute(
            "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%(t)s) WHERE isleaf",
            {"t": table_name},
        )
        assert 0 < slots[0] < bed.size()  # the slots, and the side table

        before = files()
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            other.execute("BEGIN")
            other.execute(f'LOCK TABLE "{s1}" IN ACCESS SHARE MODE')
            result = q.compact(ex)
            assert (result.compacted, result.skipped) == (False, "lock not granted in 20 ms")
            assert files()[s0] != before[s0] and files()[s1] == before[s1]
            other.execute("COMMIT")

        old = psycopg.connect(pg_dsn)
        old.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        old.execute("SELECT count(*) FROM pg_class")  # a snapshot older than the compaction
        before = files()
        result = q.compact(ex)
        assert result.compacted and result.size_after <= result.size_before
        assert all(files()[name] != before[name] for name in (s0, s1))
        with pytest.raises(SnapshotTooOld, match="push cannot run in it; nothing was written"):
            q.push(executor_for(dialect, old), {"n": 2, "note": "stale"})
        old.close()

        # Every message as it was: the leases fenced by their tokens, the rest in order.
        assert q.ack(ex, leased) == [m.id for m in leased]
        rest = q.pop_batch(ex, 10)
        assert [(m.id, m.payload) for m in rest] == [
            (i, {"n": n, "note": f"m{n}"}) for n, i in enumerate(pushed) if n >= 4
        ]
        assert q.ack(ex, rest) == [m.id for m in rest]
        assert q.stats(ex).capacity == capacity
