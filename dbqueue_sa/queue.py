"""``Model.queue``: the queue API of a queue class, over the core queue of its layout (the
split queue here; :mod:`dbqueue_sa.ring_queue` binds the ring queue).

Every operation takes the ``Session`` (or ``Connection``) to run on as its first argument and
runs core statements on that session's connection, so it joins the session's transaction:
what you push is committed by your ``session.commit()`` (or ``with session.begin():``),
together with the rest of your work. The one exception is ``pop_batch(mode="at_most_once")``,
whose promise is that the items are gone before you handle them: it needs a session with no
transaction open, and commits its own.

The ``a``-prefixed methods (``apush``, ``apop_batch``, ...) are the same operations on an
``AsyncSession`` or ``AsyncConnection``, through ``run_sync``.
"""

from __future__ import annotations

import datetime as dt
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any, ClassVar, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_scoped_session
from sqlalchemy.orm import Mapper, Session, scoped_session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.session import make_transient_to_detached

from dbqueue.codec import payload_rows
from dbqueue.compaction import LOCK_TIMEOUT, CompactResult
from dbqueue.errors import InvalidArgument, TransactionStateError
from dbqueue.message import DeliveryMode, Message, RescueResult, State
from dbqueue.spec import QueueSpec
from dbqueue.split import SplitQueue, TokenLike, data_row
from dbqueue.worker_queue import AnyQueue
from dbqueue_sa.executor import SAExecutor
from dbqueue_sa.tables import core_dialect_of

#: What an operation runs on.
#: What the queue's methods run on: a Session (or a scoped_session, such as Flask-SQLAlchemy's
#: ``db.session``) or a Connection; the a-methods: an AsyncSession (or async_scoped_session) or
#: an AsyncConnection.
Target = Session | sa.Connection | scoped_session[Any]
AsyncTarget = AsyncSession | AsyncConnection | async_scoped_session[Any]
#: What a target is once a scoped session gave its current session.
Bound = Session | sa.Connection
AsyncBound = AsyncSession | AsyncConnection

#: The core queue per (class, database): SQL is rendered once per process, and a ring's pending
#: pop claims (numbers of one database's pop sequence) are shared by every thread that pops that
#: ring in that database, and never by another database.
_CORES: dict[tuple[type[Any], str], AnyQueue] = {}


#: Each engine's database key, rendered once (rendering a URL cost ~20 us per operation).
_DATABASE_KEYS: weakref.WeakKeyDictionary[sa.Engine, str] = weakref.WeakKeyDictionary()


def database_key(connection: sa.Connection) -> str:
    """Names the database a connection is to (its URL without the password)."""
    engine = connection.engine
    key = _DATABASE_KEYS.get(engine)
    if key is None:
        key = _DATABASE_KEYS[engine] = engine.url.render_as_string(hide_password=True)
    return key


class SAQueue[M]:
    """The queue of one mapped queue class (``Model.queue``)."""

    #: The core queue class of the layout.
    layout: ClassVar[type[AnyQueue]] = SplitQueue

    def __init__(self, model: type[M]) -> None:
        self.model = model

    @property
    def spec(self) -> QueueSpec:
        """The validated core spec."""
        return cast(QueueSpec, self.model.__queue_spec__)  # type: ignore[attr-defined]

    @cached_property
    def mapper(self) -> Mapper[M]:
        return cast(Mapper[M], sa.inspect(self.model))

    # -- connections --------------------------------------------------------------------------

    def _target(self, target: object) -> Bound:
        """``target`` if it is a Session or a Connection, else InvalidArgument (checked at run
        time: callers are not always type-checked)."""
        if isinstance(target, scoped_session):  # Flask-SQLAlchemy's db.session, for one
            target = target()
        if isinstance(target, Session | sa.Connection):
            return target
        hint = ""
        if isinstance(target, AsyncBound):
            hint = " (an AsyncSession: use the a-methods, apush, apop_batch, ...)"
        elif isinstance(target, sa.Engine):
            hint = " (open one: with Session(engine) as session, or with engine.begin())"
        raise InvalidArgument(
            f"{self.model.__name__}.queue needs a Session or a Connection, got "
            f"{type(target).__name__}{hint}"
        )

    def connection(self, target: Target) -> sa.Connection:
        """The connection ``target`` runs this queue's statements on (a Session's, for the
        class's bind)."""
        checked = self._target(target)
        if isinstance(checked, Session):
            # The driver is checked before the session connects (UnsupportedDatabase).
            core_dialect_of(checked.get_bind(mapper=self.mapper).dialect)
            return checked.connection(bind_arguments={"mapper": self.mapper})
        return checked

    def _bind(self, target: Target, *, commits: bool = False) -> tuple[AnyQueue, SAExecutor]:
        ex = SAExecutor(self.connection(target), commits=commits)
        key = (self.model, database_key(ex.connection))
        core = _CORES.get(key)
        if core is None:
            # setdefault: threads racing here all end up with the one core (and its claims).
            core = _CORES.setdefault(key, self.layout(self.spec, ex.dialect))
        return core, ex

    def core(self, target: Target) -> AnyQueue:
        """The core queue behind this one for ``target``'s database (used by the worker)."""
        return self._bind(target)[0]

    # -- payloads and instances ---------------------------------------------------------------

    @cached_property
    def _keys(self) -> dict[str, str]:
        """Accepted keyword -> column name: the attribute name and the column name."""
        out: dict[str, str] = {}
        for prop in self.mapper.column_attrs:
            for column in prop.columns:
                if isinstance(column, sa.Column) and column.name in self.spec.field_names:
                    out[prop.key] = out[column.name] = column.name
        return out

    def _payload(self, values: Mapping[str, Any]) -> dict[str, Any]:
        keys = self._keys
        # An unknown keyword passes through: the codec names it as unknown.
        return {keys.get(k, k): v for k, v in values.items()}

    @cached_property
    def _attributes(self) -> list[tuple[str, str]]:
        """(attribute, column name) of every mapped column."""
        return [
            (prop.key, prop.columns[0].name)
            for prop in self.mapper.column_attrs
            if isinstance(prop.columns[0], sa.Column)
        ]

    def _instances(self, messages: list[Message]) -> list[M]:
        new = self.mapper.class_manager.new_instance
        attributes = self._attributes
        out = []
        for m in messages:
            row = self._row(m)
            obj = new()
            for key, column in attributes:
                set_committed_value(obj, key, row.get(column))
            self._annotate(obj, m)
            out.append(obj)
        return out

    def _row(self, m: Message) -> dict[str, Any]:
        """The class's columns for a popped message."""
        return data_row(m)

    def _annotate(self, obj: Any, m: Message) -> None:
        """What a popped message has beyond the class's columns (its meta columns); the
        instance is detached, as one loaded by a closed session (its row exists)."""
        obj.attempts = m.attempts
        obj.priority = m.priority
        obj.run_at = m.run_at
        obj.lease_until = m.lease_until
        make_transient_to_detached(obj)

    # -- operations ---------------------------------------------------------------------------

    def push(
        self,
        target: Target,
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        **payload: Any,
    ) -> int:
        """Enqueue one item in the session's transaction; return its id."""
        core, ex = self._bind(target)
        return core.push(ex, self._payload(payload), priority=priority, delay=delay, run_at=run_at)

    def push_many(
        self,
        target: Target,
        rows: Iterable[Mapping[str, Any]],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        batch_size: int | None = None,
    ) -> list[int]:
        """Enqueue many items, one statement per batch; ids in input order. All rows are
        validated first; nothing is written if any is invalid."""
        payloads = [self._payload(r) for r in payload_rows(rows)]
        core, ex = self._bind(target)
        return core.push_many(
            ex, payloads, priority=priority, delay=delay, run_at=run_at, batch_size=batch_size
        )

    def pop_batch(
        self,
        target: Target,
        n: int = 1,
        *,
        mode: DeliveryMode | str = DeliveryMode.AT_LEAST_ONCE,
        lease: dt.timedelta | None = None,
    ) -> list[M]:
        """Take up to ``n`` due items as instances of the class, with ``attempts``,
        ``priority``, ``run_at`` and ``lease_until`` set.

        ``mode`` (see :class:`dbqueue.DeliveryMode`): ``at_least_once`` leases the items until
        they are acked (the lease is taken when the session commits); ``transactional``
        removes them in the session's transaction (a rollback brings them back);
        ``at_most_once`` removes them and commits at once: it refuses a session that has a
        transaction open.
        """
        if DeliveryMode.parse(mode) is not DeliveryMode.AT_MOST_ONCE:
            core, ex = self._bind(target)
            return self._instances(core.pop_batch(ex, n, mode=mode, lease=lease))
        refusal = (
            "pop_batch(mode='at_most_once') must commit on its own, but the session has a "
            "transaction open: a rollback would bring back items already handed out. Commit "
            "first (or call it on a fresh session), or use mode='transactional'"
        )
        with self._own_transaction(target, refusal) as (core, ex):
            return self._instances(core.pop_batch(ex, n, mode=mode, lease=lease))

    @contextmanager
    def _own_transaction(
        self, target: Target, refusal: str
    ) -> Iterator[tuple[AnyQueue, SAExecutor]]:
        """A transaction of the operation's own on ``target``, committed when the block ends;
        :class:`TransactionStateError` (``refusal``) if the session already has one open."""
        bound = self._target(target)  # before asking it about its transaction
        if bound.in_transaction():
            raise TransactionStateError(refusal)
        with bound.begin():
            yield self._bind(bound, commits=True)

    def ack(self, target: Target, items: TokenLike, *, strict: bool = True) -> list[int]:
        """Remove leased items whose work is done (fenced by their lease token); a queue
        with ``keep_done`` marks them done instead."""
        core, ex = self._bind(target)
        return core.ack(ex, items, strict=strict)

    def ack_pop(
        self, target: Target, items: TokenLike, n: int, *, lease: dt.timedelta | None = None
    ) -> tuple[int, list[M]]:
        """Ack ``items`` (those still leased, as ``strict=False``) and lease up to ``n`` more;
        return the number acked and the new items (what a worker does)."""
        core, ex = self._bind(target)
        acked, messages = core.ack_pop(ex, items, n, lease=lease)
        return acked, self._instances(messages)

    def fail(
        self,
        target: Target,
        items: TokenLike,
        error: str | BaseException | list[str],
        *,
        delay: dt.timedelta | None = None,
        strict: bool = True,
        retry: bool = True,
    ) -> dict[int, State]:
        """Record a failed attempt: retried after back-off, failed after max_attempts (or at
        once with ``retry=False``)."""
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        core, ex = self._bind(target)
        return core.fail(ex, items, error, delay=delay, strict=strict, retry=retry)

    def extend(
        self, target: Target, items: TokenLike, *, lease: dt.timedelta | None = None
    ) -> list[int]:
        """Extend the leases of items still held (a heartbeat for slow work)."""
        core, ex = self._bind(target)
        return core.extend(ex, items, lease=lease)

    def ack_by_id(self, target: Target, ids: Iterable[Any] | int) -> list[int]:
        """Operator's ack: settle leased items by id (ids or instances), whichever delivery
        holds them now; a consumer acks what it popped with :meth:`ack`."""
        core, ex = self._bind(target)
        return core.ack_by_id(ex, ids)

    def fail_by_id(self, target: Target, ids: Iterable[Any] | int, error: str) -> dict[int, State]:
        """Operator's fail: record a failed attempt of leased items by id, whichever delivery
        holds them now; a consumer fails what it popped with :meth:`fail`."""
        core, ex = self._bind(target)
        return core.fail_by_id(ex, ids, error)

    def release(self, target: Target, items: TokenLike) -> list[int]:
        """Hand back leased items unstarted: ready again at once, their attempt not counted
        (what a stopping worker does with the rest of its batch). The token of a released
        item must not be used again."""
        core, ex = self._bind(target)
        return core.release(ex, items)

    def retry(self, target: Target, ids: Iterable[Any] | int) -> int:
        """Failed items (ids or instances) back to ready with attempts reset."""
        core, ex = self._bind(target)
        return core.retry(ex, ids)

    def set_priority(self, target: Target, ids: Iterable[Any] | int, priority: int) -> int:
        """Give items (ids or instances, any state) a new priority; return how many."""
        core, ex = self._bind(target)
        return core.set_priority(ex, ids, priority)

    def rescue(self, target: Target, *, batch: int | None = None) -> RescueResult:
        """Expired leases back to ready (or failed after max_attempts)."""
        core, ex = self._bind(target)
        return core.rescue(ex, batch=batch)

    def next_due(self, target: Target) -> dt.datetime | None:
        """When the queue next has work that no push announces: an item's delay or back-off
        ends, or a lease expires; None if there is none (what an idle worker sleeps until)."""
        core, ex = self._bind(target)
        return core.next_due(ex)

    def compact(
        self, target: Target, *, lock_timeout: dt.timedelta = LOCK_TIMEOUT
    ) -> CompactResult:
        """Rewrite the queue's tables to their live rows, giving back the dead versions a long
        transaction kept vacuum from removing (PostgreSQL; see dbqueue.compaction). It commits
        on its own, so it refuses a session with a transaction open: it takes a short
        exclusive lock (waited for at most ``lock_timeout``), which must not last until the
        session commits."""
        refusal = (
            "compact() runs in a transaction of its own, but the session has one open: its "
            "lock on the queue's tables would stop every producer and worker until the "
            "session commits. Commit first, or call it on a fresh session"
        )
        with self._own_transaction(target, refusal) as (core, ex):
            return core.compact(ex, lock_timeout=lock_timeout)

    def stats(self, target: Target) -> dict[str, Any]:
        """Counts per state and ``oldest_ready_age`` (a timedelta, or None); for a ring also
        ``capacity`` and ``occupancy`` (the share of slots holding a message)."""
        core, ex = self._bind(target)
        return core.stats(ex).report()

    def purge(self, target: Target, state: State | str | int | None = None) -> int:
        """Delete every item in ``state`` ("ready", "leased", "done", "failed"; None: all)."""
        core, ex = self._bind(target)
        return core.purge(ex, state)

    def delete(self, target: Target, ids: Iterable[Any] | int) -> int:
        """Delete items (ids or instances) from both tables, whatever their state."""
        core, ex = self._bind(target)
        return core.delete(ex, ids)

    # -- queries ------------------------------------------------------------------------------

    def items(self, state: State | str | int | None = None) -> sa.Select[Any]:
        """A query of the items: rows of (instance, state, attempts, priority, run_at,
        lease_until), optionally of one state; run it with ``session.execute(...)``."""
        meta = self.model.__queue_meta__  # type: ignore[attr-defined]
        key = self.mapper.primary_key[0]
        query = (
            sa.select(
                self.model,
                meta.c.state,
                meta.c.attempts,
                meta.c.priority,
                meta.c.run_at,
                meta.c.lease_until,
            )
            .join(meta, meta.c.id == key)
            .order_by(key)
        )
        if state is not None:
            query = query.where(meta.c.state == int(State.parse(state)))
        return query

    def failed(self) -> sa.Select[Any]:
        """Failed items, newest first: rows of (instance, attempts, failed_at), with the
        error in the instance's ``last_error``."""
        meta = self.model.__queue_meta__  # type: ignore[attr-defined]
        key = self.mapper.primary_key[0]
        return (
            sa.select(self.model, meta.c.attempts, meta.c.run_at.label("failed_at"))
            .join(meta, meta.c.id == key)
            .where(meta.c.state == int(State.FAILED))
            .order_by(meta.c.run_at.desc(), key.desc())
        )

    # -- asyncio ------------------------------------------------------------------------------

    async def _arun(
        self, given: AsyncTarget, method: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        target: object = given  # checked at run time: callers are not always type-checked
        if isinstance(target, async_scoped_session):
            target = target()
        if not isinstance(target, AsyncBound):
            if isinstance(target, AsyncEngine):
                hint = " (open one: async with AsyncSession(engine) as session)"
            elif isinstance(target, Session | sa.Connection | scoped_session):
                hint = f" (use {method.__name__} for a Session)"
            else:
                hint = ""
            raise InvalidArgument(
                f"{self.model.__name__}.queue.a{method.__name__} needs an AsyncSession or an "
                f"AsyncConnection, got {type(target).__name__}{hint}"
            )
        return await target.run_sync(method, *args, **kw)

    async def apush(self, target: AsyncTarget, **kw: Any) -> int:
        """:meth:`push` on an AsyncSession."""
        return cast(int, await self._arun(target, self.push, **kw))

    async def apush_many(
        self, target: AsyncTarget, rows: Iterable[Mapping[str, Any]], **kw: Any
    ) -> list[int]:
        """:meth:`push_many` on an AsyncSession."""
        return cast(list[int], await self._arun(target, self.push_many, payload_rows(rows), **kw))

    async def apop_batch(self, target: AsyncTarget, n: int = 1, **kw: Any) -> list[M]:
        """:meth:`pop_batch` on an AsyncSession."""
        return cast(list[M], await self._arun(target, self.pop_batch, n, **kw))

    async def aack(self, target: AsyncTarget, items: TokenLike, **kw: Any) -> list[int]:
        """:meth:`ack` on an AsyncSession."""
        return cast(list[int], await self._arun(target, self.ack, items, **kw))

    async def aack_pop(
        self, target: AsyncTarget, items: TokenLike, n: int, **kw: Any
    ) -> tuple[int, list[M]]:
        """:meth:`ack_pop` on an AsyncSession."""
        return cast(tuple[int, list[M]], await self._arun(target, self.ack_pop, items, n, **kw))

    async def afail(
        self, target: AsyncTarget, items: TokenLike, error: Any, **kw: Any
    ) -> dict[int, State]:
        """:meth:`fail` on an AsyncSession."""
        return cast(dict[int, State], await self._arun(target, self.fail, items, error, **kw))

    async def aextend(self, target: AsyncTarget, items: TokenLike, **kw: Any) -> list[int]:
        """:meth:`extend` on an AsyncSession."""
        return cast(list[int], await self._arun(target, self.extend, items, **kw))

    async def aack_by_id(self, target: AsyncTarget, ids: Iterable[Any] | int) -> list[int]:
        """:meth:`ack_by_id` on an AsyncSession."""
        return cast(list[int], await self._arun(target, self.ack_by_id, ids))

    async def afail_by_id(
        self, target: AsyncTarget, ids: Iterable[Any] | int, error: str
    ) -> dict[int, State]:
        """:meth:`fail_by_id` on an AsyncSession."""
        return cast(dict[int, State], await self._arun(target, self.fail_by_id, ids, error))

    async def arelease(self, target: AsyncTarget, items: TokenLike) -> list[int]:
        """:meth:`release` on an AsyncSession."""
        return cast(list[int], await self._arun(target, self.release, items))

    async def aretry(self, target: AsyncTarget, ids: Iterable[Any] | int) -> int:
        """:meth:`retry` on an AsyncSession."""
        return cast(int, await self._arun(target, self.retry, ids))

    async def aset_priority(
        self, target: AsyncTarget, ids: Iterable[Any] | int, priority: int
    ) -> int:
        """:meth:`set_priority` on an AsyncSession."""
        return cast(int, await self._arun(target, self.set_priority, ids, priority))

    async def arescue(self, target: AsyncTarget, **kw: Any) -> RescueResult:
        """:meth:`rescue` on an AsyncSession."""
        return cast(RescueResult, await self._arun(target, self.rescue, **kw))

    async def anext_due(self, target: AsyncTarget) -> dt.datetime | None:
        """:meth:`next_due` on an AsyncSession."""
        return cast(dt.datetime | None, await self._arun(target, self.next_due))

    async def acompact(self, target: AsyncTarget, **kw: Any) -> CompactResult:
        """:meth:`compact` on an AsyncConnection."""
        return cast(CompactResult, await self._arun(target, self.compact, **kw))

    async def astats(self, target: AsyncTarget) -> dict[str, Any]:
        """:meth:`stats` on an AsyncSession."""
        return cast(dict[str, Any], await self._arun(target, self.stats))

    async def apurge(self, target: AsyncTarget, state: State | str | int | None = None) -> int:
        """:meth:`purge` on an AsyncSession."""
        return cast(int, await self._arun(target, self.purge, state))

    async def adelete(self, target: AsyncTarget, ids: Iterable[Any] | int) -> int:
        """:meth:`delete` on an AsyncSession."""
        return cast(int, await self._arun(target, self.delete, ids))
