"""The ring queue: the push, pop and sweeper parts, and the operations of an administrator
(stats, purge, delete, capacity checks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dbqueue.arguments import TokenLike
from dbqueue.errors import InvalidArgument, QueueTableMissing, RingNotEmpty, UnsupportedOperation
from dbqueue.executor import Executor
from dbqueue.message import CancelOutcome, Message, QueueStats, StateSelector
from dbqueue.ring.pop import RingPop
from dbqueue.ring.push import PUSH_OPERATIONS, RingPush
from dbqueue.ring.states import SLOT_OF_SELECTOR, CountersRow, SlotState
from dbqueue.ring.sweeper import RingSweeper
from dbqueue.rows import NumberRow, StatsRow
from dbqueue.schema import ring_refill_statements


class RingQueue(RingPush, RingPop, RingSweeper):
    """Operations on one ring queue for one dialect (see :mod:`dbqueue.ring`). Thread-safe: it
    holds no connection, only the process's pending pop claims.

    With consumer groups (``QueueOptions.groups``, see :mod:`dbqueue.ring`), the queue pushes
    and :meth:`group` pops: ``queue.group(name)`` is a RingQueue with every operation of a
    ring on that group's deliveries."""

    fan_out_operations = frozenset(
        {
            *PUSH_OPERATIONS,
            # The queue's own side table: messages that spilled before any group got them,
            # pushed into the ring (to every group) as slots free up.
            "return", "due", "return_one", "delete_side", "counters", "notify",
        }
    )  # fmt: skip
    push_operations = PUSH_OPERATIONS

    def set_priority(self, ex: Executor, ids: Iterable[TokenLike] | int, priority: int) -> int:
        """Ring queues have no priorities: always raises InvalidArgument."""
        raise InvalidArgument(
            f"ring queue {self.spec.table!r} delivers in push order; it has no priorities"
        )

    def cancel(self, ex: Executor, ids: Iterable[TokenLike] | int) -> dict[int, CancelOutcome]:
        """Ring queues have no cancellation: always raises UnsupportedOperation."""
        raise UnsupportedOperation(
            f"ring queue {self.spec.table!r} delivers in push order and has no cancellation; "
            f"use a split queue to cancel items, or delete() a message not yet popped"
        )

    def cancel_requested(self, ex: Executor, item: TokenLike) -> bool:
        """Always False: nothing can request a ring message's cancellation."""
        return False

    def stats(self, ex: Executor) -> QueueStats:
        """Counts per state (ready: in a slot or due to be pushed again; ``scheduled``: waiting
        out a retry's back-off; leased: in a slot or moved aside), the age of the oldest ready
        message, and the ring's capacity (its slot count in the database) and slots in use."""
        return self._stats(ex)

    def pushed(self, ex: Executor) -> int:
        """How many numbers the push counter handed out: what a metrics scrape reports as
        ``dbqueue_pushed_total``. It follows the traffic into the ring rather than counting
        pushes exactly: a message put back at the tail (a retry whose back-off ended) takes
        a number again, and a spilled message takes one as it spills on PostgreSQL (a
        rolled-back push too), as it moves into the ring on SQLite."""
        (row,) = self._rows(ex, "counters", {}, CountersRow)
        return int(row.push_next)

    def next_number(self, ex: Executor) -> int:
        """The first number above every number the counters handed out: where a capacity
        change numbers the new slots on from (the pop counter may run a little ahead of the
        push counter, so the larger one is taken)."""
        (row,) = self._rows(ex, "counters", {}, CountersRow)
        return max(int(row.push_next), int(row.pop_next))

    # -- what migrations run (Django's RingSlots, the Alembic ring operations) ----------------

    def refill_statements(self, ex: Executor | None) -> list[str]:
        """The statements that give an empty ring table its slots and new counters, numbered
        on from the old counters where there are some (a capacity change), from 0 where there
        are none, or where nothing can be read (``ex`` None: an offline migration)."""
        start = 0 if ex is None else self._next_number_or_zero(ex)
        return ring_refill_statements(self.spec, self.dialect, start=start)

    def _next_number_or_zero(self, ex: Executor) -> int:
        try:
            # A savepoint: a missing counter must not abort the migration's transaction.
            with ex.atomic():
                return self.next_number(ex)
        except QueueTableMissing:
            return 0

    def check_empty(self, ex: Executor, *, worker: str, then: str) -> None:
        """Raise :class:`~dbqueue.errors.RingNotEmpty` unless the ring holds no message
        (ready, spilled, leased or waiting to be retried; failed ones do not count), saying how
        to drain it in the front's own terms: ``worker``, the command that empties it, and
        ``then``, what to run again."""
        stats = self.stats(ex)
        held = stats.ready + stats.leased + stats.scheduled
        if held:
            # Spilled messages count as ready: the drain pushes them into the ring first.
            spilled = (
                f" ({stats.spilled} of them spilled, in its overflow)" if stats.spilled else ""
            )
            group = self.spec.group
            whose = (
                f"consumer group {group!r} of ring queue {self.spec.table!r}"
                if group is not None
                else f"ring queue {self.spec.table!r}"
            )
            replaced = (
                "its rows of the slots can only be replaced (a capacity change) or removed "
                "(the group's removal)"
                if group is not None
                else f"its {stats.capacity} slots can only be replaced (a capacity change)"
            )
            raise RingNotEmpty(
                f"{whose} holds {held} message(s) ({stats.ready} ready{spilled}, "
                f"{stats.leased} leased, {stats.scheduled} waiting to be retried): {replaced} "
                f"while it is empty. Nothing was changed. Drain it first: stop its producers, "
                f"let the workers empty it ({worker} --burst, run from the code that still "
                f"declares the ring's current capacity: a worker that declares the new one "
                f"refuses this table), then {then}"
            )

    def check(self, ex: Executor) -> None:
        """Raise RingCapacityMismatch unless the table has exactly ``capacity`` slots (with
        consumer groups: unless each group's state table has)."""
        if self.spec.fans_out:
            for name in self.spec.options.groups:
                self.group(name).check(ex)
            return
        slots = self._rows(ex, "stats", self._clock(), StatsRow)[0].slots
        if slots != self.capacity:
            raise self._mismatch(f"it has {slots} slots")

    def _purge(self, ex: Executor, params: dict[str, Any]) -> int:
        """``ready`` and ``leased`` empty those slots and remove those of the side table,
        ``scheduled`` and ``failed`` remove messages of the side table; a ring has no done
        messages."""
        with ex.atomic():
            slots = self._rows(ex, "purge", params, NumberRow)
            aside = self._rows(ex, "purge_side", params, NumberRow)
        return len(slots) + len(aside)

    def _slot_selection(self, selector: StateSelector | None) -> dict[str, Any]:
        # Slots hold ready (always due) and leased messages; the other states are aside.
        slot = SLOT_OF_SELECTOR.get(selector) if selector is not None else None
        in_slots = selector is None or slot is not None
        return {"in_slots": in_slots, "slot_state": None if slot is None else int(slot)}

    def model_row(self, message: Message) -> dict[str, Any]:
        """The slot table's columns (:func:`slot_row`)."""
        return slot_row(message, self.capacity)

    def model_extras(self, message: Message) -> dict[str, Any]:
        """Nothing: attempts and the lease are columns of the slot table."""
        return {}

    def delete(self, ex: Executor, ids: Iterable[TokenLike] | int) -> int:
        """Remove messages by number, wherever they are (a slot, the side table). A ring with
        consumer groups deletes them from every group and from its overflow (the count is of
        messages); a group, from its own deliveries only."""
        numbers = self._ids(ids)
        if not numbers:
            return 0
        params = {"ids": self.dialect.array(numbers)}
        with ex.atomic():
            if self.spec.fans_out:
                found = {int(r.number) for r in self._rows(ex, "delete_side", params, NumberRow)}
                for name in self.spec.options.groups:
                    group = self.group(name)
                    for operation in ("delete", "delete_side"):
                        found.update(
                            int(r.number) for r in group._rows(ex, operation, params, NumberRow)
                        )
                return len(found)
            slots = self._rows(ex, "delete", params, NumberRow)
            aside = self._rows(ex, "delete_side", params, NumberRow)
        return len(slots) + len(aside)


def slot_row(message: Message, capacity: int) -> dict[str, Any]:
    """The slot table's columns for a popped message, as the adapters build model instances
    from them (``slot`` and ``seq`` from its number)."""
    return {
        **message.payload,
        "slot": message.id % capacity,
        "seq": message.id,
        # A leased message keeps its slot; an at-most-once or transactional pop empties it.
        "state": SlotState.LEASED if message.lease_until is not None else SlotState.EMPTY,
        "attempts": message.attempts,
        "pushed_at": message.enqueued_at,
        "lease_until": message.lease_until,
        "last_error": message.last_error,
    }
