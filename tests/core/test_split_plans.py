"""A split queue that keeps done items (``keep_done``) still pops through its ready index: done
rows are in neither partial index (``WHERE state = 0``, ``WHERE state = 1``), so a meta table
holding many of them must not turn a pop, an ack or a rescue into a scan of the table. A
structural check on the planner's choice (EXPLAIN, never a timer)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_statements
from tests.core.plans import ExplainingExecutor

pytestmark = pytest.mark.postgresql

DONE_ROWS, READY_ROWS = 20_000, 10


@pytest.fixture(params=[True, False], ids=["analyzed", "not-analyzed"])
def kept(
    request: pytest.FixtureRequest, pg_dsn: str, table_name: str
) -> Iterator[tuple[SplitQueue, Executor, bool]]:
    """A keep_done queue holding DONE_ROWS done items (popped to done, as at_most_once does)
    and READY_ROWS ready ones; analyzed, or not yet (autovacuum may lag behind a burst)."""
    spec = QueueSpec(table_name, (Field("n", FieldKind.INTEGER),), QueueOptions(keep_done=True))
    dialect = get_dialect("postgresql")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ex = executor_for(dialect, conn)
        for statement in create_statements(spec, dialect):
            ex.execute(statement, {})
        queue = SplitQueue(spec, dialect)
        queue.push_many(ex, [{"n": i} for i in range(DONE_ROWS)], batch_size=DONE_ROWS)
        assert len(queue.pop_batch(ex, DONE_ROWS, mode="at_most_once")) == DONE_ROWS
        queue.push_many(ex, [{"n": i} for i in range(READY_ROWS)])
        if request.param:
            ex.execute(f'ANALYZE "{spec.meta_table}"', {})
            ex.execute(f'ANALYZE "{spec.table}"', {})
        yield queue, ex, request.param
        ex.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"', {})


def test_pops_use_the_ready_index_among_many_done_rows(
    kept: tuple[SplitQueue, Any, bool],
) -> None:
    queue, inner, analyzed = kept
    assert queue.stats(inner).done == DONE_ROWS
    ex = ExplainingExecutor(inner)
    first = queue.pop_batch(ex, 3)
    queue.ack(ex, first[:1])
    queue.extend(ex, first[1:2])
    queue.fail(ex, first[2:3], "boom", delay=dt.timedelta(0))
    acked, more = queue.ack_pop(ex, first[1:2], 2)
    assert acked == 1 and len(more) == 2
    queue.pop_batch(ex, 2, mode="at_most_once")
    with ex.atomic():
        queue.pop_batch(ex, 2, mode="transactional")
    queue.rescue(ex)
    queue.push(ex, {"n": -1})
    spec = queue.spec
    assert [s for s in ex.scans if s[0] == spec.meta_table] == []
    if analyzed:
        # Before the first ANALYZE, split_rescue's update of last_error may hash-join the
        # whole data table (the planner cannot tell that the expired leases are few): it does
        # the same in a queue without keep_done holding 20,000 leased items, and no longer
        # once the tables are analyzed.
        assert [s for s in ex.scans if s[0] == spec.table] == []
    ready = spec.index_name("ready")
    pops = [line for index, line in ex.indexes if index == ready]
    # pop_leased, ack_pop, pop (at_most_once), pop (transactional): each picks by the index.
    assert len(pops) >= 4
    assert queue.stats(inner).done == DONE_ROWS + 6


#: Items pushed, popped and acked before the checks: each leaves its dead versions behind.
CHURNED = 5_000


@pytest.fixture
def churned(pg_dsn: str, table_name: str) -> Iterator[tuple[SplitQueue, Executor]]:
    """A queue whose tables hold the dead versions of CHURNED items (as a long transaction
    keeps them: vacuum is off for them) and 30 ready items, analyzed: its statistics count a
    few live rows, its primary keys thousands of entries. Its connection prepares every
    statement and plans it generic, as a worker's connection runs them after a few times."""
    spec = QueueSpec(table_name, (Field("n", FieldKind.INTEGER),))
    dialect = get_dialect("postgresql")
    with psycopg.connect(pg_dsn, autocommit=True, prepare_threshold=0) as conn:
        ex = executor_for(dialect, conn)
        for statement in create_statements(spec, dialect):
            ex.execute(statement, {})
        for table in (spec.meta_table, spec.table):
            ex.execute(f'ALTER TABLE "{table}" SET (autovacuum_enabled = off)', {})
        queue = SplitQueue(spec, dialect)
        for start in range(0, CHURNED, 500):
            queue.push_many(ex, [{"n": i} for i in range(start, start + 500)])
            queue.ack(ex, queue.pop_batch(ex, 500))
        ex.execute(f'ANALYZE "{spec.meta_table}", "{spec.table}"', {})  # (empty)
        queue.push_many(ex, [{"n": i} for i in range(30)])
        ex.execute("SET plan_cache_mode = force_generic_plan", {})
        yield queue, ex
        ex.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"', {})


def key_pages(ex: Executor, spec: QueueSpec) -> int:
    """The pages of both primary keys this session has read so far (its statistics flushed)."""
    ex.execute("SELECT pg_stat_force_next_flush()", {})
    ex.execute("SELECT pg_stat_clear_snapshot()", {})
    rows = ex.execute(
        "SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0) FROM pg_statio_user_indexes "
        "WHERE indexrelname = ANY(%(names)s)",
        {"names": [f"{spec.meta_table}_pkey", f"{spec.table}_pkey"]},
    )
    return int(rows[0][0])


def test_statements_find_their_rows_by_key_among_dead_versions(
    churned: tuple[SplitQueue, Executor],
) -> None:
    """Each statement that joins a table with the rows it took reads them by key: joined by a
    full read of the primary key (the plan its statistics, a few live rows, made look as
    cheap), a pop of 10 read 74,000 pages under a held horizon (see split.sql)."""
    queue, ex = churned
    before = key_pages(ex, queue.spec)
    first = queue.pop_batch(ex, 10)
    queue.ack(ex, first[:4])
    queue.extend(ex, first[4:6])
    queue.fail(ex, first[6:8], "boom", delay=dt.timedelta(0))
    queue.release(ex, first[8:9])
    acked, more = queue.ack_pop(ex, first[4:6], 5)
    assert acked == 2 and len(more) == 5
    queue.pop_batch(ex, 3, mode="at_most_once")
    with ex.atomic():
        queue.pop_batch(ex, 3, mode="transactional")
    queue.cancel(ex, [m.id for m in more[:2]])
    queue.rescue(ex)
    # Ten statements reading a few rows each by key: a few pages each. A full read of either
    # key walks the entries of every dead version: tens of pages, and a heap page for each.
    assert key_pages(ex, queue.spec) - before < 300
