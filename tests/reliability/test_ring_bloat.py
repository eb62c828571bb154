"""Storage over time on PostgreSQL: a ring queue's table keeps its size while 300,000
messages (30 laps) go through it, where the split layout's tables grow (the ring's rows are
preallocated and only ever updated in place, with no indexed column changing; the split
layout inserts and deletes a row pair per message and leaves dead tuples behind for VACUUM).

The run does not VACUUM: whatever the server's autovacuum does during the run (the recorded
``autovacuum`` setting says if it runs at all) is part of the measurement.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Field,
    FieldKind,
    Message,
    QueueOptions,
    QueueSpec,
    RingQueue,
    SplitQueue,
    get_dialect,
)
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_ring_statements, create_statements, drop_ring_statements
from tests.conftest import scratch_database

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.slow,
    # Alone on the machine (scripts/run_tests.py runs solo tests after the parallel run):
    # beside other tests, the churn's producer and worker were descheduled mid-transaction
    # often enough that page pruning fell behind and a few hundred of 3M updates left their
    # page (+5.5% in a loaded CI run, 0 in runs of its own).
    pytest.mark.solo,
    pytest.mark.xdist_group("ring_heavy"),
]

DIALECT = get_dialect("postgresql")
FIELDS = (Field("key", FieldKind.BIGINT), Field("body", FieldKind.TEXT))
CAPACITY = 10_000
#: 30 laps: a slot whose updates leave their page does so in the first laps (see
#: docs/explanation/performance.md); a million (the bench's soak) took 285 s of CI's budget.
MESSAGES = 300_000
BATCH = 1_000
#: The ring's table (with its index and TOAST) may grow by less than this over MESSAGES.
MAX_RING_GROWTH = 0.05

Queue = RingQueue | SplitQueue


#: The application_name of the churn's producer and worker (not horizon holders to report).
CHURN = "dbqueue-bloat-churn"


def churn(queue: Queue, dsn: str, first: int, count: int) -> float:
    """Push ``count`` messages from one connection while another consumes them the way a
    worker does (at least once: lease a batch, ack it while leasing the next, ``ack_pop``), as
    producers and workers run side by side; return the seconds it took."""
    errors: list[BaseException] = []

    def produce(ex: Executor) -> None:
        for start in range(first, first + count, BATCH):
            # Bodies of 0..99 characters: rows of varying size, as payloads are.
            keys = range(start, start + BATCH)
            queue.push_many(ex, [{"key": k, "body": "x" * (k % 100)} for k in keys])

    def consume(ex: Executor) -> None:
        held: list[Message] = []
        taken = 0
        while taken < count:
            _, held = queue.ack_pop(ex, held, BATCH)
            taken += len(held)
            if not held:
                time.sleep(0.001)
        queue.ack(ex, held)

    def run(work: Callable[[Executor], None]) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, application_name=CHURN) as conn:
                work(executor_for(DIALECT, conn))
        except BaseException as exc:  # raised in the test's thread below
            errors.append(exc)

    began = time.monotonic()
    threads = [threading.Thread(target=run, args=(work,)) for work in (produce, consume)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.monotonic() - began


#: The tables named and their partitions (a ring of many slots keeps them in segments).
WITH_PARTITIONS = (
    "SELECT r FROM unnest(%(tables)s::text[]) AS t, LATERAL (SELECT quote_ident(t)::regclass AS r "
    "UNION ALL SELECT p.relid FROM pg_partition_tree(quote_ident(t)) AS p WHERE p.isleaf) AS x"
)


def total_size(conn: psycopg.Connection[Any], *tables: str) -> int:
    """Bytes of the tables (and their partitions) with their indexes and TOAST."""
    row = conn.execute(
        f"SELECT sum(pg_total_relation_size(r)) FROM ({WITH_PARTITIONS}) AS w",
        {"tables": list(tables)},
    ).fetchone()
    assert row is not None
    return int(row[0])


def updates(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    """(updates, HOT updates) of ``table`` (and its partitions) so far, as the statistics know
    them."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0) "
        f"FROM pg_stat_user_tables WHERE relid IN ({WITH_PARTITIONS})",
        {"tables": [table]},
    ).fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def horizon_holders(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Other sessions of this database that hold back the pruning horizon (an open
    transaction with an xid or a snapshot): what keeps a slot's old versions from being
    pruned besides the test's own producer and worker. Recorded with the figures, so that a
    failure says whether another test left a transaction open."""
    rows = conn.execute(
        "SELECT pid, state, backend_xid::text, backend_xmin::text, "
        "round(extract(epoch FROM now() - xact_start)), left(query, 80) "
        "FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND application_name <> %s "
        "AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)",
        (CHURN,),
    ).fetchall()
    # As text: the figures go through record_property, which xdist sends between processes
    # (it cannot serialize a Decimal).
    return [tuple(str(value) for value in row) for row in rows]


@pytest.fixture(scope="module")
def bloat_dsn() -> Iterator[str]:
    """A database of its own: no other test's tables (autovacuum's ANALYZE of one holds a
    snapshot) or forgotten sessions share it while the slots are measured."""
    with scratch_database("dbqueue_bloat") as dsn:
        yield dsn


class HorizonWatch:
    """Samples, every 0.2 s while measuring, the other sessions of the database that hold
    back the pruning horizon (the test's producer and worker aside), so that a failure says
    what kept old slot versions from being pruned."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.seen: dict[int, tuple[Any, ...]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="horizon-watch", daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.2):
                for row in horizon_holders(conn):
                    self.seen.setdefault(row[0], row)

    def __enter__(self) -> HorizonWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def layouts(pg_dsn: str, table: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection, with a ring queue ``<table>_ring`` and a split queue ``<table>_split``
    created on it; both dropped afterwards."""
    ring = QueueSpec(f"{table}_ring", FIELDS, QueueOptions(capacity=CAPACITY, notify_interval=None))
    split = QueueSpec(f"{table}_split", FIELDS, QueueOptions(notify_interval=None))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            for statement in (*create_ring_statements(ring, DIALECT),
                              *create_statements(split, DIALECT)):  # fmt: skip
                conn.execute(statement)
            yield conn
        finally:
            for statement in drop_ring_statements(ring, DIALECT):
                conn.execute(statement)
            conn.execute(
                f'DROP TABLE IF EXISTS "{split.table}", "{split.meta_table}", "{split.head_table}"'
            )


def test_300_000_messages_leave_the_ring_its_size_and_grow_the_split_layout(
    bloat_dsn: str, table_name: str, record_property: Callable[[str, object], None]
) -> None:
    """After one warm-up lap (every slot has held a message), 300,000 more messages go
    through a ring of 10,000 slots in batches of 1,000, pushed (push_many) from one connection
    while a worker consumes them on another (ack_pop: leased, then acked): its table, index
    and TOAST included, grows by less than 5%. The same traffic through the split layout, on
    the same database in the same run, grows its tables by more (the issue reports ~5x; only
    "more than the ring" is asserted, since how much depends on when autovacuum runs, if it
    runs at all)."""
    figures: dict[str, object] = {}
    with layouts(bloat_dsn, table_name) as conn:
        setting = conn.execute("SHOW autovacuum").fetchone()
        figures["autovacuum"] = None if setting is None else setting[0]
        # A producer may run ahead of the worker: let it wait for free slots, never fail.
        options = QueueOptions(capacity=CAPACITY, push_timeout=dt.timedelta(minutes=1))
        ring = RingQueue(QueueSpec(f"{table_name}_ring", FIELDS, options), DIALECT)
        split = SplitQueue(QueueSpec(f"{table_name}_split", FIELDS), DIALECT)
        for name, queue, tables in (
            ("ring", ring, [ring.spec.table]),
            ("split", split, [split.spec.table, split.spec.meta_table]),
        ):
            churn(queue, bloat_dsn, 0, CAPACITY)  # the warm-up lap
            before = total_size(conn, *tables)
            upd_before, hot_before = updates(conn, tables[-1])
            with HorizonWatch(bloat_dsn) as watch:
                seconds = churn(queue, bloat_dsn, CAPACITY, MESSAGES)
            after = total_size(conn, *tables)
            upd_after, hot_after = updates(conn, tables[-1])
            figures |= {
                f"{name}_horizon_holders": list(watch.seen.values()),
                f"{name}_bytes_before": before,
                f"{name}_bytes_after": after,
                f"{name}_growth": round(after / before - 1, 4),
                f"{name}_seconds": round(seconds, 1),
                f"{name}_non_hot_updates": (upd_after - upd_before) - (hot_after - hot_before),
            }
    for key, value in figures.items():
        record_property(key, value)
    print(f"bloat over {MESSAGES:,} messages: {figures}")
    ring_growth, split_growth = figures["ring_growth"], figures["split_growth"]
    assert isinstance(ring_growth, float) and isinstance(split_growth, float)
    assert ring_growth < MAX_RING_GROWTH, figures
    assert split_growth > ring_growth, figures
