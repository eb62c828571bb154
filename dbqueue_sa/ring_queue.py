"""``Model.queue`` of a ring queue class: :class:`SAQueue` over the core's ring queue.

The operations are the split queue's; what differs is how a popped message becomes an
instance (a row of the slot table, ``id`` = its number: a transient instance, since the slot
moves on) and where messages are listed: ``items()`` are slots holding a message,
``failed()`` the failed table.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from dbqueue.message import Message, State
from dbqueue.ring import RingQueue, SlotState, item_state, slot_row
from dbqueue_sa.queue import SAQueue, Target


class RingSAQueue[M](SAQueue[M]):
    """The queue of one ring class (see :class:`SAQueue`). Pushes wait up to
    ``push_timeout`` for a free slot, then raise :class:`~dbqueue.errors.QueueFull`;
    ``priority=`` and ``delay=`` are refused (a ring delivers in push order)."""

    layout = RingQueue

    def _row(self, m: Message) -> dict[str, Any]:
        capacity = self.spec.options.capacity
        assert capacity is not None  # a ring spec always has one
        return slot_row(m, capacity)

    def _annotate(self, obj: Any, m: Message) -> None:
        """Nothing to add: attempts and lease_until are columns of the slot table."""

    def check(self, target: Target) -> None:
        """Raise RingCapacityMismatch unless the table has exactly ``capacity`` slots."""
        core, ex = self._bind(target)
        assert isinstance(core, RingQueue)
        core.check(ex)

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

    async def acheck(self, target: Any) -> None:
        """:meth:`check` on an AsyncSession."""
        await self._arun(target, self.check)
