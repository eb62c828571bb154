"""``Model.queue``: the queue API of a queue class (:class:`dbqueue.front.FrontQueue`) on the
connection of a Session; :mod:`dbqueue_sa.ring_queue` binds the ring queue.

Every operation takes the ``Session`` (or ``Connection``) to run on as its first argument and
runs core statements on that session's connection, so it joins the session's transaction:
what you push is committed by your ``session.commit()`` (or ``with session.begin():``),
together with the rest of your work. The one exception is ``pop_batch(mode="at_most_once")``,
whose promise is that the items are gone before you handle them: it needs a session with no
transaction open, and commits its own.

The ``a``-prefixed methods (``apush``, ``apop_batch``, ...) are the same operations on an
``AsyncSession`` or ``AsyncConnection``, through ``run_sync``. Both kinds are made from the one
definition of each operation in :class:`~dbqueue.front.FrontQueue` (``session_method``,
``async_session_method``), where a queue bound to the session (:meth:`SAQueue.on`) runs it.
"""

from __future__ import annotations

import datetime as dt
import functools
import weakref
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any, ClassVar, Concatenate, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_scoped_session
from sqlalchemy.orm import Mapper, Session, scoped_session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.session import make_transient_to_detached

from dbqueue.arguments import TokenLike
from dbqueue.errors import InvalidArgument, TransactionStateError
from dbqueue.front import AnyQueue, FrontQueue, RingFrontQueue, shared_core
from dbqueue.message import DeliveryMode, State
from dbqueue.spec import QueueSpec
from dbqueue.split import SplitQueue
from dbqueue_sa.executor import SAExecutor
from dbqueue_sa.tables import core_dialect_of

#: What the queue's methods run on: a Session (or a scoped_session, such as Flask-SQLAlchemy's
#: ``db.session``) or a Connection; the a-methods: an AsyncSession (or async_scoped_session) or
#: an AsyncConnection.
Target = Session | sa.Connection | scoped_session[Any]
AsyncTarget = AsyncSession | AsyncConnection | async_scoped_session[Any]
#: What a target is once a scoped session gave its current session.
Bound = Session | sa.Connection
AsyncBound = AsyncSession | AsyncConnection

#: Each engine's database key, rendered once (rendering a URL cost ~20 us per operation).
_DATABASE_KEYS: weakref.WeakKeyDictionary[sa.Engine, str] = weakref.WeakKeyDictionary()


def database_key(connection: sa.Connection) -> str:
    """Names the database a connection is to (its URL without the password)."""
    engine = connection.engine
    key = _DATABASE_KEYS.get(engine)
    if key is None:
        key = _DATABASE_KEYS[engine] = engine.url.render_as_string(hide_password=True)
    return key


class SessionQueue[M](FrontQueue[M]):
    """A class's queue bound to one Session or Connection (:meth:`SAQueue.on`): the
    operations of :class:`~dbqueue.front.FrontQueue` on that session's connection."""

    def __init__(self, queue: SAQueue[M], target: Target) -> None:
        self.queue = queue
        self.target = target

    @property
    def spec(self) -> QueueSpec:
        return self.queue.spec

    def _bind(self) -> tuple[AnyQueue, SAExecutor]:
        return self.queue._bind(self.target)

    @contextmanager
    def _own_transaction(self, refusal: str) -> Iterator[tuple[AnyQueue, SAExecutor]]:
        bound = self.queue._target(self.target)  # before asking it about its transaction
        if bound.in_transaction():
            raise TransactionStateError(refusal)
        with bound.begin():
            yield self.queue._bind(bound, commits=True)

    @contextmanager
    def _outside_transaction(self, refusal: str) -> Iterator[tuple[AnyQueue, SAExecutor]]:
        # A Session always runs its statements in a transaction: the connection it takes for
        # this one is set to autocommit (SQLAlchemy resets the level when the connection goes
        # back to the pool), and the session's transaction is ended at once after.
        bound = self.queue._target(self.target)
        if bound.in_transaction():
            raise TransactionStateError(refusal)
        if isinstance(bound, Session):
            connection = self.queue.connection(bound, autocommit=True)
            try:
                yield self.queue._bind_connection(connection, commits=True)
            finally:
                bound.rollback()
            return
        level = bound.get_isolation_level()
        bound.execution_options(isolation_level="AUTOCOMMIT")
        try:
            yield self.queue._bind_connection(bound, commits=True)
        finally:
            bound.execution_options(isolation_level=level)

    def _payload(self, values: Any) -> dict[str, Any]:
        return self.queue._payload(values)

    def _instance(self, row: dict[str, Any], extras: dict[str, Any]) -> M:
        return self.queue.instance(row, extras)


class RingSessionQueue[M](SessionQueue[M], RingFrontQueue[M]):
    """A ring class's queue bound to one Session or Connection."""


def session_method[Q: FrontQueue[Any], **P, R](
    operation: Callable[Concatenate[Q, P], R],
) -> Callable[Concatenate[SAQueue[Any], Target, P], R]:
    """``operation`` of :class:`~dbqueue.front.FrontQueue` as a method of :class:`SAQueue`
    that takes the Session (or Connection) first."""

    @functools.wraps(operation)
    def method(self: SAQueue[Any], target: Target, /, *args: P.args, **kw: P.kwargs) -> R:
        return operation(cast(Q, self.on(target)), *args, **kw)

    return method


def async_session_method[Q: FrontQueue[Any], **P, R](
    operation: Callable[Concatenate[Q, P], R],
) -> Callable[Concatenate[SAQueue[Any], AsyncTarget, P], Coroutine[Any, Any, R]]:
    """``operation`` as a coroutine method of :class:`SAQueue` that takes an AsyncSession (or
    AsyncConnection) first, and runs the operation on its sync session (``run_sync``)."""
    name = operation.__name__

    async def method(
        self: SAQueue[Any], target: AsyncTarget, /, *args: P.args, **kw: P.kwargs
    ) -> R:
        def run(session: Bound) -> R:
            return operation(cast(Q, self.on(session)), *args, **kw)

        return cast(R, await self._arun(target, name, run))

    method.__name__ = method.__qualname__ = f"a{name}"
    method.__doc__ = f":meth:`{name}` on an AsyncSession or AsyncConnection."
    return method


class SAQueue[M]:
    """The queue of one mapped queue class (``Model.queue``): each operation takes the
    Session (or Connection) to run on first; see the module."""

    #: The core queue class of the queue's layout.
    core_class: ClassVar[type[AnyQueue]] = SplitQueue
    #: The queue bound to a session, that runs the operations.
    bound: ClassVar[type[SessionQueue[Any]]] = SessionQueue

    def __init__(self, model: type[M]) -> None:
        self.model = model

    @property
    def spec(self) -> QueueSpec:
        """The validated core spec."""
        return cast(QueueSpec, self.model.__queue_spec__)  # type: ignore[attr-defined]

    @cached_property
    def mapper(self) -> Mapper[M]:
        return cast(Mapper[M], sa.inspect(self.model))

    def on(self, target: Target) -> SessionQueue[M]:
        """This queue bound to ``target``: the same operations without the session argument
        (``Job.queue.on(session).push(...)``)."""
        return cast(SessionQueue[M], self.bound(self, target))

    def group(self, name: str) -> SAGroupQueue[M]:
        """Consumer group ``name`` of this queue (``QueueOptions.groups``): the same
        operations, each taking the Session first, on that group's deliveries only
        (``Order.queue.group("email").pop_batch(session, 10)``); pushes go to the queue
        itself, which delivers each item to every group. InvalidArgument for a group the
        queue does not declare."""
        found = self._groups.get(name)
        if found is None:
            found = self._groups.setdefault(name, self.group_class(self, name))
        return found

    @property
    def group_class(self) -> type[SAGroupQueue[M]]:
        """The class of this queue's consumer groups (a ring's has its own queries)."""
        return SAGroupQueue

    @cached_property
    def _groups(self) -> dict[str, SAGroupQueue[M]]:
        return {}

    def _meta(self) -> sa.Table:
        """The meta table the queries read (:meth:`items`, :meth:`failed`)."""
        self._refuse_fanned_out()
        return cast(sa.Table, self.model.__queue_meta__)  # type: ignore[attr-defined]

    def _refuse_fanned_out(self) -> None:
        """InvalidArgument for a query of a queue with consumer groups as a whole: each group
        has its own deliveries."""
        spec = self.spec
        if spec.fans_out:
            raise InvalidArgument(
                f"{self.model.__name__} delivers each item to each of its consumer groups "
                f"({', '.join(spec.options.groups)}), each with its own state: query one, "
                f"{self.model.__name__}.queue.group({spec.options.groups[0]!r}).items()"
            )

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

    def connection(self, target: Target, *, autocommit: bool = False) -> sa.Connection:
        """The connection ``target`` runs this queue's statements on (a Session's, for the
        class's bind); ``autocommit``: a Session's set to commit each statement on its own
        (the session must have no transaction open)."""
        checked = self._target(target)
        if isinstance(checked, Session):
            # The driver is checked before the session connects (UnsupportedDatabase).
            core_dialect_of(checked.get_bind(mapper=self.mapper).dialect)
            options = {"isolation_level": "AUTOCOMMIT"} if autocommit else None
            return checked.connection(
                bind_arguments={"mapper": self.mapper}, execution_options=options
            )
        return checked

    def _bind(self, target: Target, *, commits: bool = False) -> tuple[AnyQueue, SAExecutor]:
        return self._bind_connection(self.connection(target), commits=commits)

    def _bind_connection(
        self, connection: sa.Connection, *, commits: bool = False
    ) -> tuple[AnyQueue, SAExecutor]:
        ex = SAExecutor(connection, commits=commits)
        database = database_key(ex.connection)
        return shared_core(self.model, database, self.spec, ex.dialect, self.core_class), ex

    def core(self, target: Target) -> AnyQueue:
        """The core queue behind this one for ``target``'s database (used by the worker)."""
        return self._bind(target)[0]

    async def _arun(self, given: AsyncTarget, name: str, run: Callable[[Bound], Any]) -> Any:
        target: object = given  # checked at run time: callers are not always type-checked
        if isinstance(target, async_scoped_session):
            target = target()
        if not isinstance(target, AsyncBound):
            if isinstance(target, AsyncEngine):
                hint = " (open one: async with AsyncSession(engine) as session)"
            elif isinstance(target, Session | sa.Connection | scoped_session):
                hint = f" (use {name} for a Session)"
            else:
                hint = ""
            raise InvalidArgument(
                f"{self.model.__name__}.queue.a{name} needs an AsyncSession or an "
                f"AsyncConnection, got {type(target).__name__}{hint}"
            )
        return await target.run_sync(run)

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

    def _payload(self, values: Any) -> dict[str, Any]:
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

    def instance(self, row: dict[str, Any], extras: dict[str, Any]) -> M:
        """An instance of the class for a popped message's columns. With extras (a split
        queue's meta columns) its row exists: it is detached, as one loaded by a closed
        session; a ring's stays transient (its slot moves on)."""
        obj = self.mapper.class_manager.new_instance()
        for key, column in self._attributes:
            set_committed_value(obj, key, row.get(column))
        if extras:
            for name, value in extras.items():
                setattr(obj, name, value)
            make_transient_to_detached(obj)
        return obj

    # -- operations (FrontQueue's, on the session given first) --------------------------------

    push = session_method(FrontQueue.push)
    push_many = session_method(FrontQueue.push_many)
    ack = session_method(FrontQueue.ack)
    fail = session_method(FrontQueue.fail)
    extend = session_method(FrontQueue.extend)
    ack_by_id = session_method(FrontQueue.ack_by_id)
    fail_by_id = session_method(FrontQueue.fail_by_id)
    release = session_method(FrontQueue.release)
    retry = session_method(FrontQueue.retry)
    set_priority = session_method(FrontQueue.set_priority)
    cancel = session_method(FrontQueue.cancel)
    cancel_requested = session_method(FrontQueue.cancel_requested)
    rescue = session_method(FrontQueue.rescue)
    next_due = session_method(FrontQueue.next_due)
    compact = session_method(FrontQueue.compact)
    compact_if_grown = session_method(FrontQueue.compact_if_grown)
    upkeep = session_method(FrontQueue.upkeep)
    stats = session_method(FrontQueue.stats)
    pushed = session_method(FrontQueue.pushed)
    purge = session_method(FrontQueue.purge)
    count = session_method(FrontQueue.count)
    delete = session_method(FrontQueue.delete)

    def pop_batch(
        self,
        target: Target,
        n: int = 1,
        *,
        mode: DeliveryMode | str = DeliveryMode.AT_LEAST_ONCE,
        lease: dt.timedelta | None = None,
    ) -> list[M]:
        """:meth:`FrontQueue.pop_batch <dbqueue.front.FrontQueue.pop_batch>` on ``target``:
        up to ``n`` due items as instances of the class."""
        return self.on(target).pop_batch(n, mode=mode, lease=lease)

    def ack_pop(
        self, target: Target, items: TokenLike, n: int, *, lease: dt.timedelta | None = None
    ) -> tuple[int, list[M]]:
        """:meth:`FrontQueue.ack_pop <dbqueue.front.FrontQueue.ack_pop>` on ``target``."""
        return self.on(target).ack_pop(items, n, lease=lease)

    apush = async_session_method(FrontQueue.push)
    apush_many = async_session_method(FrontQueue.push_many)
    aack = async_session_method(FrontQueue.ack)
    afail = async_session_method(FrontQueue.fail)
    aextend = async_session_method(FrontQueue.extend)
    aack_by_id = async_session_method(FrontQueue.ack_by_id)
    afail_by_id = async_session_method(FrontQueue.fail_by_id)
    arelease = async_session_method(FrontQueue.release)
    aretry = async_session_method(FrontQueue.retry)
    aset_priority = async_session_method(FrontQueue.set_priority)
    acancel = async_session_method(FrontQueue.cancel)
    acancel_requested = async_session_method(FrontQueue.cancel_requested)
    arescue = async_session_method(FrontQueue.rescue)
    anext_due = async_session_method(FrontQueue.next_due)
    acompact = async_session_method(FrontQueue.compact)
    aupkeep = async_session_method(FrontQueue.upkeep)
    astats = async_session_method(FrontQueue.stats)
    apushed = async_session_method(FrontQueue.pushed)
    apurge = async_session_method(FrontQueue.purge)
    acount = async_session_method(FrontQueue.count)
    adelete = async_session_method(FrontQueue.delete)

    async def apop_batch(self, target: AsyncTarget, n: int = 1, **kw: Any) -> list[M]:
        """:meth:`pop_batch` on an AsyncSession or AsyncConnection."""
        run = functools.partial(self.pop_batch, n=n, **kw)
        return cast(list[M], await self._arun(target, "pop_batch", run))

    async def aack_pop(
        self, target: AsyncTarget, items: TokenLike, n: int, **kw: Any
    ) -> tuple[int, list[M]]:
        """:meth:`ack_pop` on an AsyncSession or AsyncConnection."""
        run = functools.partial(self.ack_pop, items=items, n=n, **kw)
        return cast(tuple[int, list[M]], await self._arun(target, "ack_pop", run))

    # -- queries ------------------------------------------------------------------------------

    def items(self, state: State | str | int | None = None) -> sa.Select[Any]:
        """A query of the items: rows of (instance, state, attempts, priority, run_at,
        lease_until), optionally of one state; run it with ``session.execute(...)``."""
        meta = self._meta()
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
        error in the instance's ``last_error`` (a consumer group's: rows of (instance,
        attempts, failed_at, last_error), the group's own error)."""
        meta = self._meta()
        key = self.mapper.primary_key[0]
        errors = [meta.c.last_error] if self.spec.group is not None else []
        return (
            sa.select(self.model, meta.c.attempts, meta.c.run_at.label("failed_at"), *errors)
            .join(meta, meta.c.id == key)
            .where(meta.c.state == int(State.FAILED))
            .order_by(meta.c.run_at.desc(), key.desc())
        )


class SAGroupQueue[M](SAQueue[M]):
    """Consumer group ``name`` of a class's queue (``Model.queue.group(name)``, see
    :meth:`SAQueue.group`): every operation of :class:`SAQueue` on the group's deliveries,
    with the group's core queue (:meth:`dbqueue.layout.Layout.group`) on the session's
    connection; ``items()`` and ``failed()`` query the group's meta table."""

    def __init__(self, parent: SAQueue[M], name: str) -> None:
        self._spec = parent.spec.for_group(name)  # InvalidArgument for a group not declared
        super().__init__(parent.model)
        self.parent, self.name = parent, name

    @property
    def spec(self) -> QueueSpec:
        """The group's core spec (:meth:`dbqueue.spec.QueueSpec.for_group`)."""
        return self._spec

    def group(self, name: str) -> SAGroupQueue[M]:
        return self.parent.group(name)

    def _bind(self, target: Target, *, commits: bool = False) -> tuple[AnyQueue, SAExecutor]:
        core, ex = self.parent._bind(target, commits=commits)
        return core.group(self.name), ex

    def _meta(self) -> sa.Table:
        tables: dict[str, sa.Table] = self.model.__queue_group_tables__  # type: ignore[attr-defined]
        return tables[self.name]
