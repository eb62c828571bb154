"""One facade over every front end, so the conformance tests are written once.

A front pushes and pops through the real public API of its front end (the core's SplitQueue
over a driver connection, or ``Model.queue`` over Django's connection) and normalises what it
gets back to :class:`Item`, keeping the original object for ack/fail.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from dbqueue import QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.schema import create_statements
from tests.conformance.spec import JOB_FIELDS, JOB_OPTIONS

PAYLOAD = tuple(f.name for f in JOB_FIELDS)
PAST = {"postgresql": "'2000-01-01 00:00:00+00'", "sqlite": "'2000-01-01 00:00:00.000000'"}


@dataclass
class Item:
    id: int
    attempts: int
    priority: int
    payload: dict[str, Any]
    raw: Any


class Front:
    """What every front offers the tests."""

    backend: str
    meta_table: str
    data_table: str

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    # Test helpers working on the tables directly.
    def counts(self) -> tuple[int, int]:
        rows = self._raw(
            f'SELECT (SELECT count(*) FROM "{self.data_table}"), '
            f'(SELECT count(*) FROM "{self.meta_table}")'
        )
        return int(rows[0][0]), int(rows[0][1])

    def states(self) -> dict[int, int]:
        return dict(self._raw(f'SELECT id, state FROM "{self.meta_table}"'))

    def last_error(self, item_id: int) -> str | None:
        rows = self._raw(f'SELECT last_error FROM "{self.data_table}" WHERE id = {int(item_id)}')
        return rows[0][0] if rows else None

    def expire_leases(self) -> None:
        past = PAST[self.backend]
        self._raw(f'UPDATE "{self.meta_table}" SET lease_until = {past} WHERE state = 1')

    def make_due(self) -> None:
        past = PAST[self.backend]
        self._raw(f'UPDATE "{self.meta_table}" SET run_at = {past} WHERE state = 0')


class CoreFront(Front):
    """The core's SplitQueue over a bare psycopg or sqlite3 connection."""

    def __init__(self, backend: str, conn: Any, table: str, *, create: bool = True) -> None:
        self.backend, self.conn = backend, conn
        if backend == "sqlite":  # read now: the connection is not to be shared across threads
            self.path = conn.execute("PRAGMA database_list").fetchone()[2]
        self.spec = QueueSpec(table, JOB_FIELDS, JOB_OPTIONS)
        self.data_table, self.meta_table = table, self.spec.meta_table
        dialect = get_dialect(backend)
        self.queue = SplitQueue(self.spec, dialect)
        self.ex = executor_for(dialect, conn)
        if create:
            for statement in create_statements(self.spec, dialect):
                self.ex.execute(statement, {})

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        return self.ex.execute(statement, {})

    def clone(self) -> CoreFront:
        if self.backend == "postgresql":
            conn: Any = psycopg.connect(self.conn.info.dsn, autocommit=True)
        else:
            from dbqueue.drivers.sqlite import connect

            conn = connect(self.path)
        return CoreFront(self.backend, conn, self.data_table, create=False)

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """The caller's own transaction."""
        if isinstance(self.conn, sqlite3.Connection):
            with self.ex.atomic():
                yield
        else:
            with self.conn.transaction():
                yield

    def push(self, priority: int = 0, delay: Any = None, run_at: Any = None, **payload: Any) -> int:
        return self.queue.push(self.ex, payload, priority=priority, delay=delay, run_at=run_at)

    def push_many(self, rows: list[dict[str, Any]], **kw: Any) -> list[int]:
        return self.queue.push_many(self.ex, rows, **kw)

    def pop_batch(self, n: int = 1, **kw: Any) -> list[Item]:
        return [
            Item(m.id, m.attempts, m.priority, m.payload, m)
            for m in self.queue.pop_batch(self.ex, n, **kw)
        ]

    def ack_pop(self, items: Any, n: int, **kw: Any) -> tuple[int, list[Item]]:
        acked, messages = self.queue.ack_pop(self.ex, _raw_items(items), n, **kw)
        return acked, [Item(m.id, m.attempts, m.priority, m.payload, m) for m in messages]

    def __getattr__(self, name: str) -> Any:
        # ack, fail, extend, retry, rescue, purge, delete: same signature, executor first.
        method = getattr(self.queue, name)

        def call(*args: Any, **kw: Any) -> Any:
            args = tuple(_raw_items(a) for a in args)
            return method(self.ex, *args, **kw)

        return call

    def stats(self) -> dict[str, Any]:
        return self.queue.stats(self.ex).as_dict()


class DjangoFront(Front):
    """``Job.queue`` on a Django database alias."""

    def __init__(self, backend: str, alias: str) -> None:
        from tests.django.testapp.models import Job

        self.backend, self.alias, self.model = backend, alias, Job
        self.queue = Job.queue.using(alias)
        self.data_table = Job._meta.db_table
        self.meta_table = Job.queue_meta_model._meta.db_table

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        from django.db import connections

        with connections[self.alias].cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall() if cursor.description else []

    def clone(self) -> DjangoFront:
        return DjangoFront(self.backend, self.alias)  # Django connections are per thread

    def close(self) -> None:
        from django.db import connections

        connections.close_all()

    def atomic(self) -> Any:
        from django.db import transaction

        return transaction.atomic(using=self.alias)

    def pop_batch(self, n: int = 1, **kw: Any) -> list[Item]:
        return [
            Item(o.id, o.attempts, o.priority, {k: getattr(o, k) for k in PAYLOAD}, o)
            for o in self.queue.pop_batch(n, **kw)
        ]

    def ack_pop(self, items: Any, n: int, **kw: Any) -> tuple[int, list[Item]]:
        acked, objs = self.queue.ack_pop(_raw_items(items), n, **kw)
        return acked, [
            Item(o.id, o.attempts, o.priority, {k: getattr(o, k) for k in PAYLOAD}, o) for o in objs
        ]

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.queue, name)

        def call(*args: Any, **kw: Any) -> Any:
            return method(*(_raw_items(a) for a in args), **kw)

        return call


def _raw_items(arg: Any) -> Any:
    if isinstance(arg, Item):
        return arg.raw
    if isinstance(arg, list):
        return [i.raw if isinstance(i, Item) else i for i in arg]
    return arg
