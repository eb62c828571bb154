"""One facade over every front end, so the conformance tests are written once.

A front pushes and pops through the real public API of its front end (the core's SplitQueue
over a driver connection, ``Model.queue`` over Django's connection, or ``Model.queue`` on a
SQLAlchemy Session or AsyncSession) and normalises what it gets back to :class:`Item`, keeping
the original object for ack/fail.

Where the front ends differ by design, a capability attribute of :class:`Front` says so and
the test asserts each side's behaviour (never a vendor or front check in a test).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from dbqueue import QueueSpec, RingQueue, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.ring import SlotState
from dbqueue.schema import create_ring_statements, create_statements
from tests.conformance.spec import JOB_FIELDS, JOB_OPTIONS, KEPT_OPTIONS, RING_OPTIONS

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
    """What every front offers the tests.

    Its queue is a split queue (``layout`` "split": a data table and a meta table) or a ring
    ("ring": the slot table and its side table, whose names ``data_table`` and ``meta_table``
    then hold). The helpers below read either as message numbers and message states.
    """

    backend: str
    layout: str = "split"
    meta_table: str
    data_table: str
    #: The front's queue keeps acknowledged items as done (``keep_done``: its KeptJob twin).
    kept: bool = False

    #: A transactional pop needs a transaction the caller opened (``atomic()``): the core's
    #: and Django's connections autocommit outside one, so the pop would commit at once and be
    #: an at-most-once pop under another name; they raise TransactionStateError. A
    #: SQLAlchemy Session is always in a transaction that its user commits, so there the pop
    #: joins it (and the SA fronts commit after the call, as a user does).
    transactional_needs_atomic = True

    #: What a pop does with a timestamp Python's datetime cannot hold (PostgreSQL's
    #: 'infinity'): "fails" it alone (the core's fetch loads row by row; SQLAlchemy's asyncio
    #: psycopg adapter through dbqueue_sa.psycopg_async), or "max" (asyncpg reads it as
    #: datetime.max).
    reads_infinity = "fails"

    if TYPE_CHECKING:
        # The queue's operations (push, pop_batch, ack, ...), atomic(), clone() and close()
        # are each front's own, mostly forwarded by __getattr__.
        def __getattr__(self, name: str) -> Any: ...

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def interrupter(self) -> Callable[[], None]:
        """Connects, and returns what stops this front's running statement from another
        thread (sqlite3's ``interrupt()``, psycopg's ``cancel()``, both thread-safe)."""
        raise NotImplementedError

    # What the layouts do differently, by design (a test asserts each side's behaviour).

    @property
    def ring(self) -> bool:
        return self.layout == "ring"

    @property
    def capacity(self) -> int | None:
        """The ring's slots (None: a split queue is unbounded)."""
        return RING_OPTIONS.capacity if self.ring else None

    @property
    def renumbers(self) -> bool:
        """A message that leaves the queue's order and comes back (a retry, a rescued lease)
        comes back under a new number: the ring pushes it again at its tail."""
        return self.ring

    @property
    def rollback_strands(self) -> bool:
        """A transactional pop rolled back leaves its messages out of reach until a rescue
        pushes them again: the ring's pop numbers are sequence values, which a rollback does
        not give back (PostgreSQL; SQLite's counter rolls back with the pop)."""
        return self.ring and self.backend == "postgresql"

    # Test helpers working on the tables directly.
    def counts(self) -> tuple[int, int]:
        """Data and meta rows (split); a ring's messages, in its slots and its side table,
        twice (one row per message, as a split queue's two tables have)."""
        if self.ring:
            rows = self._raw(
                f'SELECT (SELECT count(*) FROM "{self.data_table}" WHERE state <> '
                f'{int(SlotState.EMPTY)}) + (SELECT count(*) FROM "{self.meta_table}")'
            )
            return int(rows[0][0]), int(rows[0][0])
        rows = self._raw(
            f'SELECT (SELECT count(*) FROM "{self.data_table}"), '
            f'(SELECT count(*) FROM "{self.meta_table}")'
        )
        return int(rows[0][0]), int(rows[0][1])

    def states(self) -> dict[int, int]:
        """Each message's State (a ring's slot states read as message states)."""
        if self.ring:
            ready, leased = int(SlotState.READY), int(SlotState.LEASED)
            return dict(
                self._raw(
                    f"SELECT seq, CASE state WHEN {ready} THEN 0 WHEN {leased} THEN 1 END "
                    f'FROM "{self.data_table}" WHERE state <> {int(SlotState.EMPTY)} '
                    f'UNION ALL SELECT id, state FROM "{self.meta_table}"'
                )
            )
        return dict(self._raw(f'SELECT id, state FROM "{self.meta_table}"'))

    def meta_rows(self) -> dict[int, tuple[int, int, bool]]:
        """id -> (state, attempts, whether lease_until is NULL) of every meta row."""
        rows = self._raw(
            f'SELECT id, state, attempts, lease_until IS NULL FROM "{self.meta_table}"'
        )
        return {int(r[0]): (int(r[1]), int(r[2]), bool(r[3])) for r in rows}

    def last_error(self, item_id: int) -> str | None:
        where = f"id = {int(item_id)}"
        if self.ring:
            rows = self._raw(
                f'SELECT last_error FROM "{self.data_table}" WHERE seq = {int(item_id)} AND '
                f"state <> {int(SlotState.EMPTY)} UNION ALL "
                f'SELECT last_error FROM "{self.meta_table}" WHERE {where}'
            )
        else:
            rows = self._raw(f'SELECT last_error FROM "{self.data_table}" WHERE {where}')
        return rows[0][0] if rows else None

    def expire_leases(self) -> None:
        past = PAST[self.backend]
        if self.ring:
            leased = int(SlotState.LEASED)
            self._raw(f'UPDATE "{self.data_table}" SET lease_until = {past} WHERE state = {leased}')
        self._raw(f'UPDATE "{self.meta_table}" SET lease_until = {past} WHERE state = 1')

    def make_due(self) -> None:
        past = PAST[self.backend]
        self._raw(f'UPDATE "{self.meta_table}" SET run_at = {past} WHERE state = 0')

    def backdate(self, ids: list[int]) -> None:
        """Make the items ``ids`` pushed long ago, and those done or failed finished long
        ago (a scheduled item stays due later)."""
        past, listed = PAST[self.backend], ", ".join(str(int(i)) for i in ids)
        if self.ring:
            self._raw(
                f'UPDATE "{self.data_table}" SET pushed_at = {past} '
                f"WHERE seq IN ({listed}) AND state <> {int(SlotState.EMPTY)}"
            )
            self._raw(
                f'UPDATE "{self.meta_table}" SET pushed_at = {past}, failed_at = {past} '
                f"WHERE id IN ({listed})"
            )
            return
        self._raw(f'UPDATE "{self.data_table}" SET enqueued_at = {past} WHERE id IN ({listed})')
        self._raw(
            f'UPDATE "{self.meta_table}" SET run_at = {past} WHERE id IN ({listed}) '
            f"AND state IN (2, 3)"
        )


class CoreFront(Front):
    """The core's SplitQueue over a bare psycopg or sqlite3 connection."""

    def __init__(
        self,
        backend: str,
        conn: Any,
        table: str,
        *,
        create: bool = True,
        kept: bool = False,
        layout: str = "split",
    ) -> None:
        self.backend, self.conn, self.kept, self.layout = backend, conn, kept, layout
        if backend == "sqlite":  # read now: the connection is not to be shared across threads
            self.path = conn.execute("PRAGMA database_list").fetchone()[2]
        dialect = get_dialect(backend)
        self.queue: SplitQueue | RingQueue
        if self.ring:
            self.spec = QueueSpec(table, JOB_FIELDS, RING_OPTIONS)
            self.data_table, self.meta_table = table, self.spec.failed_table
            self.queue = RingQueue(self.spec, dialect)
            statements = create_ring_statements(self.spec, dialect)
        else:
            self.spec = QueueSpec(table, JOB_FIELDS, KEPT_OPTIONS if kept else JOB_OPTIONS)
            self.data_table, self.meta_table = table, self.spec.meta_table
            self.queue = SplitQueue(self.spec, dialect)
            statements = create_statements(self.spec, dialect)
        self.ex = executor_for(dialect, conn)
        if create:
            for statement in statements:
                self.ex.execute(statement, {})

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        return self.ex.execute(statement, {})

    def interrupter(self) -> Callable[[], None]:
        return _stopper(self.conn)

    def clone(self) -> CoreFront:
        if self.backend == "postgresql":
            conn: Any = psycopg.connect(self.conn.info.dsn, autocommit=True)
        else:
            from dbqueue.drivers.sqlite import connect

            conn = connect(self.path)
        return CoreFront(
            self.backend, conn, self.data_table, create=False, kept=self.kept, layout=self.layout
        )

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
        if name.startswith("_"):  # not a queue operation (a printer's hook, say)
            raise AttributeError(name)
        method = getattr(self.queue, name)

        def call(*args: Any, **kw: Any) -> Any:
            args = tuple(_raw_items(a) for a in args)
            return method(self.ex, *args, **kw)

        return call

    def stats(self) -> dict[str, Any]:
        return self.queue.stats(self.ex).as_dict()


class ModelFront(Front):
    """A front whose queue is a model class's ``Model.queue`` (Django, SQLAlchemy): popped
    items are model instances, with ``attempts`` and ``priority`` set."""

    def _call(self, name: str, /, *args: Any, **kw: Any) -> Any:
        """Run ``Model.queue.<name>`` with the front's target."""
        raise NotImplementedError

    def pop_batch(self, n: int = 1, **kw: Any) -> list[Item]:
        return [_model_item(o) for o in self._call("pop_batch", n, **kw)]

    def ack_pop(self, items: Any, n: int, **kw: Any) -> tuple[int, list[Item]]:
        acked, objs = self._call("ack_pop", _raw_items(items), n, **kw)
        return acked, [_model_item(o) for o in objs]

    def __getattr__(self, name: str) -> Any:
        # push, push_many, ack, fail, extend, retry, rescue, stats, purge, delete.
        if name.startswith("_"):  # not a queue operation (a printer's hook, say)
            raise AttributeError(name)

        def call(*args: Any, **kw: Any) -> Any:
            return self._call(name, *(_raw_items(a) for a in args), **kw)

        return call


class DjangoFront(ModelFront):
    """``Job.queue`` (``KeptJob.queue`` if ``kept``) on a Django database alias."""

    def __init__(
        self, backend: str, alias: str, *, kept: bool = False, layout: str = "split"
    ) -> None:
        from tests.django.testapp.models import Job, KeptJob, RingJob

        model: Any = RingJob if layout == "ring" else KeptJob if kept else Job
        self.backend, self.alias, self.model, self.kept = backend, alias, model, kept
        self.layout = layout
        self.queue = model.queue.using(alias)
        self.data_table = model._meta.db_table
        side = model.failed_model if self.ring else model.queue_meta_model
        self.meta_table = side._meta.db_table

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        from django.db import connections

        with connections[self.alias].cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall() if cursor.description else []

    def interrupter(self) -> Callable[[], None]:
        from django.db import connections

        wrapper = connections[self.alias]  # this thread's connection
        wrapper.ensure_connection()
        return _stopper(wrapper.connection)

    def clone(self) -> DjangoFront:
        # Django connections are per thread.
        return DjangoFront(self.backend, self.alias, kept=self.kept, layout=self.layout)

    def close(self) -> None:
        from django.db import connections

        connections.close_all()

    def atomic(self) -> Any:
        from django.db import transaction

        return transaction.atomic(using=self.alias)

    def _call(self, name: str, /, *args: Any, **kw: Any) -> Any:
        return getattr(self.queue, name)(*args, **kw)


class SAFront(ModelFront):
    """``Job.queue`` (tests.sqlalchemy.models; ``KeptJob.queue`` if ``kept``) on a ``Session``
    over an ``Engine`` of its own.

    Outside :meth:`atomic` every operation is committed after the call, or rolled back if it
    raises: what an application does (``with session.begin(): ...`` around each). Inside,
    the operations run in the transaction ``atomic()`` began (a savepoint when one is open)
    and nothing is committed per call. The tables are created by the ``front`` fixture.
    """

    transactional_needs_atomic = False
    #: An Engine and a Session here, an AsyncEngine and an AsyncSession in AsyncSAFront.
    engine: Any
    session: Any

    def __init__(
        self, backend: str, url: str, *, kept: bool = False, layout: str = "split"
    ) -> None:
        self.backend, self.url, self.kept, self.layout = backend, url, kept, layout
        model = sa_model(kept=kept, layout=layout)
        self.queue = model.queue
        side = model.__queue_failed__ if self.ring else model.__queue_meta__
        self.data_table, self.meta_table = model.__tablename__, side.name
        self._depth = 0  # atomic() blocks open
        self._open()

    def _open(self) -> None:
        self.engine = sa.create_engine(self.url, connect_args=_connect_args(self.backend))
        self.session = Session(self.engine)

    # What an asyncio front overrides: how a call's result is awaited (_await), which method
    # of the queue an operation is (_method), how a sync function gets the session
    # (_on_session) and how a transaction begins (_begin).
    def _await(self, result: Any) -> Any:
        return result

    def _method(self, name: str) -> Callable[..., Any]:
        return getattr(self.queue, name)  # type: ignore[no-any-return]

    def _on_session(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(sync Session, *args)``, as a call whose result goes through :meth:`_await`."""
        return fn(self.session, *args)

    def _begin(self) -> Any:
        session = self.session
        return session.begin_nested() if session.in_transaction() else session.begin()

    def _finish(self, make: Callable[[], Any]) -> Any:
        """Run one operation: commit it outside ``atomic()``, roll it back if it raises."""
        try:
            result = self._await(make())
        except BaseException:
            if not self._depth:
                self._await(self.session.rollback())
            raise
        if not self._depth:
            self._await(self.session.commit())
        return result

    def _call(self, name: str, /, *args: Any, **kw: Any) -> Any:
        return self._finish(lambda: self._method(name)(self.session, *args, **kw))

    def _raw(self, statement: str) -> list[tuple[Any, ...]]:
        return self._finish(lambda: self._on_session(_fetch, statement))  # type: ignore[no-any-return]

    def interrupter(self) -> Callable[[], None]:
        # The session keeps this connection until the next operation commits.
        return self._await(self._on_session(_driver_stopper))  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """The session's transaction (a savepoint if one is open), committed on exit."""
        tx = self._await(self._begin())
        self._depth += 1
        try:
            yield
        except BaseException:
            self._await(tx.rollback())
            raise
        else:
            self._await(tx.commit())
        finally:
            self._depth -= 1

    def clone(self) -> SAFront:
        # Its own engine, so its own connections.
        return type(self)(self.backend, self.url, kept=self.kept, layout=self.layout)

    def close(self) -> None:
        self._await(self.session.close())
        self._await(self.engine.dispose())


class AsyncSAFront(SAFront):
    """``Job.queue``'s asyncio methods (``apush``, ``apop_batch``, ...) on an ``AsyncSession``.

    The tests call the front synchronously: every call runs to completion on the front's own
    event loop (an :class:`asyncio.Runner` kept for the front's lifetime), the only loop its
    async engine is ever used on. A clone has its own loop and engine (one per thread).
    """

    def _open(self) -> None:
        from tests.sqlalchemy.conftest import async_url

        self.runner = asyncio.Runner()
        self.engine = create_async_engine(
            async_url(self.url), connect_args=_connect_args(self.backend)
        )
        self.session = AsyncSession(self.engine)

    def _await(self, result: Any) -> Any:
        return self.runner.run(result)

    def _method(self, name: str) -> Callable[..., Any]:
        return getattr(self.queue, f"a{name}")  # type: ignore[no-any-return]

    def _on_session(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.session.run_sync(fn, *args)

    async def _abegin(self) -> Any:
        session = self.session
        tx = session.begin_nested() if session.in_transaction() else session.begin()
        return await tx.start()

    def _begin(self) -> Any:
        return self._abegin()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.runner.close()


class AsyncpgSAFront(AsyncSAFront):
    """:class:`AsyncSAFront` through asyncpg (``postgresql+asyncpg://``), the driver most
    FastAPI applications use: the core's SQL runs with numbered parameters."""

    reads_infinity = "max"  # type: ignore[assignment]

    def _open(self) -> None:
        self.runner = asyncio.Runner()
        url = self.url.replace("postgresql+psycopg://", "postgresql+asyncpg://", 1)
        self.engine = create_async_engine(url)
        self.session = AsyncSession(self.engine)

    def interrupter(self) -> Callable[[], None]:
        """asyncpg cancels only from the event loop its connection runs on, which is busy
        running the statement to cancel: cancel its backend from another connection."""
        pid = self._await(self._on_session(_backend_pid))
        dsn = sa.make_url(self.url).set(drivername="postgresql")

        def cancel() -> None:
            with psycopg.connect(dsn.render_as_string(hide_password=False)) as conn:
                conn.execute("SELECT pg_cancel_backend(%s)", (pid,))

        return cancel


def sa_model(*, kept: bool, layout: str) -> Any:
    """The SQLAlchemy class of a conformance queue: Job, KeptJob or RingJob."""
    from tests.sqlalchemy.kept import KeptJob
    from tests.sqlalchemy.models import Job
    from tests.sqlalchemy.ring_job import RingJob

    return RingJob if layout == "ring" else KeptJob if kept else Job


def _connect_args(backend: str) -> dict[str, Any]:
    # SQLite: the busy timeout the core's and Django's test connections use (sqlite3's default
    # is 5 s, short for eight threads taking the write lock in turn on a loaded machine).
    return {"timeout": 30} if backend == "sqlite" else {}


def _fetch(session: Session, statement: str) -> list[tuple[Any, ...]]:
    result = session.connection().exec_driver_sql(statement)
    return [tuple(row) for row in result] if result.returns_rows else []


def _driver_stopper(session: Session) -> Callable[[], None]:
    driver: Any = session.connection().connection.driver_connection
    # aiosqlite runs a sqlite3 connection in its own thread; interrupt() that one.
    return _stopper(getattr(driver, "_conn", driver))


def _backend_pid(session: Session) -> int:
    return int(session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def _stopper(conn: Any) -> Callable[[], None]:
    """sqlite3's ``interrupt`` or psycopg's ``cancel`` (sync on AsyncConnection too)."""
    return conn.interrupt if isinstance(conn, sqlite3.Connection) else conn.cancel


def _model_item(obj: Any) -> Item:
    # A ring's instances have no priority (a ring delivers in push order).
    priority = getattr(obj, "priority", 0)
    return Item(obj.id, obj.attempts, priority, {k: getattr(obj, k) for k in PAYLOAD}, obj)


def _raw_items(arg: Any) -> Any:
    if isinstance(arg, Item):
        return arg.raw
    if isinstance(arg, list):
        return [i.raw if isinstance(i, Item) else i for i in arg]
    return arg
