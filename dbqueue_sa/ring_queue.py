"""``Model.queue`` of a ring queue class: :class:`SAQueue` over the core's ring queue.

The operations are the split queue's; what differs is how a popped message becomes an
instance (a row of the slot table, ``id`` = its number: a transient instance, since the slot
moves on) and where messages are listed: ``items()`` are slots holding a message,
``failed()`` the failed table.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from dbqueue.message import State
from dbqueue.ring import RingQueue, SlotState, item_state
from dbqueue_sa.queue import RingSessionQueue, SAQueue, async_session_method, session_method


class RingSAQueue[M](SAQueue[M]):
    """The queue of one ring class (see :class:`SAQueue` and
    :class:`~dbqueue.front.RingFrontQueue`)."""

    core_class = RingQueue
    bound = RingSessionQueue

    check = session_method(RingSessionQueue.check)
    acheck = async_session_method(RingSessionQueue.check)

    def items(self, state: State | str | int | None = None) -> sa.Select[Any]:
        """A query of the slots holding a message, in push order; ``state`` is "ready" or
        "leased" (failed messages, and those waiting out a retry's back-off, are in the side
        table: :meth:`failed` and :meth:`waiting`)."""
        model: Any = self.model
        query = sa.select(model).where(model.state != SlotState.EMPTY).order_by(model.seq)
        if state is None:
            return query
        return query.where(model.state == item_state(state))

    def failed(self) -> sa.Select[Any]:
        """The messages that used their last attempt (failed rows of the side table
        ``<table>_failed``), newest first, with ``last_error``, ``attempts`` and
        ``failed_at``."""
        table = self.model.__queue_failed__  # type: ignore[attr-defined]
        return (
            sa.select(table)
            .where(table.c.state == int(State.FAILED))
            .order_by(table.c.failed_at.desc(), table.c.id.desc())
        )

    def waiting(self) -> sa.Select[Any]:
        """The messages out of the ring that will come back (rows of the side table): those
        waiting out a retry's back-off or put aside (state ready, due at ``run_at``), and
        leases a pusher moved aside (state leased); soonest due first."""
        table = self.model.__queue_failed__  # type: ignore[attr-defined]
        due = sa.func.coalesce(table.c.run_at, table.c.lease_until)
        return sa.select(table).where(table.c.state != int(State.FAILED)).order_by(due, table.c.id)
