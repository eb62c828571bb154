"""``Model.queue`` of a ring queue model: :class:`DjangoQueue` over the core's ring queue.

The operations are the split queue's (``push``, ``pop_batch`` in all three delivery modes,
``ack``, ``fail``, ``extend``, ``rescue`` = the sweeper, ...). What differs is how a popped
message becomes a model instance (a row of the slot table, ``id`` = its number) and where
messages are listed: ``items()`` are slots holding a message, ``failed()`` the failed model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models.functions import Coalesce

from dbqueue.message import Message, State
from dbqueue.ring import RingQueue, SlotState, item_state, slot_row
from dbqueue_django.queue import DjangoQueue

if TYPE_CHECKING:
    from dbqueue_django.models import RingQueueModel


class RingDjangoQueue[M: "RingQueueModel"](DjangoQueue[M]):
    """The queue of one ring model on one database alias (see :class:`DjangoQueue`).

    Pushes wait up to ``push_timeout`` for a free slot, then raise
    :class:`~dbqueue.errors.QueueFull`; ``priority=`` and ``delay=`` are refused (a ring
    delivers in push order).
    """

    layout = RingQueue

    def _row(self, m: Message) -> dict[str, Any]:
        capacity = self.spec.options.capacity
        assert capacity is not None  # a ring spec always has one
        return slot_row(m, capacity)

    def _annotate(self, obj: M, m: Message) -> None:
        """Nothing to add: attempts and lease_until are columns of the slot table."""

    def check(self) -> None:
        """Raise RingCapacityMismatch unless the table has exactly ``capacity`` slots."""
        core, ex = self._bind()
        assert isinstance(core, RingQueue)
        core.check(ex)

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The slots holding a message, in push order; ``state`` is "ready" or "leased"
        (failed messages, and those waiting out a retry's back-off, are in the side table:
        :meth:`failed` and :meth:`waiting`)."""
        slots: Any = self.model._default_manager.using(self.alias)
        queryset: models.QuerySet[M] = slots.exclude(state=SlotState.EMPTY)
        if state is not None:
            queryset = queryset.filter(state=item_state(state))
        return queryset.order_by("seq")

    def failed(self) -> models.QuerySet[Any]:
        """The messages that used their last attempt (failed rows of the side table, the
        ``<Model>Failed`` model), newest first, with ``last_error``, ``attempts`` and
        ``failed_at``."""
        manager = self.model.failed_model._default_manager
        return (
            manager.using(self.alias).filter(state=int(State.FAILED)).order_by("-failed_at", "-id")
        )

    def waiting(self) -> models.QuerySet[Any]:
        """The messages out of the ring that will come back (rows of the ``<Model>Failed``
        side table): waiting out a retry's back-off or put aside (state "waiting", due at
        ``run_at``), and leases a pusher moved aside ("leased aside"); soonest due first."""
        manager = self.model.failed_model._default_manager
        due = Coalesce("run_at", "lease_until")
        return manager.using(self.alias).exclude(state=int(State.FAILED)).order_by(due.asc(), "id")
