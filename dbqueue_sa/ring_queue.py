"""``Model.queue`` of a ring queue class: :class:`SAQueue` over the core's ring queue.

The operations are the split queue's; what differs is how a popped message becomes an
instance (a row of the slot table, ``id`` = its number: a transient instance, since the slot
moves on) and where messages are listed: ``items()`` are slots holding a message,
``failed()`` the failed table.
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa

from dbqueue.message import State
from dbqueue.ring import RingQueue, SlotState, item_state
from dbqueue_sa.queue import (
    RingSessionQueue,
    SAGroupQueue,
    SAQueue,
    async_session_method,
    session_method,
)


class RingSAQueue[M](SAQueue[M]):
    """The queue of one ring class (see :class:`SAQueue` and
    :class:`~dbqueue.front.RingFrontQueue`)."""

    core_class = RingQueue
    bound = RingSessionQueue

    check = session_method(RingSessionQueue.check)
    acheck = async_session_method(RingSessionQueue.check)

    @property
    def group_class(self) -> type[SAGroupQueue[M]]:
        return RingSAGroupQueue

    def _side(self) -> sa.Table:
        """The side table :meth:`failed` and :meth:`waiting` read."""
        return cast(sa.Table, self.model.__queue_failed__)  # type: ignore[attr-defined]

    def items(self, state: State | str | int | None = None) -> sa.Select[Any]:
        """A query of the slots holding a message, in push order; ``state`` is "ready" or
        "leased" (failed messages, and those waiting out a retry's back-off, are in the side
        table: :meth:`failed` and :meth:`waiting`)."""
        self._refuse_fanned_out()
        model: Any = self.model
        query = sa.select(model).where(model.state != SlotState.EMPTY).order_by(model.seq)
        if state is None:
            return query
        return query.where(model.state == item_state(state))

    def failed(self) -> sa.Select[Any]:
        """The messages that used their last attempt (failed rows of the side table
        ``<table>_failed``), newest first, with ``last_error``, ``attempts`` and
        ``failed_at``."""
        self._refuse_fanned_out()
        table = self._side()
        return (
            sa.select(table)
            .where(table.c.state == int(State.FAILED))
            .order_by(table.c.failed_at.desc(), table.c.id.desc())
        )

    def waiting(self) -> sa.Select[Any]:
        """The messages out of the ring that will come back (rows of the side table): those
        waiting out a retry's back-off or put aside (state ready, due at ``run_at``), and
        leases a pusher moved aside (state leased); soonest due first. (A ring with consumer
        groups as a whole: the messages that spilled before any group got them.)"""
        table = self._side()
        due = sa.func.coalesce(table.c.run_at, table.c.lease_until)
        return sa.select(table).where(table.c.state != int(State.FAILED)).order_by(due, table.c.id)


class RingSAGroupQueue[M](SAGroupQueue[M], RingSAQueue[M]):
    """Consumer group ``name`` of a ring class's queue (``Model.queue.group(name)``): every
    operation of :class:`RingSAQueue` on the group's deliveries; :meth:`items` queries the
    group's state table, :meth:`failed` and :meth:`waiting` its side table."""

    def _side(self) -> sa.Table:
        tables: dict[str, sa.Table] = self.model.__queue_group_failed__  # type: ignore[attr-defined]
        return tables[self.name]

    def items(self, state: State | str | int | None = None) -> sa.Select[Any]:
        """A query of the messages this group holds in the ring, in push order: rows of
        (instance, the group's state, attempts, lease_until), the instance being the slot's
        (its payload); ``state`` is "ready" or "leased"."""
        model: Any = self.model
        rows = self._meta()
        query = (
            sa.select(model, rows.c.state, rows.c.attempts, rows.c.lease_until)
            .join(rows, rows.c.slot == model.slot)
            .where(rows.c.state != SlotState.EMPTY)
            .order_by(rows.c.seq)
        )
        if state is None:
            return query
        return query.where(rows.c.state == item_state(state))
