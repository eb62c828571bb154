"""``Model.queue``: the queue API of a queue model, over the core queue of its layout (the
split queue here; :mod:`dbqueue_django.ring_queue` binds the ring queue)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Self

from django.db import models, router

from dbqueue.codec import payload_rows
from dbqueue.compaction import LOCK_TIMEOUT, CompactResult
from dbqueue.message import DeliveryMode, Message, RescueResult, State
from dbqueue.split import SplitQueue, TokenLike, data_row
from dbqueue.worker_queue import AnyQueue
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.spec import payload_fields, spec_for_model

if TYPE_CHECKING:
    from dbqueue.spec import QueueSpec
    from dbqueue_django.models import BaseQueueModel


#: The core queue per (model, alias, dialect): rendering SQL and building codecs happens once
#: per process, and a ring's pending pop claims (numbers of one database's pop sequence) are
#: shared by every thread that pops that ring in that database, and never by another database.
_CORES: dict[tuple[type[models.Model], str, str], AnyQueue] = {}


class DjangoQueue[M: "BaseQueueModel"]:
    """The queue of one model on one database alias (the router's choice unless ``using``).

    Every operation runs one core statement on Django's connection for the alias, so it joins
    the transaction the caller has open (``transaction.atomic()``).
    """

    #: The core queue class of the layout.
    layout: ClassVar[type[AnyQueue]] = SplitQueue

    def __init__(self, model: type[M], alias: str | None = None) -> None:
        self.model = model
        self._alias = alias

    def using(self, alias: str) -> Self:
        """The same queue on another database alias."""
        return type(self)(self.model, alias)

    @property
    def alias(self) -> str:
        return self._alias or router.db_for_write(self.model)

    @cached_property
    def spec(self) -> QueueSpec:
        """The validated core spec (raises InvalidSpec for a bad declaration)."""
        return spec_for_model(self.model)

    def _bind(self) -> tuple[AnyQueue, DjangoExecutor]:
        # An executor per call: Django connections are per thread, so one cannot be cached.
        ex = DjangoExecutor(self.alias)
        key = (self.model, ex.alias, ex.dialect.name)
        core = _CORES.get(key)
        if core is None:
            # setdefault: threads racing here all end up with the one core (and its claims).
            core = _CORES.setdefault(key, self.layout(self.spec, ex.dialect))
        return core, ex

    @property
    def core(self) -> AnyQueue:
        """The core queue behind this one, for this alias's database (used by the worker)."""
        return self._bind()[0]

    # -- payload translation ------------------------------------------------------------------

    @cached_property
    def _fields(self) -> dict[str, models.Field[Any, Any]]:
        """Accepted keyword -> field: by name and, for foreign keys, by attname too."""
        out: dict[str, models.Field[Any, Any]] = {}
        for f in payload_fields(self.model):
            out[f.name] = f
            out[str(f.attname)] = f
        return out

    def _payload(self, values: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        fields = self._fields
        for key, value in values.items():
            f = fields.get(key)
            if f is None:
                out[key] = value  # the codec names it as unknown
            elif f.is_relation and isinstance(value, models.Model):
                out[str(f.column)] = value.pk
            else:
                out[str(f.column)] = value
        return out

    @cached_property
    def _columns(self) -> tuple[list[str], list[str]]:
        concrete = self.model._meta.concrete_fields
        return [str(f.attname) for f in concrete], [str(f.column) for f in concrete]

    def _instances(self, messages: list[Message], alias: str) -> list[M]:
        attnames, columns = self._columns
        out = []
        for m in messages:
            row = self._row(m)
            obj = self.model.from_db(alias, attnames, [row[c] for c in columns])
            self._annotate(obj, m)
            out.append(obj)
        return out

    def _row(self, m: Message) -> dict[str, Any]:
        """The model's columns for a popped message."""
        return data_row(m)

    def _annotate(self, obj: M, m: Message) -> None:
        """Set what a popped message has beyond the model's columns (its meta columns)."""
        obj.attempts = m.attempts  # type: ignore[attr-defined]
        obj.priority = m.priority  # type: ignore[attr-defined]
        obj.run_at = m.run_at  # type: ignore[attr-defined]
        obj.lease_until = m.lease_until  # type: ignore[attr-defined]

    # -- operations ---------------------------------------------------------------------------

    def push(
        self,
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        **payload: Any,
    ) -> int:
        """Enqueue one item in the current transaction; return its id."""
        core, ex = self._bind()
        return core.push(ex, self._payload(payload), priority=priority, delay=delay, run_at=run_at)

    def push_many(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        priority: int = 0,
        delay: dt.timedelta | None = None,
        run_at: dt.datetime | None = None,
        batch_size: int | None = None,
    ) -> list[int]:
        """Enqueue many items, one statement per batch; ids in input order. All rows are
        validated first; nothing is written if any is invalid."""
        core, ex = self._bind()
        payloads = [self._payload(r) for r in payload_rows(rows)]
        return core.push_many(
            ex, payloads, priority=priority, delay=delay, run_at=run_at, batch_size=batch_size
        )

    def pop_batch(
        self,
        n: int = 1,
        *,
        mode: DeliveryMode | str = DeliveryMode.AT_LEAST_ONCE,
        lease: dt.timedelta | None = None,
    ) -> list[M]:
        """Take up to ``n`` due items as model instances with ``attempts``, ``priority``,
        ``run_at`` and ``lease_until`` set. See :class:`dbqueue.DeliveryMode` for ``mode``."""
        core, ex = self._bind()
        return self._instances(core.pop_batch(ex, n, mode=mode, lease=lease), ex.alias)

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
        return acked, self._instances(messages, ex.alias)

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
        core, ex = self._bind()
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
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
        """Rewrite the queue's tables to their live rows, giving back the dead versions a long
        transaction kept vacuum from removing (PostgreSQL; see dbqueue.compaction). Outside
        ``atomic()``: it takes a short exclusive lock, waited for at most ``lock_timeout``."""
        core, ex = self._bind()
        return core.compact(ex, lock_timeout=lock_timeout)

    def compact_if_grown(self) -> CompactResult | None:
        """:meth:`compact` if the tables grew enough since this process last compacted them
        (what ``runqueueworker`` does every second); None if it was not due."""
        core, ex = self._bind()
        return core.compact_if_grown(ex)

    def stats(self) -> dict[str, Any]:
        """Counts per state and ``oldest_ready_age`` (a timedelta, or None); for a ring also
        ``capacity`` and ``occupancy`` (the share of slots holding a message)."""
        core, ex = self._bind()
        return core.stats(ex).report()

    def purge(self, state: State | str | int | None = None) -> int:
        """Delete every item in ``state`` ("ready", "leased", "done", "failed"; None: all)."""
        core, ex = self._bind()
        return core.purge(ex, state)

    def delete(self, ids: Iterable[Any] | int) -> int:
        """Delete items (ids or instances) from both tables, whatever their state."""
        core, ex = self._bind()
        return core.delete(ex, ids)

    # -- querysets ----------------------------------------------------------------------------

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The data rows, annotated with their meta columns, optionally of one state."""
        # queue_meta is the reverse one-to-one of the generated meta model: the type checker
        # cannot see a relation added at class creation, hence Any.
        manager: Any = self.model._default_manager
        qs = manager.using(self.alias).annotate(
            state=models.F("queue_meta__state"),
            attempts=models.F("queue_meta__attempts"),
            priority=models.F("queue_meta__priority"),
            run_at=models.F("queue_meta__run_at"),
            lease_until=models.F("queue_meta__lease_until"),
        )
        if state is not None:
            qs = qs.filter(queue_meta__state=int(State.parse(state)))
        return qs  # type: ignore[no-any-return]

    def failed(self) -> models.QuerySet[M]:
        """Failed items with ``last_error``, ``attempts`` and ``run_at`` (when they failed)."""
        return self.items(State.FAILED).order_by("-run_at", "-id")


class QueueDescriptor:
    """``Model.queue``: a :class:`DjangoQueue` for the model it is read from."""

    def __init__(self, factory: type[DjangoQueue[Any]] = DjangoQueue) -> None:
        self.factory = factory

    def __get__[M: BaseQueueModel](self, instance: object, owner: type[M]) -> DjangoQueue[M]:
        queue = owner.__dict__.get("_dbqueue_queue")
        if queue is None:
            queue = self.factory(owner)
            type.__setattr__(owner, "_dbqueue_queue", queue)
        return queue
