"""What a push reports when its connection is ended right after the push committed.

In autocommit, a push is its INSERT, committed as it returns, then (at most every
``notify_interval``) a ``pg_notify`` that wakes the workers, a statement of its own. A session
ended while idle between the two (``pg_terminate_backend`` by a DBA or a pooler, a server
stopping in fast mode) answers the second one with FATAL 57P01 "terminating connection due to
administrator command". The push must not then raise :class:`~dbqueue.QueueUnavailable` with
``stored`` False ("nothing was written"): its row is in the queue, and a producer that does
what the error documents (retry when ``stored`` is False) would push the message twice. The
chaos run found such a message delivered twice through transactional pops (bench/chaos, whose
``repeatable_read`` fault ends every session), before the wake-up's failure was kept from the
push's outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    QueueUnavailable,
    RingQueue,
    SplitQueue,
    get_dialect,
)
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.executor import Row
from dbqueue.schema import (
    create_ring_statements,
    create_statements,
    drop_ring_statements,
    drop_statements,
)

pytestmark = pytest.mark.postgresql

PG = get_dialect("postgresql")


class EndedBeforeNotify(PsycopgExecutor):
    """A psycopg executor whose session another session ends (``pg_terminate_backend``,
    waiting until it is gone) just before the statement that wakes the workers is sent."""

    def __init__(self, connection: psycopg.Connection[Any], admin: psycopg.Connection[Any]):
        super().__init__(connection)
        self.admin = admin

    def execute(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        if "pg_notify" in sql:
            pid = self.connection.info.backend_pid
            self.admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        return super().execute(sql, params)


@pytest.mark.parametrize("layout", ["split", "ring"])
def test_a_push_that_committed_never_says_nothing_was_written(
    pg_dsn: str, table_name: str, layout: str
) -> None:
    ring = layout == "ring"
    spec = QueueSpec(
        table_name, (Field("n", FieldKind.INTEGER),), QueueOptions(capacity=8 if ring else None)
    )
    queue = RingQueue(spec, PG) if ring else SplitQueue(spec, PG)
    create, drop = (
        (create_ring_statements, drop_ring_statements)
        if ring
        else (create_statements, drop_statements)
    )
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for statement in create(spec, PG):
            admin.execute(statement)
        try:
            conn = psycopg.connect(pg_dsn, autocommit=True)
            try:
                outcome: bool | None = True
                queue.push(EndedBeforeNotify(conn, admin), {"n": 1})
            except QueueUnavailable as exc:
                outcome = exc.stored
            finally:
                conn.close()
            row = admin.execute(f'SELECT count(*) FROM "{spec.table}" WHERE n = 1').fetchone()
            assert row == (1,)  # the push committed...
            assert outcome is not False  # ...so it must not say "nothing was written"
        finally:
            for statement in drop(spec, PG):
                admin.execute(statement)
