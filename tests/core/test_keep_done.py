"""The split queue's ``keep_done`` in the core, on PostgreSQL and SQLite: what a done row holds
(the conformance suite, tests/conformance/test_keep_done.py, covers the operations on every
front), the statements the option selects, and the order and due times the done-pop returns."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, SplitQueue, State, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.schema import create_statements
from dbqueue.split import KEEP_DONE_OPERATIONS

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT, nullable=True))
KEEP = QueueOptions(keep_done=True, max_attempts=3)
#: Long past: a due time no finish time can equal.
PAST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.postgresql, id="pg"),
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
]


@dataclass
class Bed:
    queue: SplitQueue
    ex: Executor

    def row(self, item_id: int) -> dict[str, Any]:
        """The item's meta and data columns, times as aware datetimes."""
        spec, t = self.queue.spec, self.queue.dialect.time_result
        (row,) = self.ex.execute(
            f"SELECT m.state, m.attempts, m.run_at, m.lease_until, d.n, d.note, d.enqueued_at, "
            f'd.last_error FROM "{spec.meta_table}" AS m JOIN "{spec.table}" AS d '
            f"ON d.id = m.id WHERE m.id = {int(item_id)}",
            {},
        )
        state, attempts, run_at, lease_until, n, note, enqueued_at, last_error = row
        return {
            "state": State(state), "attempts": attempts, "run_at": t(run_at),
            "lease_until": t(lease_until), "n": n, "note": note,
            "enqueued_at": t(enqueued_at), "last_error": last_error,
        }  # fmt: skip


@pytest.fixture(params=BACKENDS)
def bed(request: pytest.FixtureRequest, table_name: str) -> Iterator[Bed]:
    backend = request.param
    dialect = get_dialect(backend)
    conn: Any
    if backend == "postgresql":
        conn = psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True)
    else:
        from dbqueue.drivers.sqlite import connect

        conn = connect(request.getfixturevalue("sqlite_path"))
    spec = QueueSpec(table_name, FIELDS, KEEP)
    ex = executor_for(dialect, conn)
    for statement in create_statements(spec, dialect):
        ex.execute(statement, {})
    yield Bed(SplitQueue(spec, dialect), ex)
    if not isinstance(conn, sqlite3.Connection):
        conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"')
    conn.close()


def test_the_option_selects_the_done_statements(bed: Bed) -> None:
    q = bed.queue
    for operation, replacement in KEEP_DONE_OPERATIONS.items():
        if f"split_{operation}" in q.statements:  # SQLite has no split_ack_pop
            assert q._statement(operation).name == f"split_{replacement}"
    assert q._statement("pop_leased").name == "split_pop_leased"
    plain = SplitQueue(QueueSpec(q.spec.table, FIELDS), q.dialect)
    assert plain._statement("ack").name == "split_ack"


def test_a_done_row_keeps_its_payload_and_records_when_it_finished(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    item_id = q.push(ex, {"n": 7, "note": "kept"}, run_at=PAST)
    (first,) = q.pop_batch(ex, 1)
    q.fail(ex, first, "first try failed", delay=dt.timedelta(0))
    (second,) = q.pop_batch(ex, 1)
    assert q.ack(ex, second) == [item_id]
    row = bed.row(item_id)
    assert (row["state"], row["attempts"], row["lease_until"]) == (State.DONE, 2, None)
    assert (row["n"], row["note"], row["last_error"]) == (7, "kept", "first try failed")
    # run_at is the finish time, as it is the failure time of a failed row: after the push.
    assert row["run_at"] > PAST and row["run_at"] >= row["enqueued_at"]


@pytest.mark.parametrize("mode", ["at_most_once", "transactional"])
def test_the_done_pop_returns_due_times_in_delivery_order(bed: Bed, mode: str) -> None:
    q, ex = bed.queue, bed.ex
    due = [PAST + dt.timedelta(minutes=m) for m in (3, 1, 2)]
    ids = [q.push(ex, {"n": i}, run_at=at) for i, at in enumerate(due)]
    urgent = q.push(ex, {"n": 9}, run_at=due[0], priority=5)
    if mode == "transactional":
        with ex.atomic():
            messages = q.pop_batch(ex, 4, mode=mode)
    else:
        messages = q.pop_batch(ex, 4, mode=mode)
    assert [m.id for m in messages] == [urgent, ids[1], ids[2], ids[0]]
    assert [m.run_at for m in messages] == [due[0], due[1], due[2], due[0]]
    assert [(m.attempts, m.lease_until) for m in messages] == [(1, None)] * 4
    for m in messages:
        row = bed.row(m.id)
        assert (row["state"], row["attempts"], row["lease_until"]) == (State.DONE, 1, None)
        assert row["run_at"] > m.run_at  # the finish time replaced the due time


def test_ack_pop_marks_done_in_the_same_call(bed: Bed) -> None:
    q, ex = bed.queue, bed.ex
    a, b = q.push_many(ex, [{"n": 1}, {"n": 2}])
    held = q.pop_batch(ex, 1)
    acked, more = q.ack_pop(ex, held, 5)
    assert (acked, [m.id for m in more]) == (1, [b])
    assert bed.row(a)["state"] is State.DONE and bed.row(b)["state"] is State.LEASED
    stats = q.stats(ex)
    assert (stats.done, stats.leased, stats.ready) == (1, 1, 0)
