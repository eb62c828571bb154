"""Typed errors. Every error that dbqueue raises for bad input subclasses :class:`DBQueueError`
and is raised before anything is written, so nothing already stored is lost or changed."""

from __future__ import annotations

from collections.abc import Iterable


class DBQueueError(Exception):
    """Base class of every error dbqueue raises on purpose."""


class InvalidSpec(DBQueueError, ValueError):
    """A queue declaration is invalid: a table or field name, a reserved name, an option."""


class InvalidPayload(DBQueueError, ValueError):
    """A payload cannot be stored: unknown or missing field, wrong type, too long, naive
    datetime, not JSON-encodable."""


class PayloadTooLarge(InvalidPayload):
    """An encoded payload is larger than the queue's ``max_payload_bytes``."""


class InvalidArgument(DBQueueError, ValueError):
    """An argument of a queue operation is out of range (priority, batch size, mode, delay)."""


class TransactionStateError(DBQueueError):
    """A delivery mode was used where its guarantee cannot hold (e.g. at-most-once inside an
    open transaction, which could roll the removal back after the work was done)."""


class NotLeased(DBQueueError):
    """ack/fail named items that are not currently leased by the caller (never popped, already
    acked, or re-delivered to another worker after the lease expired)."""

    def __init__(self, ids: Iterable[int], operation: str) -> None:
        self.ids = sorted(ids)
        shown = ", ".join(str(i) for i in self.ids[:20])
        more = f" and {len(self.ids) - 20} more" if len(self.ids) > 20 else ""
        super().__init__(
            f"{operation}: item(s) {shown}{more} are not leased by this caller (never popped, "
            f"already acknowledged, or their lease expired and they were delivered again); "
            f"nothing was changed"
        )


class QueueTableMissing(DBQueueError):
    """The queue's tables do not exist in this database (migrations not applied?)."""


class UnsupportedDatabase(DBQueueError):
    """The database engine or its version cannot run dbqueue."""


class QueueFull(DBQueueError):
    """A ring queue had no free slot for ``push_timeout``: its consumers are behind or stopped.

    ``pushed`` has one entry per message of the call, in input order: its id if it was stored,
    None if not (within a batch a later message can land while an earlier one waits, so the
    stored ones are not always a prefix). Outside a transaction the stored ones are committed;
    nothing else of the call was written. ``remaining`` counts the Nones.
    """

    def __init__(self, table: str, capacity: int, pushed: list[int | None], why: str) -> None:
        self.pushed = pushed
        self.remaining = sum(1 for i in pushed if i is None)
        stored = [i for i in pushed if i is not None]
        done = (
            f"; {len(stored)} message(s) of this call were pushed (QueueFull.pushed says which)"
            if stored
            else ""
        )
        super().__init__(
            f"ring queue {table!r} is full ({capacity} slots): {self.remaining} message(s) not "
            f"pushed, {why}{done}. Start more workers, raise push_timeout, or give the queue a "
            f"larger capacity"
        )


class RingCapacityMismatch(DBQueueError):
    """The ring table in the database does not have the capacity the queue declares."""


class RingNotEmpty(DBQueueError):
    """A ring's slots cannot be replaced (a capacity change) while it holds messages."""
