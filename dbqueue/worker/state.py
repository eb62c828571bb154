"""What the worker's parts share: its settings and state (:class:`WorkerBase`), the records
of a thread's batch, and the reactions to a database error that every part has."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbqueue.errors import DBQueueError, WorkerGaveUp
from dbqueue.outage import is_outage
from dbqueue.wakeup import Doorbell, Listener, PollPolicy, quietly
from dbqueue.worker.consumer import Chore, Consumer, WorkerQueue, WorkerStats
from dbqueue.worker.heartbeat import Activity, Heartbeat
from dbqueue.worker.tallies import Tallies

log = logging.getLogger("dbqueue.worker")

#: The longest wait between retries after a database error.
RETRY_MAX = 5.0
#: How long a ``burst`` worker tries to reach an unreachable database before it gives up
#: (WorkerGaveUp): a run meant to end (cron, CI) must end.
BURST_RECONNECT_FOR = 60.0
#: The error recorded for a failed attempt whose own error text the database refused.
REFUSED_ERROR = "the handler failed, and the database refused its error text; see the worker's log"


@dataclass(frozen=True, slots=True)
class Pending:
    """Items a thread handled successfully, not acked yet (see Worker._work)."""

    queue: WorkerQueue
    items: list[Any]


@dataclass(slots=True)
class Due:
    """When a thread's queues next have work that no push announces (see Worker._due_plan),
    and when that was looked up (time.monotonic())."""

    plan: list[tuple[float, WorkerQueue]] = field(default_factory=list)
    planned_at: float = -float("inf")


@dataclass(slots=True)
class InFlight:
    queue: WorkerQueue
    items: Sequence[Any]
    extended_at: float = field(default_factory=time.monotonic)
    #: How many of ``items`` the handler has started (the rest can be released unstarted).
    started: int = 0

    def unstarted(self) -> list[Any]:
        return list(self.items[self.started :])


class Retry:
    """Exponential back-off between attempts after database errors."""

    def __init__(self) -> None:
        self.delay = 0.1
        self.since: float | None = None  # the first error since the last success

    def next(self) -> float:
        if self.since is None:
            self.since = time.monotonic()
        delay, self.delay = self.delay, min(self.delay * 2, RETRY_MAX)
        return delay

    def failing_for(self) -> float:
        """Seconds since the first error of this run of errors (0 before any)."""
        return 0.0 if self.since is None else time.monotonic() - self.since

    def reset(self) -> None:
        self.delay = 0.1
        self.since = None


class WorkerBase:
    """The worker's settings and shared state, and what every part does the same way: stop,
    release unstarted items, and react to a database error (see :class:`~dbqueue.worker.Worker`
    for what each attribute is)."""

    consumers: list[Consumer]
    chores: list[Chore]
    concurrency: int
    burst: bool
    reconnect_for: float | None
    poll: PollPolicy
    rescue_every: float
    #: Seconds between two summary lines at INFO (0: none).
    summary_every: float
    #: The file the lease thread touches every few seconds (None: none).
    health_file: Path | None
    stats: WorkerStats
    #: Where the maintenance thread reports the worker's activity (None: nowhere).
    heartbeat: Heartbeat | None
    activity: Activity
    #: What it did per queue since it started, for its metrics.
    tallies: Tallies
    doorbell: Doorbell
    listeners: list[Listener]
    _budget: int | None
    _lock: threading.Lock
    _stopping: threading.Event
    _releasing: threading.Event
    _done: threading.Event
    _inflight: dict[int, InFlight]
    _fatal: BaseException | None

    def stop(self, *, release_unstarted: bool = False) -> None:
        """Stop taking work: every thread finishes the batch in hand and settles it. With
        ``release_unstarted`` (what SIGTERM does), a thread finishes only the item it started
        (a batch handler: its batch) and releases the unstarted rest of its batch at once."""
        if release_unstarted:
            self._releasing.set()
        self._stopping.set()
        self.doorbell.ring()

    def _release(self, queue: WorkerQueue, items: list[Any]) -> None:
        """Hand back items this worker will not start (it is stopping): another worker takes
        them at once, their attempt not counted. Should the database refuse, their leases
        bring them back."""
        if not items:
            return
        try:
            released = queue.release(items)
        except Exception as exc:
            log.warning("queue %s: could not release %d item(s) (%s)", queue.name, len(items), exc)
            quietly(queue.disconnect)
            return
        log.info("queue %s: released %d unstarted item(s)", queue.name, len(released))

    def _fail_fatally(self, queue: WorkerQueue, exc: DBQueueError) -> None:
        log.error("queue %s: %s", queue.name, exc)
        with self._lock:
            self._fatal = self._fatal or exc
        self.stop()

    def _database_error(
        self, queue: WorkerQueue, exc: Exception, retry: Retry, *, settling: bool = False
    ) -> None:
        """A DBQueueError stops the worker, unless it is QueueUnavailable; anything else is
        taken for the database being unreachable: drop the connection and wait (a stop cuts
        the wait short, unless a batch is being settled, which goes on until the database is
        back)."""
        if isinstance(exc, DBQueueError) and not is_outage(exc):
            self._fail_fatally(queue, exc)
            return
        with self._lock:
            self.stats.database_errors += 1
        if self.reconnect_for is not None and retry.failing_for() >= self.reconnect_for:
            gave_up = WorkerGaveUp(
                f"queue {queue.name}: the database stayed unreachable for "
                f"{retry.failing_for():.0f} s (reconnect_for={self.reconnect_for:g}); giving "
                f"up: {exc}"
            )
            gave_up.__cause__ = exc
            self._fail_fatally(queue, gave_up)
            return
        delay = retry.next()
        if is_outage(exc):
            log.warning("queue %s: database error (%s); retrying in %.1f s", queue.name, exc, delay)
        else:  # not an outage: the statement itself was refused, so say where
            log.error(
                "queue %s: database error; retrying in %.1f s", queue.name, delay, exc_info=exc
            )
        quietly(queue.disconnect)
        (self._done if settling else self._stopping).wait(delay)
