"""A ring queue on a real database for the core ring tests: the queue, an executor on its own
connection, and raw access to the tables for checks and for simulating crashed clients."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueOptions, QueueSpec, RingQueue, State, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.executor import Executor
from dbqueue.ring import SlotState
from dbqueue.schema import create_ring_statements, drop_ring_statements

FIELDS = (Field("n", FieldKind.INTEGER), Field("note", FieldKind.TEXT, nullable=True))
FAST = QueueOptions(
    capacity=4,
    push_timeout=dt.timedelta(milliseconds=100),
    hole_timeout=dt.timedelta(0),
    stranded_after=dt.timedelta(0),
    max_attempts=3,
)
BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.postgresql, id="pg"),
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
]


@dataclass
class RingBed:
    """One ring on one database: ``queue`` over ``ex``; ``connect()`` opens more clients."""

    backend: str
    spec: QueueSpec
    queue: RingQueue
    ex: Executor
    conn: Any
    target: str  # a DSN or a file path

    def connect(self) -> Executor:
        """An executor on a new connection (another client of the same ring)."""
        if self.backend == "postgresql":
            conn: Any = psycopg.connect(self.target, autocommit=True)
        else:
            from dbqueue.drivers.sqlite import connect

            conn = connect(self.target)
        return executor_for(self.queue.dialect, conn)

    def peer(self) -> RingQueue:
        """Another process's view of the same ring: its own pending claims."""
        return RingQueue(self.spec, self.queue.dialect)

    def raw(self, sql: str) -> list[tuple[Any, ...]]:
        return self.ex.execute(sql, {})

    def slots(self) -> list[tuple[int, int, int]]:
        """(slot, seq, state) of every slot, in slot order."""
        rows = self.raw(f'SELECT slot, seq, state FROM "{self.spec.table}" ORDER BY slot')
        return [(int(a), int(b), int(c)) for a, b, c in rows]

    def size(self) -> int:
        """Bytes the slot table takes (PostgreSQL: with its index and TOAST; SQLite: the
        database file's pages, which updates rewrite in place)."""
        if self.backend == "postgresql":
            return int(self.raw(f"SELECT pg_total_relation_size('\"{self.spec.table}\"')")[0][0])
        pages = int(self.raw("PRAGMA page_count")[0][0])
        return pages * int(self.raw("PRAGMA page_size")[0][0])

    def failed_ids(self) -> list[int]:
        """The numbers of the messages failed for good (in the side table)."""
        side, failed = self.spec.failed_table, int(State.FAILED)
        return [int(r[0]) for r in self.raw(f'SELECT id FROM "{side}" WHERE state = {failed}')]

    def aside(self) -> list[tuple[int, int]]:
        """(number, state) of the side table's rows that are not failed, by number."""
        side, failed = self.spec.failed_table, int(State.FAILED)
        rows = self.raw(f'SELECT id, state FROM "{side}" WHERE state <> {failed} ORDER BY id')
        return [(int(a), int(b)) for a, b in rows]

    def expire_leases(self) -> None:
        """Every lease expired, and every back-off over (in the slots and the side table)."""
        past = "'2000-01-01 00:00:00+00'" if self.backend == "postgresql" else "'2000-01-01'"
        leased, ready = int(SlotState.LEASED), int(State.READY)
        self.raw(f'UPDATE "{self.spec.table}" SET lease_until = {past} WHERE state = {leased}')
        side = self.spec.failed_table
        self.raw(f'UPDATE "{side}" SET lease_until = {past} WHERE lease_until IS NOT NULL')
        self.raw(f'UPDATE "{side}" SET run_at = {past} WHERE state = {ready}')

    def age_messages(self) -> None:
        """Every message in a slot pushed long ago (past hole_timeout and stranded_after)."""
        past = "'2000-01-01 00:00:00+00'" if self.backend == "postgresql" else "'2000-01-01'"
        self.raw(f'UPDATE "{self.spec.table}" SET pushed_at = {past}')

    def dead_pusher(self) -> int:
        """A pusher takes a number and dies before writing it (PostgreSQL only)."""
        return int(self.raw(f"SELECT nextval('\"{self.spec.push_seq}\"')")[0][0])

    def dead_popper(self) -> int:
        """A popper claims a number and dies before taking its message (PostgreSQL only)."""
        return int(self.raw(f"SELECT nextval('\"{self.spec.pop_seq}\"')")[0][0])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction on the bed's connection that the test commits by leaving normally."""
        with self.ex.atomic():
            yield


@contextmanager
def ring_bed(
    backend: str, request: pytest.FixtureRequest, table: str, *, start: int = 0, **options: Any
) -> Iterator[RingBed]:
    """Create a ring (FAST options, overridden by ``options``) and drop it afterwards."""
    spec = QueueSpec(table, FIELDS, replace(FAST, **options))
    dialect = get_dialect(backend)
    if backend == "postgresql":
        target = request.getfixturevalue("pg_dsn")
        conn: Any = psycopg.connect(target, autocommit=True)
    else:
        from dbqueue.drivers.sqlite import connect

        target = request.getfixturevalue("sqlite_path")
        conn = connect(target)
    for statement in create_ring_statements(spec, dialect, start=start):
        conn.execute(statement)
    try:
        yield RingBed(backend, spec, RingQueue(spec, dialect), executor_for(dialect, conn), conn,
                      target)  # fmt: skip
    finally:
        if isinstance(conn, sqlite3.Connection) or not conn.closed:
            for statement in drop_ring_statements(spec, dialect):
                conn.execute(statement)
        conn.close()
