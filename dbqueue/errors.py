"""Typed errors. Every error that dbqueue raises for bad input subclasses :class:`DBQueueError`
and is raised before anything is written, so nothing already stored is lost or changed."""

from __future__ import annotations

from collections.abc import Iterable


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters; a short
    description where repr itself fails (an int too long for str, a broken __repr__)."""
    try:
        text = repr(value)
    except Exception:
        if isinstance(value, int):
            return f"an int of {value.bit_length()} bits"
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


class UnsupportedOperation(DBQueueError):
    """The queue's layout has no such operation (a ring queue cannot cancel an item)."""


class UniqueKeyConflict(DBQueueError):
    """A unique queue could not settle who holds a key (:mod:`dbqueue.unique`): a retry would
    make a second item of a key another item took meanwhile, or a push kept finding its key's
    holder gone. Nothing was written; the operation may be run again."""


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


class WorkerGaveUp(DBQueueError):
    """A worker stopped trying to reach its database: it stayed unreachable longer than the
    worker's ``reconnect_for`` (a ``--burst`` run's default: a cron job must end)."""


class QueueUnavailable(DBQueueError):
    """The database could not be reached, or stopped serving, while a queue operation ran:
    the server restarting or shutting down, a lost connection, a failover that left the
    connection on a read-only standby, a deadlock or serialization failure. Trying again
    later is the remedy; the driver's error is chained (``__cause__``).

    ``stored`` says what became of a write: ``False`` when it is known not to have happened
    (the server refused the statement, or it ran in a transaction that cannot commit now),
    ``None`` when the outcome is unknown (the connection broke while an autocommit statement
    was in flight: the server may have committed it before the break). A producer that must
    not lose a message retries when ``stored`` is False; when it is None, a retry may store
    it twice (see the how-to on producers during an outage).
    """

    def __init__(self, queue: str, operation: str, stored: bool | None, cause: BaseException):
        self.queue, self.operation, self.stored = queue, operation, stored
        outcome = (
            "nothing was written"
            if stored is False
            else "the connection broke while the statement was in flight: it may or may not "
            "have been committed"
        )
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(
            f"queue {queue!r}: the database is unavailable during {operation} ({reason}); "
            f"{outcome}. Try again once it is back."
        )


class SnapshotTooOld(DBQueueError):
    """An operation ran in the caller's REPEATABLE READ or SERIALIZABLE transaction, whose
    snapshot is older than a change to the rows the operation had to change (another worker
    leased or acked them, a push took a unique key), and PostgreSQL refused it: a
    serialization failure (SQLSTATE 40001, chained as ``__cause__``). Nothing of the
    transaction can be committed now; roll it back and run it again. What such a transaction
    reads of a queue is always the queue as it was at its snapshot: no dbqueue operation
    changes what an existing snapshot sees (see :mod:`dbqueue.upkeep`)."""

    def __init__(self, queue: str, operation: str) -> None:
        self.queue, self.operation = queue, operation
        super().__init__(
            f"queue {queue!r}: {operation} met rows changed after this transaction took its "
            f"snapshot (REPEATABLE READ or SERIALIZABLE), and PostgreSQL refused it "
            f"(serialization failure); nothing was written. Roll the transaction back and run "
            f"it again"
        )


class UnsupportedDatabase(DBQueueError):
    """The database engine or its version cannot run dbqueue."""


class QueueFull(DBQueueError):
    """A ring queue had no free slot (``when_full="raise"``: at once; ``"wait"``: for
    ``push_timeout``): its consumers are behind or stopped.

    ``pushed`` has one entry per message of the call, in input order: its id if it was stored,
    None if not (within a batch a later message can land while an earlier one waits, so the
    stored ones are not always a prefix). Outside a transaction the stored ones are committed;
    nothing else of the call was written. ``remaining`` counts the Nones.

    For a ring with consumer groups, ``lagging`` names the groups that had not taken the
    message in the slot the push needed, with how many numbers behind the pushers each one
    was (``"search (2000 behind)"``): the slot is free only once every group has settled it,
    so one stopped group stops every push after ``capacity`` messages.
    """

    def __init__(
        self,
        table: str,
        capacity: int,
        pushed: list[int | None],
        why: str,
        *,
        can_wait: bool = True,
        advice: str | None = None,
        lagging: str | None = None,
    ) -> None:
        self.pushed = pushed
        self.lagging = lagging
        if lagging:
            why = f"{why}; the consumer group(s) behind: {lagging}"
        self.remaining = sum(1 for i in pushed if i is None)
        stored = [i for i in pushed if i is not None]
        done = (
            f"; {len(stored)} message(s) of this call were pushed (QueueFull.pushed says which)"
            if stored
            else ""
        )
        super().__init__(
            f"ring queue {table!r} is full ({capacity} slots): {self.remaining} message(s) not "
            f"pushed, {why}{done}. Start more workers, "
            + (advice or ("raise push_timeout, " if can_wait else "push outside a transaction, "))
            + "or give the queue a larger capacity"
        )


class RingCapacityMismatch(DBQueueError):
    """The ring table in the database does not have the capacity the queue declares."""


class RingNotEmpty(DBQueueError):
    """A ring's slots cannot be replaced (a capacity change) while it holds messages."""


class MetricsUnavailable(DBQueueError):
    """A worker was asked for metrics it cannot serve: the ``metrics`` extra
    (``prometheus_client``) is not installed, or the metrics port cannot be listened on."""
