"""The keeper (dbqueue.upkeep.keeper): a process that pops a queue through the API alone gets
its upkeep rounds without calling anything, on a connection of the keeper's own, closed once
the pops stop; a queue a worker upkeeps is left to it; a forked child starts its own."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import KEEPER_NAME, PsycopgExecutor
from dbqueue.schema import create_statements, drop_statements
from dbqueue.upkeep import compaction, keeper
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

pytestmark = pytest.mark.postgresql

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT))
PG = get_dialect("postgresql")
NOTE = "x" * 200
#: Before any head: a priority without its row yet, or at '-infinity'.
EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC)


def wait_until(what: str, ok: Callable[[], bool], seconds: float = 60) -> None:
    """Poll ``ok`` until it holds (a generous bound: the keeper works in the background)."""
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def keeper_sessions(dsn: str) -> int:
    """The keeper's sessions on ``dsn``'s database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (KEEPER_NAME,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def queue(pg_dsn: str, table_name: str) -> Iterator[tuple[SplitQueue, PsycopgExecutor]]:
    keeper.enable()
    spec = QueueSpec(table_name, FIELDS)
    conn = psycopg.connect(pg_dsn, autocommit=True)
    for statement in create_statements(spec, PG):
        conn.execute(statement)
    yield SplitQueue(spec, PG), PsycopgExecutor(conn)
    keeper.disable()  # as the rest of the suite runs
    for statement in drop_statements(spec, PG):
        conn.execute(statement)
    conn.close()


def consume(q: SplitQueue, ex: PsycopgExecutor, messages: int, batch: int = 100) -> None:
    """Push and consume ``messages`` through the API alone: no upkeep called."""
    for start in range(0, messages, batch):
        q.push_many(ex, [{"n": start + i, "note": NOTE} for i in range(batch)])
        q.ack(ex, q.pop_batch(ex, batch))


def test_an_api_consumer_gets_heads_and_compaction_without_calling_anything(
    pg_dsn: str, queue: tuple[SplitQueue, PsycopgExecutor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "MIN_GROWTH", 256 * 1024)  # a test queue's growth
    q, ex = queue
    consume(q, ex, 500)
    wait_until("the keeper's connection", lambda: keeper_sessions(pg_dsn) == 1)
    # The working size: the most the tables reach between two of the keeper's compactions
    # while messages pass (they rise by the versions each batch leaves, then fall).
    start = 0
    for _ in range(30):
        consume(q, ex, 100)
        start = max(start, compaction.size(q, ex))
    holder = psycopg.connect(pg_dsn, autocommit=True)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM pg_class")
    heads = f'SELECT run_at FROM "{q.spec.head_table}" WHERE priority = 0'
    try:
        consume(q, ex, 200)

        def head() -> dt.datetime:
            # No row yet, or '-infinity' (which the driver reads as None): before any time.
            rows = ex.execute(heads, {})
            return rows[0][0] if rows and rows[0][0] is not None else EARLIEST

        first = head()

        def moved() -> bool:
            consume(q, ex, 100)  # pops every few ms: the keeper steps the heads meanwhile
            return head() > first

        wait_until("the heads to move on under the held horizon", moved)
        consume(q, ex, 10_000)
        grown = compaction.size(q, ex)
        assert grown > 2 * start  # what the held snapshot may still read stays
    finally:
        holder.close()

    def back() -> bool:
        consume(q, ex, 100)  # the keeper looks after a queue only while it is popped
        return compaction.size(q, ex) <= 1.2 * max(start, 128 * 1024)

    wait_until("the tables back to their size", back)


def test_the_keeper_closes_its_connection_once_the_pops_stop(
    pg_dsn: str, queue: tuple[SplitQueue, PsycopgExecutor]
) -> None:
    q, ex = queue
    consume(q, ex, 100)
    wait_until("the keeper's connection", lambda: keeper_sessions(pg_dsn) == 1)
    wait_until("it closed", lambda: keeper_sessions(pg_dsn) == 0, keeper.ACTIVE_FOR + 10)
    consume(q, ex, 100)  # popped again: looked after again
    wait_until("a new connection", lambda: keeper_sessions(pg_dsn) == 1)


def test_a_disabled_keeper_opens_nothing(
    pg_dsn: str, queue: tuple[SplitQueue, PsycopgExecutor]
) -> None:
    q, ex = queue
    keeper.disable()
    consume(q, ex, 300)
    time.sleep(keeper.ACTIVE_FOR / 2)
    assert keeper_sessions(pg_dsn) == 0


def test_a_queue_a_worker_upkeeps_is_left_to_it(
    pg_dsn: str, queue: tuple[SplitQueue, PsycopgExecutor]
) -> None:
    q, ex = queue
    q.push_many(ex, [{"n": i, "note": NOTE} for i in range(50)])

    def connect() -> PsycopgExecutor:
        return PsycopgExecutor(psycopg.connect(pg_dsn, autocommit=True))

    worker = Worker([Consumer(ExecutorQueue(q, connect), lambda m: None)], burst=True)
    worker.run(handle_signals=False)
    assert worker.stats.handled == 50
    assert keeper_sessions(pg_dsn) == 0  # its maintenance thread ran the rounds


def _pop_in_child(dsn: str, table: str) -> tuple[int, bool]:
    """In a forked child: pop, and wait for a keeper connection of the child's own."""
    spec = QueueSpec(table, FIELDS)
    ex = PsycopgExecutor(psycopg.connect(dsn, autocommit=True))
    q = SplitQueue(spec, PG)
    taken = q.pop_batch(ex, 10)
    q.ack(ex, taken)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(d.ex is not None for d in keeper.KEEPER._databases.values()):
            return len(taken), True
        q.pop_batch(ex, 1)  # the pops that keep it looking after the queue
        time.sleep(0.05)
    return len(taken), False


def test_a_forked_child_starts_a_keeper_of_its_own(
    pg_dsn: str, queue: tuple[SplitQueue, PsycopgExecutor]
) -> None:
    q, ex = queue
    consume(q, ex, 100)
    wait_until("the parent's keeper", lambda: keeper_sessions(pg_dsn) == 1)
    q.push_many(ex, [{"n": i, "note": NOTE} for i in range(10)])
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_pop_in_child, (pg_dsn, q.spec.table)) == (10, True)
    # The parent's keeper goes on, its connections untouched by the child.
    consume(q, ex, 100)
    wait_until("the parent's keeper again", lambda: keeper_sessions(pg_dsn) == 1)
