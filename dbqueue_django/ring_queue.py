"""``Model.queue`` of a ring queue model: :class:`DjangoQueue` over the core's ring queue.

The operations are the split queue's (``push``, ``pop_batch`` in all three delivery modes,
``ack``, ``fail``, ``extend``, ``rescue`` = the sweeper, ...). What differs is how a popped
message becomes a model instance (a row of the slot table, ``id`` = its number) and where
messages are listed: ``items()`` are slots holding a message, ``failed()`` the failed model.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Coalesce

from dbqueue.front import RingFrontQueue
from dbqueue.message import State
from dbqueue.ring import SlotState, item_state
from dbqueue_django.async_twins import async_twin
from dbqueue_django.queue import DjangoQueue


class RingDjangoQueue[M: models.Model](DjangoQueue[M], RingFrontQueue[M]):
    """The queue of one ring model on one database alias (see :class:`DjangoQueue` and
    :class:`~dbqueue.front.RingFrontQueue`)."""

    acheck = async_twin(RingFrontQueue.check)

    def items(self, state: State | str | int | None = None) -> models.QuerySet[M]:
        """The slots holding a message, in push order; ``state`` is "ready" or "leased"
        (failed messages, and those waiting out a retry's back-off, are in the side table:
        :meth:`failed` and :meth:`waiting`)."""
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
        ``failed_at``."""
        manager = self._side()
        return (
            manager.using(self.alias).filter(state=int(State.FAILED)).order_by("-failed_at", "-id")
        )

    def waiting(self) -> models.QuerySet[Any]:
        """The messages out of the ring that will come back (rows of the ``<Model>Failed``
        side table): waiting out a retry's back-off or put aside (state "waiting", due at
        ``run_at``), and leases a pusher moved aside ("leased aside"); soonest due first."""
        manager = self._side()
        due = Coalesce("run_at", "lease_until")
        return manager.using(self.alias).exclude(state=int(State.FAILED)).order_by(due.asc(), "id")
