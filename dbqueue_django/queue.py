"""``Model.queue``: the queue API of a queue model (:class:`dbqueue.front.FrontQueue`) on
Django's connection for a database alias; :mod:`dbqueue_django.ring_queue` binds the ring.

The ``a``-prefixed methods (``apush``, ``apop_batch``, ...) are the same operations for async
views and consumers, run as Django runs its async ORM methods: see
:mod:`dbqueue_django.async_twins`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Self

from django.db import models, router

from dbqueue.front import AnyQueue, FrontQueue, shared_core
from dbqueue.message import State
from dbqueue.spec import QueueSpec
from dbqueue.unique import UNIQUE_KEY_COLUMN
from dbqueue_django.async_twins import async_twin, refuse_async_context
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.spec import has_unique_keys, payload_fields, spec_for_model


class DjangoQueue[M: models.Model](FrontQueue[M]):
    """The queue of one model on one database alias (the router's choice unless ``using``).

    Every operation runs one core statement on Django's connection for the alias, so it joins
    the transaction the caller has open (``transaction.atomic()``). In async code, await the
    ``a``-prefixed twin of an operation (``await Model.queue.apush(...)``): it runs on the
    connection of the request's other ORM calls; outside a transaction it commits at once.
    """

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
        # Every operation binds before its first statement: refused here in async code with a
        # hint at its twin, before Django's connection refuses it with a generic message.
        refuse_async_context(self.model)
        return self._bind_any_context()

    def _bind_any_context(self) -> tuple[AnyQueue, DjangoExecutor]:
        # An executor per call: Django connections are per thread, so one cannot be cached.
        ex = DjangoExecutor(self.alias)
        return shared_core(self.model, ex.alias, self.spec, ex.dialect, self.core_class), ex

    @property
    def core(self) -> AnyQueue:
        """The core queue behind this one, for this alias's database (used by the worker; it
        runs no statement, so async code may ask for it too)."""
        return self._bind_any_context()[0]

    # -- payloads and instances ---------------------------------------------------------------

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

    def _instance(self, row: dict[str, Any], extras: dict[str, Any]) -> M:
        attnames, columns = self._columns
        obj = self.model.from_db(self.alias, attnames, [row[c] for c in columns])
        for name, value in extras.items():
            setattr(obj, name, value)
        return obj

    # -- async twins (the querysets of items() and failed() have Django's own: acount, ...) --
    # The operations of the SQLAlchemy front's a-methods, so async code reads the same on
    # both: what a request pushes or reads, and what an async consumer or operator does.
    # Not compact_if_grown, a worker's chore.

    apush = async_twin(FrontQueue.push)
    apush_many = async_twin(FrontQueue.push_many)
    apop_batch = async_twin(FrontQueue.pop_batch)
    aack = async_twin(FrontQueue.ack)
    aack_pop = async_twin(FrontQueue.ack_pop)
    afail = async_twin(FrontQueue.fail)
    aextend = async_twin(FrontQueue.extend)
    arelease = async_twin(FrontQueue.release)
    aack_by_id = async_twin(FrontQueue.ack_by_id)
    afail_by_id = async_twin(FrontQueue.fail_by_id)
    aretry = async_twin(FrontQueue.retry)
    aset_priority = async_twin(FrontQueue.set_priority)
    acancel = async_twin(FrontQueue.cancel)
    acancel_requested = async_twin(FrontQueue.cancel_requested)
    arescue = async_twin(FrontQueue.rescue)
    anext_due = async_twin(FrontQueue.next_due)
    acompact = async_twin(FrontQueue.compact)
    astats = async_twin(FrontQueue.stats)
    apushed = async_twin(FrontQueue.pushed)
    apurge = async_twin(FrontQueue.purge)
    acount = async_twin(FrontQueue.count)
    adelete = async_twin(FrontQueue.delete)

    # -- querysets ----------------------------------------------------------------------------

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The data rows, annotated with their meta columns (a unique queue's ``unique_key``
        too), optionally of one state."""
        # queue_meta is the reverse one-to-one of the generated meta model: the type checker
        # cannot see a relation added at class creation, hence Any.
        manager: Any = self.model._default_manager
        unique = [UNIQUE_KEY_COLUMN] if has_unique_keys(self.model) else []
        qs = manager.using(self.alias).annotate(
            state=models.F("queue_meta__state"),
            attempts=models.F("queue_meta__attempts"),
            priority=models.F("queue_meta__priority"),
            run_at=models.F("queue_meta__run_at"),
            lease_until=models.F("queue_meta__lease_until"),
            **{name: models.F(f"queue_meta__{name}") for name in unique},
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

    def __get__[M: models.Model](self, instance: object, owner: type[M]) -> DjangoQueue[M]:
        queue = owner.__dict__.get("_dbqueue_queue")
        if queue is None:
            queue = self.factory(owner)
            type.__setattr__(owner, "_dbqueue_queue", queue)
        return queue
