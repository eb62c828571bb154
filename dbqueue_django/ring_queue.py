"""``Model.queue`` of a ring queue model: :class:`DjangoQueue` over the core's ring queue.

The operations are the split queue's (``push``, ``pop_batch`` in all three delivery modes,
``ack``, ``fail``, ``extend``, ``rescue`` = the sweeper, ...). What differs is how a popped
message becomes a model instance (a row of the slot table, ``id`` = its number) and where
messages are listed: ``items()`` are slots holding a message, ``failed()`` the failed model.
"""

from __future__ import annotations

from typing import Any, Self, cast

from django.db import models
from django.db.models.functions import Coalesce

from dbqueue.errors import UnsupportedOperation
from dbqueue.front import AnyQueue, RingFrontQueue
from dbqueue.message import State
from dbqueue.ring import SlotState, item_state
from dbqueue_django.async_twins import async_twin
from dbqueue_django.executor import DjangoExecutor
from dbqueue_django.queue import DjangoGroupQueue, DjangoQueue
from dbqueue_django.ring_model import group_relation


class RingDjangoQueue[M: models.Model](DjangoQueue[M], RingFrontQueue[M]):
    """The queue of one ring model on one database alias (see :class:`DjangoQueue` and
    :class:`~dbqueue.front.RingFrontQueue`)."""

    acheck = async_twin(RingFrontQueue.check)

    def group(self, name: str) -> RingDjangoGroupQueue[M]:
        """The ring as consumer group ``name`` sees it (:meth:`DjangoQueue.group`), with the
        group's own :meth:`RingDjangoGroupQueue.items`, ``failed()`` and ``waiting()``."""
        return RingDjangoGroupQueue(self, name)

    def _refuse_fanned_out(self, query: str) -> None:
        """UnsupportedOperation for a query of a ring with consumer groups as a whole: each
        group has its own deliveries."""
        if self.spec.fans_out:
            raise UnsupportedOperation(
                f"{self.model.__name__} delivers each message to each of its consumer groups "
                f"({', '.join(self.spec.options.groups)}), each with its own state: ask one "
                f"group, {self.model.__name__}.queue.group(name).{query}()"
            )

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The slots holding a message, in push order; ``state`` is "ready" or "leased"
        (failed messages, and those waiting out a retry's back-off, are in the side table:
        :meth:`failed` and :meth:`waiting`). A ring with consumer groups: UnsupportedOperation,
        ``Model.queue.group(name).items()`` are a group's."""
        self._refuse_fanned_out("items")
        slots: Any = self.model._default_manager.using(self.alias)
        queryset: models.QuerySet[M] = slots.exclude(state=SlotState.EMPTY)
        if state is not None:
            queryset = queryset.filter(state=item_state(state))
        return queryset.order_by("seq")

    def _side(self) -> models.Manager[Any]:
        """The side table's model's manager (``<Model>Failed``, made with the ring model)."""
        model: Any = self.model
        manager: models.Manager[Any] = model.failed_model._default_manager
        return manager

    def failed(self) -> models.QuerySet[Any]:
        """The messages that used their last attempt (failed rows of the side table, the
        ``<Model>Failed`` model), newest first, with ``last_error``, ``attempts`` and
        ``failed_at``. A ring with consumer groups: UnsupportedOperation, each group has its
        own (``Model.queue.group(name).failed()``)."""
        self._refuse_fanned_out("failed")
        manager = self._side()
        return (
            manager.using(self.alias).filter(state=int(State.FAILED)).order_by("-failed_at", "-id")
        )

    def waiting(self) -> models.QuerySet[Any]:
        """The messages out of the ring that will come back (rows of the ``<Model>Failed``
        side table): waiting out a retry's back-off or put aside (state "waiting", due at
        ``run_at``), and leases a pusher moved aside ("leased aside"); soonest due first. (A
        ring with consumer groups as a whole: the messages that spilled before any group got
        them.)"""
        manager = self._side()
        due = Coalesce("run_at", "lease_until")
        return manager.using(self.alias).exclude(state=int(State.FAILED)).order_by(due.asc(), "id")


class RingDjangoGroupQueue[M: models.Model](DjangoGroupQueue[M], RingDjangoQueue[M]):
    """``Model.queue.group(name)`` of a ring model: consumer group ``name`` of the ring
    (:class:`DjangoGroupQueue`); :meth:`items` reads the group's state model
    (``<Model>Ring_<group>``), :meth:`failed` and :meth:`waiting` its side model
    (``<Model>Side_<group>``)."""

    front: RingDjangoQueue[M]
    # The ring's, reading the group's side model (DjangoGroupQueue's read a split's meta).
    failed = RingDjangoQueue.failed
    waiting = RingDjangoQueue.waiting

    def _refuse_fanned_out(self, query: str) -> None:
        pass  # a group's own queries

    # What GroupFront and DjangoGroupQueue say, for a ring's group (their definitions come
    # first; these only tell the type checker which of the bases' wins).

    def _bind(self) -> tuple[AnyQueue, DjangoExecutor]:
        core, ex = self.front._bind()
        return core.group(self.name), ex

    def group(self, name: str) -> RingDjangoGroupQueue[M]:
        return self.front.group(name)

    def using(self, alias: str) -> Self:
        """The same group of the ring on another database alias."""
        return cast(Self, self.front.using(alias).group(self.name))

    def _side(self) -> models.Manager[Any]:
        model: Any = self.model
        manager: models.Manager[Any] = model.queue_group_failed_models[self.name]._default_manager
        return manager

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The slots holding a message for this group, in the group's push order, annotated
        with the group's state of each: ``group_state`` ("ready" or "leased", what ``state``
        filters on), ``group_attempts``, ``group_lease_until`` and ``group_error`` (a slot's
        own ``state``, ``attempts``, ... are unused in a ring with groups)."""
        slots: models.QuerySet[M] = self.model._default_manager.using(self.alias).all()
        queryset = group_slots(slots, self.name)
        if state is not None:
            queryset = queryset.filter(group_state=item_state(state))
        return queryset.order_by("group_seq")


#: What :func:`group_slots` annotates a slot with, from its consumer group's row: annotation
#: (``group_<name>``) -> the state model's column.
GROUP_COLUMNS = {
    "state": "state",
    "attempts": "attempts",
    "lease_until": "lease_until",
    "error": "last_error",
    "seq": "seq",
}


def group_slots[Q: models.QuerySet[Any]](slots: Q, group: str) -> Q:
    """``slots`` (a queryset of a ring model with consumer groups) holding a message for
    ``group``, annotated with the group's row of each: ``group_state``, ``group_attempts``,
    ``group_lease_until``, ``group_error`` and ``group_seq``."""
    relation = group_relation(group)
    annotated = slots.annotate(
        **{
            f"group_{name}": models.F(f"{relation}__{column}")
            for name, column in GROUP_COLUMNS.items()
        }
    )
    return annotated.exclude(group_state=SlotState.EMPTY)
