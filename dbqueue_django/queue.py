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

from dbqueue.errors import UnsupportedOperation
from dbqueue.front import AnyQueue, FrontQueue, GroupFront, shared_core
from dbqueue.message import State
from dbqueue.spec import QueueSpec
from dbqueue.unique import UNIQUE_KEY_COLUMN
from dbqueue_django.async_twins import async_twin, refuse_async_context
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.spec import has_unique_keys, meta_relation, payload_fields, spec_for_model


class AsyncFront[M](FrontQueue[M]):
    """A front with the ``a``-prefixed twins of its operations
    (:mod:`dbqueue_django.async_twins`): ``Model.queue`` and its consumer groups."""

    # The operations of the SQLAlchemy front's a-methods, so async code reads the same on
    # both: what a request pushes or reads, and what an async consumer or operator does.
    # Not compact_if_grown, a worker's chore. (The querysets of items() and failed() have
    # Django's own: acount, ...)

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
    aupkeep = async_twin(FrontQueue.upkeep)
    astats = async_twin(FrontQueue.stats)
    apushed = async_twin(FrontQueue.pushed)
    apurge = async_twin(FrontQueue.purge)
    acount = async_twin(FrontQueue.count)
    adelete = async_twin(FrontQueue.delete)


class DjangoQueue[M: models.Model](AsyncFront[M]):
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

    # -- consumer groups ----------------------------------------------------------------------

    def group(self, name: str) -> DjangoGroupQueue[M]:
        """The queue as consumer group ``name`` sees it (:meth:`FrontQueue.group`), with its
        own :meth:`DjangoGroupQueue.items` and ``failed()`` querysets."""
        return DjangoGroupQueue(self, name)

    # -- querysets ----------------------------------------------------------------------------

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The data rows, annotated with their meta columns (a unique queue's ``unique_key``
        too), optionally of one state. A queue with consumer groups has a state per group:
        UnsupportedOperation, ``Model.queue.group(name).items()`` are a group's."""
        if self.spec.fans_out:
            raise UnsupportedOperation(
                f"{self.model.__name__} delivers each item to each of its consumer groups "
                f"({', '.join(self.spec.options.groups)}), each with its own state: ask one "
                f"group, {self.model.__name__}.queue.group(name).items()"
            )
        unique = [UNIQUE_KEY_COLUMN] if has_unique_keys(self.model) else []
        return annotated_items(self.model, self.alias, meta_relation(), state, unique)

    def failed(self) -> models.QuerySet[M]:
        """Failed items with ``last_error``, ``attempts`` and ``run_at`` (when they failed)."""
        return self.items(State.FAILED).order_by("-run_at", "-id")


def annotated_items[M: models.Model](
    model: type[M],
    alias: str,
    relation: str,
    state: State | str | int | None,
    extra: dict[str, str] | list[str],
) -> models.QuerySet[M]:
    """``model``'s data rows on ``alias`` annotated with the meta columns reached through
    ``relation`` (the meta model's reverse one-to-one), and ``extra`` meta columns (a mapping:
    annotation -> column), optionally of one state."""
    # The relation is added at class creation: the type checker cannot see it, hence Any.
    manager: Any = model._default_manager
    named = extra if isinstance(extra, dict) else {name: name for name in extra}
    columns = {name: name for name in ("state", "attempts", "priority", "run_at", "lease_until")}
    qs = manager.using(alias).annotate(
        **{name: models.F(f"{relation}__{column}") for name, column in {**columns, **named}.items()}
    )
    if state is not None:
        qs = qs.filter(**{f"{relation}__state": int(State.parse(state))})
    return qs  # type: ignore[no-any-return]


class DjangoGroupQueue[M: models.Model](GroupFront[M], AsyncFront[M]):
    """``Model.queue.group(name)``: consumer group ``name`` of a model's queue
    (:class:`dbqueue.front.GroupFront`) on the queue's database alias, with the group's
    querysets."""

    front: DjangoQueue[M]

    def __init__(self, front: DjangoQueue[M], name: str) -> None:
        super().__init__(front, name)
        self.model = front.model

    def using(self, alias: str) -> DjangoGroupQueue[M]:
        """The same group of the queue on another database alias."""
        return self.front.using(alias).group(self.name)

    @property
    def alias(self) -> str:
        return self.front.alias

    @property
    def core(self) -> AnyQueue:
        """The group's core queue for this alias's database (see :attr:`DjangoQueue.core`)."""
        return self.front.core.group(self.name)

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The data rows this group holds, annotated with the group's meta columns (its own
        last error as ``group_error``: the data row's ``last_error`` is unused), optionally of
        one state."""
        relation = meta_relation(self.name)
        return annotated_items(
            self.model, self.alias, relation, state, {"group_error": "last_error"}
        ).filter(**{f"{relation}__isnull": False})

    def failed(self) -> models.QuerySet[M]:
        """The group's failed items with ``group_error``, ``attempts`` and ``run_at`` (when
        they failed)."""
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
