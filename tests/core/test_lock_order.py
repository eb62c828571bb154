"""A split queue's statements that lock leased rows lock them in id order, whatever the order
of the items they are given: ack and fail do (the ``_held_tokens`` fragment), and so must extend
and release, or a worker's lease thread extending a batch (popped in priority order) and its
handler thread acking it can deadlock. Each test holds the lower id's row locked from another
connection, lets the statement queue up behind it, and checks that it has not locked the higher
id first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, Message, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.schema import create_statements

pytestmark = pytest.mark.postgresql

POSTGRESQL = get_dialect("postgresql")
#: Seconds to wait for the statement to queue up behind the lock (a hang guard, not a timer).
PATIENCE = 30.0


@pytest.fixture
def queue(pg_dsn: str, table_name: str) -> Iterator[SplitQueue]:
    spec = QueueSpec(table_name, (Field("n", FieldKind.INTEGER),))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for statement in create_statements(spec, POSTGRESQL):
            conn.execute(statement)
        yield SplitQueue(spec, POSTGRESQL)
        conn.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"')


def _waiting_on_a_lock(watch: psycopg.Connection[Any], pid: int) -> bool:
    row = watch.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.parametrize("statement", ["extend", "release"])
def test_a_batch_given_in_descending_ids_is_locked_in_id_order(
    pg_dsn: str, queue: SplitQueue, statement: str
) -> None:
    with (
        psycopg.connect(pg_dsn, autocommit=True) as worker,
        psycopg.connect(pg_dsn, autocommit=True) as other,
        psycopg.connect(pg_dsn, autocommit=True) as watch,
    ):
        ex = PsycopgExecutor(worker)
        # Many leased rows, so that the planner finds each of the batch's rows by its key, in
        # the order the items are given, rather than by scanning the leased ones in id order.
        queue.push_many(ex, [{"n": n} for n in range(3000)])
        leased = queue.pop_batch(ex, 3000)
        worker.execute(f'ANALYZE "{queue.spec.meta_table}"')
        batch = sorted(leased, key=lambda m: m.id, reverse=True)[:2]
        low, high = batch[1].id, batch[0].id
        settle: Callable[[PsycopgExecutor, list[Message]], list[int]] = getattr(queue, statement)
        done: list[list[int]] = []
        meta = queue.spec.meta_table
        with other.transaction():
            other.execute(f'SELECT 1 FROM "{meta}" WHERE id = %s FOR UPDATE', [low])
            thread = threading.Thread(target=lambda: done.append(settle(ex, batch)))
            thread.start()
            deadline = time.monotonic() + PATIENCE
            while not _waiting_on_a_lock(watch, worker.info.backend_pid):
                assert time.monotonic() < deadline, f"{statement} never waited for the lock"
                time.sleep(0.02)
            # Waiting for the lower id, it must hold no lock on the higher one.
            other.execute(f'SELECT 1 FROM "{meta}" WHERE id = %s FOR UPDATE NOWAIT', [high])
        thread.join(PATIENCE)
        assert done == [[low, high]]
