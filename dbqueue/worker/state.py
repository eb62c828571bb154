"""What the worker's parts share: its settings and state (:class:`WorkerBase`), the records
of a thread's batch, how long each of its databases has been out of reach (:class:`Outages`),
and the reactions to a database error that every part has: retry, or give up."""

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
from dbqueue.worker.quiet import Throttle
from dbqueue.worker.tallies import Tallies

log = logging.getLogger("dbqueue.worker")

#: The longest wait between retries after a database error.
RETRY_MAX = 5.0
#: How long a ``burst`` worker tries to reach an unreachable database before it gives up
#: (WorkerGaveUp): a run meant to end (cron, CI) must end.
BURST_RECONNECT_FOR = 60.0
#: The error recorded for a failed attempt whose own error text the database refused.
REFUSED_ERROR = "the handler failed, and the database refused its error text; see the worker's log"


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text (its class's name if it has none): a driver's error
    can run over several lines, and a command's error is one."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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


class Outages:
    """Since when each of the worker's databases (by :attr:`WorkerQueue.database`) has been
    out of reach: from the first outage any of the worker's threads met since one of them
    last reached it. A thread handling a slow batch meets none, but the lease and maintenance
    threads do, so a worker with items in hand knows how long its database has been away.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: database -> (since when, on the monotonic clock; the queue and error met last)
        self._down: dict[str, tuple[float, WorkerQueue, BaseException]] = {}

    def failed(self, queue: WorkerQueue, exc: BaseException) -> float:
        """An outage met on ``queue``'s database; seconds it has lasted."""
        now = time.monotonic()
        with self._lock:
            since = self._down.get(queue.database, (now,))[0]
            self._down[queue.database] = (since, queue, exc)
        return now - since

    def reached(self, queue: WorkerQueue, started: float) -> None:
        """``queue``'s database answered a statement sent at ``started`` (monotonic): an
        outage met since it was sent is not over (the statement went through before it began:
        cleared by it, a SIGTERM right after the outage began was taken for a plain stop and
        waited on acks that could not be sent); an older one is."""
        if self._down:  # (a dict read is atomic: no lock for the common case)
            with self._lock:
                found = self._down.get(queue.database)
                if found is not None and found[0] <= started:
                    del self._down[queue.database]

    def longest(self) -> tuple[float, WorkerQueue, BaseException] | None:
        """The outage going on for longest: seconds, and the queue and error met last; None
        when every database answered last."""
        now = time.monotonic()
        with self._lock:
            if not self._down:
                return None
            since, queue, exc = min(self._down.values(), key=lambda d: d[0])
        return now - since, queue, exc


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
    #: Set once the worker stopped waiting for its database (it gave up, or was told to stop
    #: during an outage): nothing is tried any more, the items in hand are left to their
    #: leases, and run() returns without waiting for the threads still in a handler.
    _abandoned: threading.Event
    _outages: Outages
    #: Logs a repeating failure once in a while (see dbqueue.worker.quiet).
    quiet: Throttle

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
        if self._abandoned.is_set():  # no database to tell: the leases bring them back
            log.warning(
                "queue %s: %d unstarted item(s) left to their leases", queue.name, len(items)
            )
            return
        try:
            released = queue.release(items)
        except Exception as exc:
            if is_outage(exc):
                self._outages.failed(queue, exc)
            self.quiet.failure(
                f"queue {queue.name}: release",
                exc,
                "queue %s: could not release %d item(s) (%s)",
                queue.name,
                len(items),
                exc,
            )
            quietly(queue.disconnect)
            return
        log.info("queue %s: released %d unstarted item(s)", queue.name, len(released))

    def _fail_fatally(self, queue: WorkerQueue, exc: DBQueueError) -> None:
        log.error("queue %s: %s", queue.name, exc)
        with self._lock:
            self._fatal = self._fatal or exc
        self.stop()

    def _abandon(self, why: WorkerGaveUp, exc: BaseException | None = None) -> None:
        """Stop waiting for the database, once: log ``why`` (the error run() raises), stop
        the worker and leave the items in hand to their leases. A later call does nothing
        (the threads that meet the outage after it say nothing more)."""
        with self._lock:
            if self._abandoned.is_set():
                return
            why.__cause__ = exc
            self._fatal = self._fatal or why
            self._abandoned.set()
        log.error("%s", why)
        self.stop(release_unstarted=True)

    def _reached(self, queue: WorkerQueue, retry: Retry, started: float) -> None:
        """A worker thread's statement on ``queue``, sent at ``started``, went through."""
        retry.reset()
        self._outages.reached(queue, started)

    def _give_up_if_due(self) -> None:
        """Give up (WorkerGaveUp) once a database has been out of reach for ``reconnect_for``
        seconds, whatever the threads are doing: the lease thread calls this at every tick, so
        a worker whose threads are all in a slow handler gives up on time too."""
        if self.reconnect_for is None or self._abandoned.is_set():
            return
        outage = self._outages.longest()
        if outage is not None and outage[0] >= self.reconnect_for:
            self._give_up(outage[1], outage[2], outage[0])

    def _give_up(self, queue: WorkerQueue, exc: BaseException, lasted: float) -> None:
        self._abandon(
            WorkerGaveUp(
                f"queue {queue.name}: the database stayed unreachable for {lasted:.0f} s "
                f"(reconnect_for={self.reconnect_for:g}); giving up, the items in hand are "
                f"left to their leases: {first_line(exc)}"
            ),
            exc,
        )

    def _database_error(
        self,
        queue: WorkerQueue,
        exc: Exception,
        retry: Retry,
        operation: str,
        *,
        settling: bool = False,
    ) -> None:
        """A DBQueueError stops the worker, unless it is QueueUnavailable; anything else is
        taken for the database being unreachable: drop the connection and wait (a stop cuts
        the wait short; a batch being settled waits for the database to come back, unless the
        worker gives up on it or was stopped by a signal). ``operation``: what failed, for
        the log."""
        if isinstance(exc, DBQueueError) and not is_outage(exc):
            self._fail_fatally(queue, exc)
            return
        quietly(queue.disconnect)
        with self._lock:
            self.stats.database_errors += 1
        outage = is_outage(exc)
        lasted = max(self._outages.failed(queue, exc) if outage else 0.0, retry.failing_for())
        if self._abandoned.is_set():  # given up already: said once, and nothing more to try
            return
        if self.reconnect_for is not None and lasted >= self.reconnect_for:
            self._give_up(queue, exc, lasted)
            return
        if settling and self._releasing.is_set():
            # Stopping on a signal (SIGTERM: finish what was started and exit): waiting for
            # the database would make the stop wait as long as the outage lasts.
            self._abandon(
                WorkerGaveUp(
                    f"queue {queue.name}: stopping, and the database is unreachable "
                    f"({operation} failed); exiting without waiting for it, the items in "
                    f"hand are left to their leases: {first_line(exc)}"
                ),
                exc,
            )
            return
        delay = retry.next()
        what = f"queue {queue.name}: {operation}"
        if outage:
            self.quiet.failure(
                what,
                exc,
                "queue %s: database error (%s failed: %s); retrying in %.1f s",
                queue.name,
                operation,
                exc,
                delay,
            )
        else:  # not an outage: the statement itself was refused, so say where
            self.quiet.failure(
                what,
                exc,
                "queue %s: database error (%s failed); retrying in %.1f s",
                queue.name,
                operation,
                delay,
                level=logging.ERROR,
                exc_info=exc,
            )
        (self._abandoned if settling else self._stopping).wait(delay)
