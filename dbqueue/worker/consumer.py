"""What a worker runs: consumers (a queue and its handler), chores (periodic work besides),
the queue protocol the adapters implement, and the tallies of a run."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dbqueue.errors import InvalidArgument
from dbqueue.message import RescueResult, State
from dbqueue.upkeep.rounds import UpkeepReport


class WorkerQueue(Protocol):
    """One queue as the worker uses it. Every method runs on the calling thread's own
    connection; the adapters (and :class:`dbqueue.worker_queue.ExecutorQueue`) provide it."""

    @property
    def name(self) -> str:
        """How logs name the queue."""

    @property
    def channel(self) -> str | None:
        """The LISTEN/NOTIFY channel pushes ring, or None when there are no notifications."""

    @property
    def lease(self) -> dt.timedelta:
        """How long a popped item stays leased."""

    @property
    def max_attempts(self) -> int:
        """Attempts an item gets before it fails for good."""

    @property
    def database(self) -> str:
        """Names the database the queue is in: queues with the same name share a listener."""

    def connect_listener(self) -> Any:
        """A new psycopg connection to LISTEN on, or None where there are no notifications."""

    def pop(self, n: int) -> Sequence[Any]:
        """Lease up to ``n`` due items (objects with ``id`` and ``attempts``)."""

    def ack(self, items: Sequence[Any]) -> Sequence[int]:
        """Remove items still leased under their token; return the ids removed."""

    def ack_pop(self, items: Sequence[Any], n: int) -> tuple[int, Sequence[Any]]:
        """Ack ``items`` (as :meth:`ack`) and lease up to ``n`` more, in one transaction;
        return how many were acked and the new items."""

    def take_failed_unreadable(self) -> int:
        """How many unreadable messages :meth:`pop` and :meth:`ack_pop` failed for good since
        the last call: they are not among the items returned (see :mod:`dbqueue.unreadable`)."""

    def fail(self, items: Sequence[Any], errors: Sequence[str]) -> Mapping[int, State]:
        """Record failed attempts of items still leased; return their new states."""

    def extend(self, items: Sequence[Any]) -> Sequence[int]:
        """Extend the leases of items still held; return the ids extended."""

    def rescue(self) -> RescueResult:
        """Expired leases back to ready (one rescuer at a time per queue)."""

    def release(self, items: Sequence[Any]) -> Sequence[int]:
        """Hand back leased items unstarted (ready at once, their attempt not counted);
        return the ids released."""

    def next_due(self) -> dt.datetime | None:
        """When the queue next has work that no push announces (a delay or a back-off ends, a
        lease expires); None if there is none."""

    def oldest_ready_age(self) -> dt.timedelta | None:
        """How long the queue's oldest ready item has waited; None if none is ready."""

    def upkeep(self) -> UpkeepReport:
        """A round of the queue's upkeep (:mod:`dbqueue.upkeep`) on the calling thread's
        connection: a split queue's heads advanced, its tables compacted if a long transaction
        grew them."""

    def disconnect(self) -> None:
        """Close this thread's connection (after a database error, and when a thread ends)."""


@dataclass(frozen=True, slots=True)
class Consumer:
    """A queue and its handler: ``handle(item)``, or ``handle(items)`` when ``batch``."""

    queue: WorkerQueue
    handle: Callable[[Any], object]
    batch: bool = False
    batch_size: int = 100

    def __post_init__(self) -> None:
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"batch_size must be a positive int, got {size!r}")


@dataclass(frozen=True, slots=True)
class Chore:
    """Work the maintenance thread does besides rescue and compaction: once when the worker
    starts (a burst too), then every ``every`` seconds while it runs.

    ``run`` works on the maintenance thread's own connection and returns what to log at INFO
    (None: nothing); an exception is logged as a warning, and the chore is tried again at its
    next turn. ``disconnect`` closes that connection (after a failure, and when the worker
    stops).
    """

    name: str
    every: float
    run: Callable[[], str | None]
    disconnect: Callable[[], None]

    def __post_init__(self) -> None:
        every = self.every
        if isinstance(every, bool) or not isinstance(every, int | float) or not every > 0:
            raise InvalidArgument(f"a chore's every must be positive seconds, got {every!r}")


@dataclass(slots=True)
class WorkerStats:
    """What a run did."""

    #: Items handled successfully.
    handled: int = 0
    #: Items failed for good (their last attempt failed).
    failed: int = 0
    #: Failed attempts of items that will be tried again after their back-off.
    retried: int = 0
    batches: int = 0
    lost_leases: int = 0
    database_errors: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """The line a worker command prints when it stops."""
        return (
            f"{self.handled} handled, {self.failed} failed, {self.retried} attempt(s) to retry, "
            f"{self.batches} batches in {self.seconds:.1f} s"
        )
