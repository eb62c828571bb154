"""Compaction (dbqueue.upkeep.compaction): a queue's tables given back what a long transaction
made them grow by, once it has ended, on PostgreSQL, with every message kept as it was and
nothing changed for any snapshot; nothing to do on SQLite.

A REPEATABLE READ transaction on another connection of the same database holds the xmin
horizon while messages pass, as a report or an idle-in-transaction session would: the
tables grow; while it lasts compaction leaves them alone (a rewrite would copy every version
it keeps), once it ends compaction brings them back to the size they had before, and the
queue goes on where it was (leases, payloads, numbers and ids).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
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
    SplitQueue,
    TransactionStateError,
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
from dbqueue.upkeep import compaction
from tests.core.upkeep.support import HELD, compacted, unpinned

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT))
NOTE = "x" * 100
CAPACITY = 256
LAYOUTS = ["ring", "split"]


def table_size(ex: Executor, table: str) -> int:
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
        conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"')
    conn.close()


@pytest.mark.postgresql
def test_compaction_waits_for_the_horizon_then_gives_back_what_it_kept(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY * 2)  # the ring's slots have held messages: its working size
    assert compacted(q, ex).compacted
    start = bed.size()
    holder = bed.hold_horizon()
    try:
        bed.pass_messages(5_000)
        grown = bed.size()
        assert grown > 3 * start  # the versions a snapshot may still see: nothing prunes them
        held = q.compact(ex)
    finally:
        holder.close()
    # Held: nothing rewritten (a rewrite would copy every version the snapshot keeps).
    assert not held.compacted and held.skipped is not None and held.skipped.startswith(HELD)
    assert held.size_after >= grown * 0.9
    result = compacted(q, ex)
    assert result.compacted and result.skipped is None
    assert result.size_after == bed.size() <= 1.2 * start


@pytest.mark.postgresql
def test_compaction_keeps_every_message_as_it_was(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY + 50)  # the ring has gone round: numbers past its capacity
    pushed = q.push_many(ex, [{"n": i, "note": f"m{i}"} for i in range(10)])
    leased = q.pop_batch(ex, 4)
    assert compacted(q, ex).compacted
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
def test_a_snapshot_taken_before_a_compaction_sees_the_queue_as_it_was(bed: Bed) -> None:
    """What TRUNCATE could not promise: a REPEATABLE READ transaction (a report, a pg_dump)
    whose snapshot was taken before a compaction, and that reads the queue only after it,
    sees every message its snapshot saw, and not those pushed after it."""
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY * 2)
    before = q.push_many(ex, [{"n": i, "note": "before"} for i in range(5)])
    with psycopg.connect(bed.dsn) as report:
        report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        report.execute("SELECT count(*) FROM pg_class")  # its snapshot, on another table
        q.push_many(ex, [{"n": i, "note": "after"} for i in range(3)])
        q.ack(ex, q.pop_batch(ex, 2))  # two of the first five go
        # The few versions the snapshot keeps are copied with the rest.
        assert compacted(q, ex).compacted
        notes = report.execute(f'SELECT note FROM "{q.spec.table}" WHERE note IS NOT NULL')
        assert sorted(r[0] for r in notes.fetchall()) == ["before"] * 5
    assert [m.id for m in q.pop_batch(ex, 10)] == [*before[2:], *q_after(q, before)]


def q_after(q: RingQueue | SplitQueue, before: list[Any]) -> list[int]:
    """The ids (numbers) of the three messages pushed after ``before``: the next ones."""
    return [before[-1] + 1 + i for i in range(3)]


@pytest.mark.postgresql
@pytest.mark.solo  # what it skips for: not for another worker's held horizon
def test_a_transaction_holding_the_queue_makes_compaction_skip(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    other = executor_for(q.dialect, psycopg.connect(bed.dsn, autocommit=True))
    with other.atomic():
        q.push(other, {"n": 1, "note": "in a transaction left open"})
        result = unpinned(q, ex)
        assert not result.compacted and result.skipped is not None
        assert "not rewritten: locked by other statements for 200 ms" in result.skipped
        assert result.size_after == bed.size()  # vacuumed: its free space map, say
    # Nothing was left behind: the queue and the connection work, the push is there, and
    # the session's lock timeout is back to what it was.
    (m,) = q.pop_batch(ex, 5)
    assert m.payload == {"n": 1, "note": "in a transaction left open"}
    assert ex.execute("SHOW lock_timeout", {}) == [("0",)]
    assert compacted(q, ex).compacted


@pytest.mark.postgresql
def test_compaction_refuses_to_run_in_the_callers_transaction(bed: Bed) -> None:
    with bed.ex.atomic(), pytest.raises(TransactionStateError, match="outside a transaction"):
        bed.queue.compact(bed.ex)


@pytest.mark.postgresql
@pytest.mark.solo  # it needs the horizon free once its holder ends: no other worker's
def test_compact_if_grown_waits_for_growth_and_for_the_horizon(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(compaction.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(compaction, "MIN_GROWTH", 256 * 1024)  # a small queue's growth
    q, ex = bed.queue, bed.ex
    bed.pass_messages(CAPACITY * 2)
    first = q.compact_if_grown(ex)  # the first look compacts, unless the tables are small
    assert first is None or first.compacted
    assert q.compact_if_grown(ex) is None
    holder = bed.hold_horizon()
    try:
        bed.pass_messages(5_000)
        held = q.compact_if_grown(ex)
        assert held is not None and not held.compacted
        assert q.compact_if_grown(ex) is None  # it tries again later, not at every look
    finally:
        holder.close()
    clock.now += compaction.RETRY_FIRST
    result = q.compact_if_grown(ex)
    assert result is not None and result.compacted
    assert q.compact_if_grown(ex) is None  # back to its baseline


@pytest.mark.postgresql
def test_a_split_queue_with_a_large_backlog_is_not_rewritten(
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
        assert not result.compacted and result.skipped is not None
        assert "holds 30 rows, more than 20 to copy under a lock" in result.skipped
        assert q.stats(ex).ready == 30
        conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"')


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
@pytest.mark.solo  # what it skips for: not for another worker's held horizon
def test_a_long_transaction_that_read_the_queue_keeps_compaction_away(bed: Bed) -> None:
    """A report that read the queue in REPEATABLE READ holds a lock on its tables until it
    ends: compaction skips (it never waits longer than its lock timeout), and the report's
    snapshot still sees what it saw."""
    q, ex = bed.queue, bed.ex
    q.push_many(ex, [{"n": i, "note": NOTE} for i in range(3)])
    table = q.spec.meta_table if isinstance(q, SplitQueue) else q.spec.table
    with psycopg.connect(bed.dsn, autocommit=True) as report:
        report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        seen = report.execute(f'SELECT count(*) FROM "{table}"').fetchone()
        result = unpinned(q, ex)
        assert not result.compacted and result.skipped is not None
        assert f"{table} not rewritten: locked by other statements" in result.skipped
        assert report.execute(f'SELECT count(*) FROM "{table}"').fetchone() == seen
        report.execute("COMMIT")
    assert compacted(q, ex).compacted
    assert len(q.pop_batch(ex, 10)) == 3


@pytest.mark.postgresql
def test_a_compaction_never_makes_the_queue_wait_behind_its_lock(bed: Bed) -> None:
    """A reader holds a lock on the queue's tables: a rewrite that waited for its own lock
    would queue every push behind it. Compaction takes only free tables (SKIP_LOCKED): a push
    meanwhile is not kept waiting, and no session setting is left behind (it may run behind a
    pooler in transaction mode, where the next client would get it)."""
    q, ex = bed.queue, bed.ex
    table = q.spec.meta_table if isinstance(q, SplitQueue) else q.spec.table
    results: list[compaction.CompactResult] = []
    with psycopg.connect(bed.dsn, autocommit=True) as reader:
        reader.execute("BEGIN")
        reader.execute(f'LOCK TABLE "{table}" IN ACCESS SHARE MODE')
        thread = threading.Thread(
            target=lambda: results.append(compacted(q, ex, dt.timedelta(seconds=2)))
        )
        thread.start()
        with psycopg.connect(bed.dsn, autocommit=True) as pusher:
            pusher.execute("SET lock_timeout = '1s'")  # a push queued behind a lock fails
            q.push(executor_for(q.dialect, pusher), {"n": 1, "note": "meanwhile"})
        reader.execute("COMMIT")
        thread.join()
    assert results[0].compacted  # once the reader was gone
    assert ex.execute("SHOW lock_timeout", {}) == [("0",)]
    assert [m.payload["note"] for m in q.pop_batch(ex, 5)] == ["meanwhile"]


@pytest.mark.postgresql
def test_a_rings_side_table_is_compacted_with_its_slots(pg_dsn: str, table_name: str) -> None:
    """Failed messages pass through the ring's side table (an insert, then a delete when an
    operator purges or retries them): under a held horizon it grows too, and compaction gives
    it back with the slots once the horizon moves on."""
    spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=CAPACITY, max_attempts=1))
    with ring_bed(pg_dsn, spec) as bed:
        q, ex = bed.queue, bed.ex

        def fail_and_purge(n: int) -> None:
            for start in range(0, n, 100):
                q.push_many(ex, [{"n": start + i, "note": NOTE} for i in range(100)])
                q.fail(ex, q.pop_batch(ex, 100), "boom")
                assert q.purge(ex, "failed") == 100

        fail_and_purge(CAPACITY * 2)
        assert compacted(q, ex).compacted
        start, side_start = bed.size(), table_size(ex, spec.failed_table)
        holder = bed.hold_horizon()
        try:
            fail_and_purge(3_000)
            q.push_many(ex, [{"n": i, "note": "kept"} for i in range(10)])
            q.fail(ex, q.pop_batch(ex, 10), "kept failed")
            side_grown = table_size(ex, spec.failed_table)
            assert side_grown > 4 * side_start
        finally:
            holder.close()
        assert compacted(q, ex).compacted
        assert table_size(ex, spec.failed_table) < side_grown / 4
        assert bed.size() <= 1.2 * start
        assert q.stats(ex).failed == 10
        assert q.retry(ex, range(10_000)) == 10
        assert sorted(m.payload["n"] for m in q.pop_batch(ex, 5)) == [0, 1, 2, 3, 4]


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
    unit = compaction.MIN_GROWTH  # the least growth worth a compaction
    growth = compaction.Growth()
    assert growth.due(3 * unit)  # the first look at grown tables compacts them
    growth.record(compaction.CompactResult(True, 3 * unit, unit))
    assert not growth.due(int(1.5 * unit))  # growing: half its size is under MIN_GROWTH
    assert not growth.due(int(1.9 * unit))  # 90% over: not yet
    clock.now += 1
    assert growth.due(2 * unit)  # doubled: the copy costs about what it gives back
    growth.record(compaction.CompactResult(True, 2 * unit, 4 * unit))
    # The transaction ended at 6 units: 50% over, no longer growing.
    assert not growth.due(6 * unit)
    clock.now += compaction.SETTLE - 0.1
    assert not growth.due(6 * unit)
    clock.now += 0.2
    assert growth.due(6 * unit)
    growth.record(compaction.CompactResult(True, 6 * unit, 4 * unit))
    # 10% over and settled, or under MIN_GROWTH: left alone.
    clock.now += 60
    assert not growth.due(int(4.4 * unit))
    clock.now += 60
    assert not growth.due(int(4.4 * unit))
    small = compaction.Growth()
    assert not small.due(unit // 4)
    clock.now += 60
    assert not small.due(unit)  # 3/4 of a unit over, settled: under MIN_GROWTH


def test_a_skipped_compaction_is_tried_again_sooner_first_then_at_most_retry_max_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a transaction holds the horizon each attempt vacuums the grown tables, so they
    are spaced out; once it ends, the tables must be back within a minute: the spacing stops
    at RETRY_MAX."""
    clock = Clock()
    monkeypatch.setattr(compaction.time, "monotonic", clock.monotonic)
    unit = compaction.MIN_GROWTH
    growth = compaction.Growth()
    growth.record(compaction.CompactResult(True, 4 * unit, 4 * unit))
    waits = []
    for _ in range(8):
        clock.now += 0.01
        assert growth.due(9 * unit)
        growth.record(compaction.CompactResult(False, 9 * unit, 9 * unit, skipped="held"))
        waited = 0.0
        while not growth.due(9 * unit):
            clock.now += 0.5
            waited += 0.5
        waits.append(waited)
    assert waits[0] == compaction.RETRY_FIRST and max(waits) == compaction.RETRY_MAX
    assert compaction.RETRY_MAX <= 30  # recovery within a minute of the horizon's release


@pytest.mark.postgresql
def test_a_ring_of_many_slots_is_compacted_a_segment_at_a_time(
    pg_dsn: str, table_name: str
) -> None:
    """A ring of more slots than one lock may copy keeps them in segments (dbqueue.schema.
    ring_segment_bounds): compaction rewrites each in a transaction of its own, keeping every
    message as it was, and a segment it cannot lock stops it there (the ones before it
    done)."""
    capacity = SEGMENT_SLOTS + 1
    spec = QueueSpec(table_name, FIELDS, QueueOptions(capacity=capacity))
    s0, s1 = spec.segment_table(0), spec.segment_table(1)
    with ring_bed(pg_dsn, spec) as bed:
        q, ex = bed.queue, bed.ex

        def files() -> dict[str, int]:
            query = "SELECT relname, pg_relation_filenode(oid) FROM pg_class WHERE relname IN "
            return dict(ex.execute(query + "(%(s0)s, %(s1)s)", {"s0": s0, "s1": s1}))

        # Messages in both segments: the ring's numbers reach past the first one's slots.
        bed.pass_messages(2_995, batch=599)
        pushed = q.push_many(ex, [{"n": i, "note": f"m{i}"} for i in range(10)])
        assert [p % capacity for p in (pushed[0], pushed[-1])] == [2_995, 3_004]  # s0 to 3,000
        leased = q.pop_batch(ex, 4)

        before = files()
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            other.execute("BEGIN")
            other.execute(f'LOCK TABLE "{s1}" IN ACCESS SHARE MODE')
            result = unpinned(q, ex)
            assert not result.compacted and result.skipped is not None
            assert result.skipped.startswith(f"{s1} not rewritten: locked by other statements")
            assert files()[s0] != before[s0] and files()[s1] == before[s1]
            other.execute("COMMIT")

        before = files()
        result = compacted(q, ex)
        assert result.compacted and result.size_after <= result.size_before
        assert all(files()[name] != before[name] for name in (s0, s1))

        # Every message as it was: the leases fenced by their tokens, the rest in order.
        assert q.ack(ex, leased) == [m.id for m in leased]
        rest = q.pop_batch(ex, 10)
        assert [(m.id, m.payload) for m in rest] == [
            (i, {"n": n, "note": f"m{n}"}) for n, i in enumerate(pushed) if n >= 4
        ]
        assert q.ack(ex, rest) == [m.id for m in rest]
        assert q.stats(ex).capacity == capacity
