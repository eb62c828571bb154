"""The queue of a declared model, written once for every front.

Django's ``Model.queue`` and SQLAlchemy's ``Model.queue`` are the same object: a
:class:`FrontQueue` that runs each operation as the core queue's, on the caller's connection,
with payload keywords in the model's names and popped messages as model instances. A front
supplies only what its framework decides:

- ``_bind``: the core queue and an executor over the caller's connection (Django: the alias's
  connection of this thread; SQLAlchemy: the session's);
- ``_payload``: keyword names to column names (and, in Django, related instances to keys);
- ``_instance``: a model instance from a popped message's columns;
- ``_own_transaction``, where the framework can tell: a transaction of the operation's own,
  for the two operations that must commit on their own.

:func:`shared_core` keeps one core queue per model and database in the process.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from dbqueue.arguments import TokenLike
from dbqueue.codec import payload_rows
from dbqueue.dialects.base import Dialect
from dbqueue.errors import TransactionStateError
from dbqueue.executor import Executor
from dbqueue.message import (
    CancelOutcome,
    DeliveryMode,
    Message,
    RescueResult,
    SelectorLike,
    State,
)
from dbqueue.ring import RingQueue
from dbqueue.spec import QueueSpec
from dbqueue.split import SplitQueue
from dbqueue.tracing import push_span
from dbqueue.unique import Pushed
from dbqueue.upkeep.compaction import LOCK_TIMEOUT, CompactResult
from dbqueue.upkeep.rounds import UpkeepReport

#: A core queue of either layout: both have the same operations.
AnyQueue = SplitQueue | RingQueue

#: The core queue per (model, database, dialect); see :func:`shared_core`.
_CORES: dict[tuple[object, str, str], AnyQueue] = {}

#: Why ``pop_batch(mode="at_most_once")`` refuses a connection in a transaction.
AT_MOST_ONCE_REFUSAL = (
    "pop_batch(mode='at_most_once') must commit on its own, but the session has a "
    "transaction open: a rollback would bring back items already handed out. Commit "
    "first (or call it on a fresh session), or use mode='transactional'"
)
#: Why ``compact()`` refuses a connection in a transaction.
COMPACT_REFUSAL = (
    "compact() and upkeep() run VACUUM, which PostgreSQL runs only outside a transaction, but the "
    "connection has one open: call it outside atomic() (Django), after a commit or on a "
    "fresh session (SQLAlchemy)"
)


def shared_core(
    owner: object, database: str, spec: QueueSpec, dialect: Dialect, core_class: type[AnyQueue]
) -> AnyQueue:
    """The one core queue of ``owner`` (a model class) on ``database`` in this process.

    SQL is rendered and codecs built once per process, and a ring's pending pop claims
    (numbers of one database's pop sequence) are shared by every thread that pops that ring in
    that database, and never by another database.
    """
    key = (owner, database, dialect.name)
    core = _CORES.get(key)
    if core is None:
        # setdefault: threads racing here all end up with the one core (and its claims).
        core = _CORES.setdefault(key, core_class(spec, dialect))
    return core


class FrontQueue[M](ABC):
    """The operations of one declared queue, in its model's terms (see the module)."""

    #: The core queue class of the queue's layout: :class:`~dbqueue.split.SplitQueue` or
    #: :class:`~dbqueue.ring.RingQueue`.
    core_class: ClassVar[type[AnyQueue]] = SplitQueue

    # -- what a front supplies ----------------------------------------------------------------

    @property
    @abstractmethod
    def spec(self) -> QueueSpec:
        """The validated core spec."""

    @abstractmethod
    def _bind(self) -> tuple[AnyQueue, Executor]:
        """The core queue and an executor over the caller's connection."""

    @abstractmethod
    def _instance(self, row: dict[str, Any], extras: dict[str, Any]) -> M:
        """A model instance from a popped message's columns (``row``, by column name) and
        what it has beyond them (``extras``, by attribute name)."""

    def _payload(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments as column names (an unknown one passes: the codec names it)."""
        return dict(values)

    @contextmanager
    def _own_transaction(self, refusal: str) -> Iterator[tuple[AnyQueue, Executor]]:
        """A transaction of the operation's own, committed when the block ends, refused
        (:class:`~dbqueue.errors.TransactionStateError` with ``refusal``) where the caller has
        one open. By default the caller's connection as it is: the core refuses what it
        must."""
        yield self._bind()

    @contextmanager
    def _outside_transaction(self, refusal: str) -> Iterator[tuple[AnyQueue, Executor]]:
        """The caller's connection with no transaction open, each statement committed on its
        own (what VACUUM needs), refused (:class:`~dbqueue.errors.TransactionStateError`
        with ``refusal``) where the caller has a transaction open. By default the caller's
        connection as it is (Django's, outside ``atomic()``, commits each statement)."""
        core, ex = self._bind()
        if ex.in_transaction():
            raise TransactionStateError(refusal)
        yield core, ex

    # -- consumer groups ----------------------------------------------------------------------

    def group(self, name: str) -> FrontQueue[M]:
        """The queue as consumer group ``name`` sees it (``QueueOptions.groups``): the same
        operations on that group's deliveries, on the same connection, with the same model
        instances; pushes go to the queue itself, which delivers each item to every group.
        InvalidArgument for a group the queue does not declare."""
        return GroupFront(self, name)

    # -- instances ----------------------------------------------------------------------------

    def instances(self, core: AnyQueue, messages: list[Message]) -> list[M]:
        """Popped messages of ``core`` as model instances."""
        return [self._instance(core.model_row(m), core.model_extras(m)) for m in messages]

    # -- operations ---------------------------------------------------------------------------

    def push(
        self,
        /,
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        unique_key: str | None = None,
        **payload: Any,
    ) -> Pushed:
        """Enqueue one item in the caller's transaction; return its id.

        In a unique queue (``QueueOptions.unique``, ``unique_scope``) an item that holds the
        push's key (``unique_key``, or the one its declared fields make) is returned instead and
        nothing is written: the id is a :class:`dbqueue.Pushed`, ``duplicate`` True.
        """
        core, ex = self._bind()
        with push_span(core.spec.table) as span:
            pushed = core.push(
                ex,
                self._payload(payload),
                priority=priority,
                delay=delay,
                run_at=run_at,
                unique_key=unique_key,
            )
            span.ids([pushed])
        return pushed

    def push_many(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        batch_size: int | None = None,
    ) -> list[Pushed]:
        """Enqueue many items, one statement per batch; ids in input order. All rows are
        validated first; nothing is written if any is invalid."""
        payloads = [self._payload(r) for r in payload_rows(rows)]
        core, ex = self._bind()
        with push_span(core.spec.table) as span:
            ids = core.push_many(
                ex, payloads, priority=priority, delay=delay, run_at=run_at, batch_size=batch_size
            )
            span.ids(ids)
        return ids

    def pop_batch(
        self,
        n: int = 1,
        *,
        mode: DeliveryMode | str = DeliveryMode.AT_LEAST_ONCE,
        lease: dt.timedelta | None = None,
    ) -> list[M]:
        """Take up to ``n`` due items as model instances, with ``attempts``, ``priority``,
        ``run_at`` and ``lease_until`` set.

        ``mode`` (see :class:`dbqueue.DeliveryMode`): ``at_least_once`` leases the items until
        they are acked (the lease is taken when the caller's transaction commits);
        ``transactional`` removes them in the caller's transaction (a rollback brings them
        back); ``at_most_once`` removes them and commits at once: it refuses a connection that
        has a transaction open.
        """
        if DeliveryMode.parse(mode) is not DeliveryMode.AT_MOST_ONCE:
            core, ex = self._bind()
            return self.instances(core, core.pop_batch(ex, n, mode=mode, lease=lease))
        with self._own_transaction(AT_MOST_ONCE_REFUSAL) as (core, ex):
            return self.instances(core, core.pop_batch(ex, n, mode=mode, lease=lease))

    def ack(self, items: TokenLike, *, strict: bool = True) -> list[int]:
        """Remove leased items whose work is done (fenced by their lease token); a queue
        with ``keep_done`` marks them done instead."""
        core, ex = self._bind()
        return core.ack(ex, items, strict=strict)

    def ack_pop(
        self, items: TokenLike, n: int, *, lease: dt.timedelta | None = None
    ) -> tuple[int, list[M]]:
        """Ack ``items`` (those still leased, as ``strict=False``) and lease up to ``n`` more
        in one transaction; return the number acked and the new items (what a worker does)."""
        core, ex = self._bind()
        acked, messages = core.ack_pop(ex, items, n, lease=lease)
        return acked, self.instances(core, messages)

    def fail(
        self,
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
        core, ex = self._bind()
        return core.fail(ex, items, error, delay=delay, strict=strict, retry=retry)

    def extend(self, items: TokenLike, *, lease: dt.timedelta | None = None) -> list[int]:
        """Extend the leases of items still held (a heartbeat for slow work)."""
        core, ex = self._bind()
        return core.extend(ex, items, lease=lease)

    def ack_by_id(self, ids: Iterable[Any] | int) -> list[int]:
        """Operator's ack: settle leased items by id (ids or instances), whichever delivery
        holds them now; a consumer acks what it popped with :meth:`ack`."""
        core, ex = self._bind()
        return core.ack_by_id(ex, ids)

    def fail_by_id(self, ids: Iterable[Any] | int, error: str) -> dict[int, State]:
        """Operator's fail: record a failed attempt of leased items by id, whichever delivery
        holds them now; a consumer fails what it popped with :meth:`fail`."""
        core, ex = self._bind()
        return core.fail_by_id(ex, ids, error)

    def release(self, items: TokenLike) -> list[int]:
        """Hand back leased items unstarted: ready again at once, their attempt not counted
        (what a stopping worker does with the rest of its batch). The token of a released
        item must not be used again."""
        core, ex = self._bind()
        return core.release(ex, items)

    def retry(self, ids: Iterable[Any] | int) -> int:
        """Failed items (ids or instances) back to ready with attempts reset."""
        core, ex = self._bind()
        return core.retry(ex, ids)

    def cancel(self, ids: Iterable[Any] | int) -> dict[int, CancelOutcome]:
        """Cancel items (ids or instances): a ready or scheduled one never runs; a leased
        one's handler is asked to stop (:meth:`cancel_requested`) and its ack records it
        cancelled. Returns each id's :class:`~dbqueue.message.CancelOutcome` (a ring queue
        raises :class:`~dbqueue.errors.UnsupportedOperation`)."""
        core, ex = self._bind()
        return core.cancel(ex, ids)

    def cancel_requested(self, item: Any) -> bool:
        """Whether ``item`` (an instance or an id) was asked to stop: what a long handler
        checks now and then. False on a ring queue."""
        core, ex = self._bind()
        return core.cancel_requested(ex, item)

    def set_priority(self, ids: Iterable[Any] | int, priority: int) -> int:
        """Give items (ids or instances, any state) a new priority; return how many."""
        core, ex = self._bind()
        return core.set_priority(ex, ids, priority)

    def rescue(self, *, batch: int | None = None) -> RescueResult:
        """Expired leases back to ready (or failed after max_attempts)."""
        core, ex = self._bind()
        return core.rescue(ex, batch=batch)

    def next_due(self) -> dt.datetime | None:
        """When the queue next has work that no push announces: an item's delay or back-off
        ends, or a lease expires; None if there is none (what an idle worker sleeps until)."""
        core, ex = self._bind()
        return core.next_due(ex)

    def compact(self, *, lock_timeout: dt.timedelta = LOCK_TIMEOUT) -> CompactResult:
        """Give the queue's tables back what a long transaction made them grow by, once it has
        ended (PostgreSQL; see :mod:`dbqueue.upkeep.compaction`): a plain VACUUM, then, if
        what is left is small, VACUUM FULL, which copies every row version some snapshot may
        still see, so that no backup, replica or report sees the queue any different. It runs
        outside any transaction (outside ``atomic()``, or on a session with none open), and
        never waits for a table's lock: it tries again for up to ``lock_timeout`` while other
        statements hold one; a skip is in the result."""
        with self._outside_transaction(COMPACT_REFUSAL) as (core, ex):
            return core.compact(ex, lock_timeout=lock_timeout)

    def compact_if_grown(self) -> CompactResult | None:
        """:meth:`compact` if the tables grew enough since this process last compacted them
        (what a worker does every ``CHECK_EVERY`` seconds); None if it was not due."""
        with self._outside_transaction(COMPACT_REFUSAL) as (core, ex):
            return core.compact_if_grown(ex)

    def upkeep(self) -> UpkeepReport:
        """A round of the queue's upkeep (:mod:`dbqueue.upkeep`): a split queue's heads
        advanced, its tables compacted if a long transaction grew them. What a worker's
        maintenance thread runs every ``CHECK_EVERY`` seconds, and the keeper for a process
        that consumes the queue through this API (:mod:`dbqueue.upkeep.keeper`); outside any
        transaction, like :meth:`compact`."""
        with self._outside_transaction(COMPACT_REFUSAL) as (core, ex):
            return core.upkeep(ex)

    def stats(self) -> dict[str, Any]:
        """Counts per state and ``oldest_ready_age`` (a timedelta, or None); for a ring also
        ``capacity`` and ``occupancy`` (the share of slots holding a message)."""
        core, ex = self._bind()
        return core.stats(ex).report()

    def pushed(self) -> int:
        """How many items were ever pushed, read from the database (every process's pushes
        count): see :meth:`dbqueue.split.SplitQueue.pushed` and
        :meth:`dbqueue.ring.RingQueue.pushed`."""
        core, ex = self._bind()
        return core.pushed(ex)

    def purge(
        self,
        state: SelectorLike | None = None,
        *,
        older_than: dt.timedelta | None = None,
    ) -> int:
        """Delete every item in ``state`` ("ready": due now, "scheduled": due later,
        "leased", "done", "failed", "cancelled"; None: all), only those older than
        ``older_than`` if given (pushed that long ago; done, failed and cancelled ones:
        finished that long ago). See
        :class:`~dbqueue.message.StateSelector`."""
        core, ex = self._bind()
        return core.purge(ex, state, older_than=older_than)

    def count(
        self,
        state: SelectorLike | None = None,
        *,
        older_than: dt.timedelta | None = None,
    ) -> int:
        """How many items :meth:`purge` would delete now with the same arguments."""
        core, ex = self._bind()
        return core.count(ex, state, older_than=older_than)

    def delete(self, ids: Iterable[Any] | int) -> int:
        """Delete items (ids or instances) from both tables, whatever their state."""
        core, ex = self._bind()
        return core.delete(ex, ids)


class GroupFront[M](FrontQueue[M]):
    """One consumer group of a front's queue (:meth:`FrontQueue.group`): the front's
    connection, payload names and instances, the group's core queue."""

    def __init__(self, front: FrontQueue[M], name: str) -> None:
        self._spec = front.spec.for_group(name)  # InvalidArgument for a group not declared
        self.front, self.name = front, name

    @property
    def spec(self) -> QueueSpec:
        return self._spec

    def _bind(self) -> tuple[AnyQueue, Executor]:
        core, ex = self.front._bind()
        return _group_core(core, self.name), ex

    def _instance(self, row: dict[str, Any], extras: dict[str, Any]) -> M:
        return self.front._instance(row, extras)

    def _payload(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return self.front._payload(values)

    def instances(self, core: AnyQueue, messages: list[Message]) -> list[M]:
        return self.front.instances(core, messages)

    @contextmanager
    def _own_transaction(self, refusal: str) -> Iterator[tuple[AnyQueue, Executor]]:
        with self.front._own_transaction(refusal) as (core, ex):
            yield _group_core(core, self.name), ex

    @contextmanager
    def _outside_transaction(self, refusal: str) -> Iterator[tuple[AnyQueue, Executor]]:
        with self.front._outside_transaction(refusal) as (core, ex):
            yield _group_core(core, self.name), ex

    def group(self, name: str) -> FrontQueue[M]:
        return self.front.group(name)


def _group_core(core: AnyQueue, name: str) -> AnyQueue:
    """Consumer group ``name`` of ``core``."""
    return core.group(name)


class ExecutorFront[M](FrontQueue[M]):
    """A core queue on one executor, as a front: what the worker runs on its own
    connections. Popped messages stay :class:`~dbqueue.message.Message` objects, or become
    instances made by ``make(row, extras)`` (a front's ``_instance``)."""

    def __init__(
        self,
        core: AnyQueue,
        ex: Executor,
        make: Callable[[dict[str, Any], dict[str, Any]], M] | None = None,
    ) -> None:
        self.core, self.ex, self._make = core, ex, make

    @property
    def spec(self) -> QueueSpec:
        return self.core.spec

    def _bind(self) -> tuple[AnyQueue, Executor]:
        return self.core, self.ex

    def _instance(self, row: dict[str, Any], extras: dict[str, Any]) -> M:
        assert self._make is not None  # instances() returns the messages themselves
        return self._make(row, extras)

    def instances(self, core: AnyQueue, messages: list[Message]) -> list[M]:
        if self._make is None:
            return messages  # type: ignore[return-value]  # M is Message without make: as is
        return super().instances(core, messages)


class RingFrontQueue[M](FrontQueue[M]):
    """The queue of a declared ring. A push into a full ring spills, raises
    :class:`~dbqueue.errors.QueueFull` or waits, as its ``when_full`` says; ``priority=`` and
    ``delay=`` are refused (a ring delivers in push order)."""

    core_class = RingQueue

    def check(self) -> None:
        """Raise RingCapacityMismatch unless the table has exactly ``capacity`` slots."""
        core, ex = self._bind()
        assert isinstance(core, RingQueue)
        core.check(ex)
