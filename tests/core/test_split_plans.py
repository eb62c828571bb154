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
