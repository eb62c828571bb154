"""``QueueOptions.durable_acks`` on PostgreSQL: at-least-once pops and acks that are their own
transaction commit without waiting for their WAL flush (``synchronous_commit = off`` for that
transaction only); a push, an at-most-once pop and anything in the caller's transaction keep
the caller's setting, and so does every statement with ``durable_acks=True``.

A commit that did not wait leaves no trace once it is done, so these tests run the statements
inside a transaction they hold open, through an executor that answers that it is not in one
(what the layout sees for an autocommit statement), and read the setting before it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_ring_statements, create_statements, drop_ring_statements

pytestmark = pytest.mark.postgresql

POSTGRESQL = get_dialect("postgresql")
FIELDS = (Field("n", FieldKind.INTEGER),)


class OwnTransaction(PsycopgExecutor):
    """Says it is in no transaction while the test holds one open: the layout then treats each
    statement as its own transaction, and the test can read what the statement set."""

    def in_transaction(self) -> bool:
        return False


def _queue(layout: str, table: str, durable: bool) -> SplitQueue | RingQueue:
    if layout == "ring":
        return RingQueue(
            QueueSpec(table, FIELDS, QueueOptions(capacity=16, durable_acks=durable)), POSTGRESQL
        )
    return SplitQueue(QueueSpec(table, FIELDS, QueueOptions(durable_acks=durable)), POSTGRESQL)


@pytest.fixture(params=["split", "ring"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def conn(pg_dsn: str, layout: str, table_name: str) -> Iterator[psycopg.Connection[Any]]:
    spec = _queue(layout, table_name, False).spec
    ring = layout == "ring"
    create = create_ring_statements if ring else create_statements
    drop = (
        drop_ring_statements(spec, POSTGRESQL)
        if ring
        else [f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"']
    )
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")
        for statement in create(spec, POSTGRESQL):
            c.execute(statement)
        yield c
        for statement in drop:
            c.execute(statement)


def _setting(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW synchronous_commit").fetchone()
    assert row is not None
    return str(row[0])


def _in_open_transaction(
    conn: psycopg.Connection[Any], ex: PsycopgExecutor, step: Callable[[PsycopgExecutor], object]
) -> str:
    """synchronous_commit as ``step`` left it in a transaction the test holds open."""
    with conn.transaction():
        step(ex)
        return _setting(conn)


def _popped(queue: SplitQueue | RingQueue, ex: PsycopgExecutor) -> list[Any]:
    queue.push(ex, {"n": 1})
    return queue.pop_batch(ex, 1)


def test_an_at_least_once_pop_and_ack_do_not_wait_for_the_flush(
    conn: psycopg.Connection[Any], layout: str, table_name: str
) -> None:
    queue = _queue(layout, table_name, durable=False)
    ex = OwnTransaction(conn)
    assert _in_open_transaction(conn, ex, lambda e: _popped(queue, e)) == "off"
    assert _setting(conn) == "on", "set for the statement's transaction only"
    messages = _popped(queue, ex)
    assert _in_open_transaction(conn, ex, lambda e: queue.ack(e, messages)) == "off"
    # The worker's loop: ack the batch in hand and lease the next in one statement.
    messages = _popped(queue, ex)
    assert _in_open_transaction(conn, ex, lambda e: queue.ack_pop(e, messages, 1)) == "off"


def test_an_empty_pop_relaxes_its_commit_too(
    conn: psycopg.Connection[Any], layout: str, table_name: str
) -> None:
    """The setting is a one-time filter, run before any row is looked at: a pop that finds
    nothing (but may have written a sequence's WAL) commits without waiting as well."""
    queue = _queue(layout, table_name, durable=False)
    ex = OwnTransaction(conn)
    assert _in_open_transaction(conn, ex, lambda e: queue.pop_batch(e, 5)) == "off"
    ack_nothing = lambda e: queue.ack(e, [(1 << 40, 1)], strict=False)  # noqa: E731
    assert _in_open_transaction(conn, ex, ack_nothing) == "off"


def test_pushes_and_removing_pops_keep_waiting(
    conn: psycopg.Connection[Any], layout: str, table_name: str
) -> None:
    """A push is what its producer was told is stored, and an at-most-once pop must never be
    forgotten (its message would be delivered twice): both keep the session's setting."""
    queue = _queue(layout, table_name, durable=False)
    ex = OwnTransaction(conn)
    assert _in_open_transaction(conn, ex, lambda e: queue.push(e, {"n": 1})) == "on"
    assert _in_open_transaction(conn, ex, lambda e: queue.push_many(e, [{"n": 2}])) == "on"
    pop_once = lambda e: queue.pop_batch(e, 2, mode="at_most_once")  # noqa: E731
    assert _in_open_transaction(conn, ex, pop_once) == "on"


def test_the_callers_transaction_keeps_its_setting(
    conn: psycopg.Connection[Any], layout: str, table_name: str
) -> None:
    """Inside the caller's transaction the statements change nothing of it: its other writes
    commit as durably as the caller asked."""
    queue = _queue(layout, table_name, durable=False)
    ex = PsycopgExecutor(conn)
    messages = _popped(queue, ex)
    assert _in_open_transaction(conn, ex, lambda e: queue.ack(e, messages)) == "on"
    assert _in_open_transaction(conn, ex, lambda e: _popped(queue, e)) == "on"


def test_durable_acks_wait_like_every_commit(
    conn: psycopg.Connection[Any], layout: str, table_name: str
) -> None:
    queue = _queue(layout, table_name, durable=True)
    ex = OwnTransaction(conn)
    messages: list[Any] = []
    assert _in_open_transaction(conn, ex, lambda e: messages.extend(_popped(queue, e))) == "on"
    assert _in_open_transaction(conn, ex, lambda e: queue.ack(e, messages)) == "on"


def test_relaxed_settles_still_settle(
    conn: psycopg.Connection[Any], layout: str, table_name: str
) -> None:
    """The commits that do not wait commit all the same: on autocommit, what was acked is gone
    and what was popped is leased, as another connection sees it."""
    queue = _queue(layout, table_name, durable=False)
    ex = PsycopgExecutor(conn)
    queue.push_many(ex, [{"n": i} for i in range(3)])
    first, second = queue.pop_batch(ex, 1), queue.pop_batch(ex, 1)
    queue.ack(ex, first)
    stats = queue.stats(ex)
    assert (stats.ready, stats.leased) == (1, 1), stats
    assert [m.id for m in second] != [m.id for m in first]
