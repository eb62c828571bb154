"""The worker loop every front end shares (Django's ``runqueueworker``, the SQLAlchemy CLI, the
core): pop a batch, run the handler per item or per batch, ack what succeeded and fail what
raised (back-off, then failed after ``max_attempts``), extend leases while a slow batch runs,
rescue the expired leases of dead workers, and sleep until there is work.

Concurrency is by threads, each with its own database connection (``WorkerQueue`` methods run
on the calling thread's connection); run several processes for more. A thread pops only as many
items as it will handle next, so nothing waits leased in a local buffer.

Errors: a handler's exception fails its item (or its batch) with the traceback. A database
error (the server restarting, a dropped connection) drops the thread's connection, waits with
back-off and carries on: the batch in hand is settled once the database is back (acks and
fails are fenced by lease tokens, so a late settle cannot touch a redelivered copy). A
:class:`~dbqueue.errors.DBQueueError` (a missing table, a bad argument) stops the worker and is
raised from :meth:`Worker.run`.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from dbqueue.compaction import BUSY, CHECK_EVERY, CompactResult
from dbqueue.error_text import storable_error
from dbqueue.errors import DBQueueError, InvalidArgument, WorkerGaveUp
from dbqueue.message import RescueResult, State
from dbqueue.outage import is_outage
from dbqueue.wakeup import Doorbell, Listener, PollPolicy, quietly

log = logging.getLogger("dbqueue.worker")

#: The longest wait between retries after a database error.
RETRY_MAX = 5.0
#: How long a ``burst`` worker tries to reach an unreachable database before it gives up
#: (WorkerGaveUp): a run meant to end (cron, CI) must end.
BURST_RECONNECT_FOR = 60.0
#: Seconds between two looks at when work falls due, for an idle thread that polls (the look
#: is one query per queue; a thread about to sleep longer always looks first).
DUE_RECHECK = 1.0
#: Seconds an idle thread sleeps past an item's due time (timestamps have microseconds, and the
#: statement that takes the item must see it due).
DUE_MARGIN = 0.005
#: The error recorded for a failed attempt whose own error text the database refused.
REFUSED_ERROR = "the handler failed, and the database refused its error text; see the worker's log"


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

    def compact(self) -> CompactResult | None:
        """Compact the queue's tables if they grew (a long transaction keeps vacuum from
        removing their dead versions; see dbqueue.compaction); None if it was not due."""

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


@dataclass(frozen=True, slots=True)
class _Pending:
    """Items a thread handled successfully, not acked yet (see Worker._work)."""

    queue: WorkerQueue
    items: list[Any]


@dataclass(slots=True)
class _Due:
    """When a thread's queues next have work that no push announces (see Worker._due_plan),
    and when that was looked up (time.monotonic())."""

    plan: list[tuple[float, WorkerQueue]] = field(default_factory=list)
    planned_at: float = -float("inf")


@dataclass(slots=True)
class _InFlight:
    queue: WorkerQueue
    items: Sequence[Any]
    extended_at: float = field(default_factory=time.monotonic)
    #: How many of ``items`` the handler has started (the rest can be released unstarted).
    started: int = 0

    def unstarted(self) -> list[Any]:
        return list(self.items[self.started :])


class Worker:
    """Runs consumers until stopped (a signal, :meth:`stop`), drained (``burst``) or
    ``max_messages`` items have been handled.

    Idle threads wait for a notification on the queues' channels (one listener per database)
    and poll (see :class:`~dbqueue.wakeup.PollPolicy`).
    """

    def __init__(
        self,
        consumers: Sequence[Consumer],
        *,
        concurrency: int = 1,
        burst: bool = False,
        max_messages: int | None = None,
        poll: PollPolicy | None = None,
        rescue_every: float | None = None,
        reconnect_for: float | None = None,
    ) -> None:
        if not consumers:
            raise InvalidArgument("a worker needs at least one queue with a handler")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument(f"concurrency must be a positive int, got {concurrency!r}")
        if max_messages is not None and (
            isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1
        ):
            raise InvalidArgument(f"max_messages must be a positive int, got {max_messages!r}")
        if reconnect_for is not None and (
            isinstance(reconnect_for, bool)
            or not isinstance(reconnect_for, int | float)
            or not reconnect_for > 0
        ):
            raise InvalidArgument(f"reconnect_for must be positive seconds, got {reconnect_for!r}")
        self.consumers = list(consumers)
        self.concurrency = concurrency
        self.burst = burst
        #: Seconds of database errors in a row after which the worker gives up (WorkerGaveUp);
        #: None: it keeps trying (a service's worker waits for its database to come back).
        self.reconnect_for = (
            reconnect_for if reconnect_for is not None or not burst else BURST_RECONNECT_FOR
        )
        self.poll = poll or PollPolicy()
        # Expired leases come back within one lease time, and at least every 30 s.
        shortest = min(c.queue.lease.total_seconds() for c in self.consumers)
        self.rescue_every = rescue_every if rescue_every is not None else min(30.0, shortest)
        self.stats = WorkerStats()
        self.doorbell = Doorbell()
        self.listeners = self._listeners()
        self._all_notify = all(c.queue.channel is not None for c in self.consumers)
        self._budget = max_messages
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._releasing = threading.Event()
        self._done = threading.Event()
        self._inflight: dict[int, _InFlight] = {}
        self._fatal: BaseException | None = None
        self._signals = 0

    def _listeners(self) -> list[Listener]:
        by_database: dict[str, list[WorkerQueue]] = {}
        for c in self.consumers:
            if c.queue.channel is not None:
                by_database.setdefault(c.queue.database, []).append(c.queue)
        listeners = []
        for queues in by_database.values():
            first = queues[0]
            channels = [q.channel for q in queues if q.channel is not None]
            listeners.append(Listener(first.connect_listener, channels, self.doorbell))
        return listeners

    @property
    def listening(self) -> bool:
        """Whether a push to any of the worker's queues would ring its doorbell right now
        (otherwise idle threads keep polling)."""
        return self._all_notify and all(x.listening for x in self.listeners)

    # -- control ------------------------------------------------------------------------------

    def stop(self, *, release_unstarted: bool = False) -> None:
        """Stop taking work: every thread finishes the batch in hand and settles it. With
        ``release_unstarted`` (what SIGTERM does), a thread finishes only the item it started
        (a batch handler: its batch) and releases the unstarted rest of its batch at once."""
        if release_unstarted:
            self._releasing.set()
        self._stopping.set()
        self.doorbell.ring()

    def run(self, *, handle_signals: bool = True) -> WorkerStats:
        """Run until stopped; return the tallies. Raises a fatal :class:`DBQueueError`."""
        start = time.monotonic()
        restore = self._install_signals() if handle_signals else {}
        for listener in self.listeners:
            listener.start()
        maintenance = threading.Thread(target=self._maintain, name="dbqueue-maintenance")
        threads = [
            threading.Thread(target=self._work, args=(i,), name=f"dbqueue-worker-{i}")
            for i in range(self.concurrency)
        ]
        log.info(
            "worker started: %d thread(s) on %s",
            self.concurrency,
            ", ".join(c.queue.name for c in self.consumers),
        )
        try:
            maintenance.start()
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():  # a timed join lets the main thread run signal handlers
                    t.join(0.2)
        finally:
            self._stopping.set()
            self._done.set()
            maintenance.join()
            for listener in self.listeners:
                listener.stop()
            for signum, handler in restore.items():
                signal.signal(signum, handler)
            self.stats.seconds = time.monotonic() - start
        log.info(
            "worker stopped: %d handled, %d failed, %d attempt(s) to retry, in %d batches, %.1f s",
            self.stats.handled,
            self.stats.failed,
            self.stats.retried,
            self.stats.batches,
            self.stats.seconds,
        )
        if self._fatal is not None:
            raise self._fatal
        return self.stats

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        restore: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, self._on_signal)
        return restore

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.warning(
                "%s: finishing the items already started, releasing the rest, then exiting "
                "(again to force)",
                name,
            )
            self.stop(release_unstarted=True)
            return
        # The unstarted items go back at once; the leases bring back those being handled.
        log.warning("%s again: releasing the unstarted items and exiting at once", name)
        with self._lock:
            batches = list(self._inflight.values())
        for batch in batches:  # (the threads start no more items: the worker is stopping)
            self._release(batch.queue, batch.unstarted())
        os._exit(128 + signum)

    # -- the loop of one thread -----------------------------------------------------------------

    def _claim(self, wanted: int) -> int:
        with self._lock:
            if self._budget is None:
                return wanted
            n = min(wanted, self._budget)
            self._budget -= n
            return n

    def _unclaim(self, n: int) -> None:
        if n and self._budget is not None:
            with self._lock:
                self._budget += n

    def _work(self, index: int) -> None:
        order = (
            self.consumers[index % len(self.consumers) :]
            + self.consumers[: index % len(self.consumers)]
        )
        empty_rounds, last_work, retry = 0, time.monotonic(), _Retry()
        due = _Due()
        # Items handled successfully are acked by the thread's next pop of the same queue, in
        # the same statement (ack_pop): one commit per batch instead of two. They are acked
        # on their own before a pop of another queue, and when the thread stops.
        pending: _Pending | None = None
        try:
            while not self._stopping.is_set():
                seen = self.doorbell.rings
                worked = errored = False
                for consumer in order:
                    if self._stopping.is_set():
                        break
                    queue = consumer.queue
                    if pending is not None and pending.queue is not queue:
                        self._flush(pending, retry)
                        pending = None
                    n = self._claim(consumer.batch_size)
                    if n == 0:  # max_messages reached
                        self.stop()
                        break
                    try:
                        if pending is not None:
                            acked, items = queue.ack_pop(pending.items, n)
                            self._count_lost(queue, len(pending.items) - acked)
                            pending = None
                        else:
                            items = queue.pop(n)
                    except Exception as exc:
                        self._unclaim(n)
                        self._database_error(queue, exc, retry)
                        errored = True
                        continue
                    retry.reset()
                    self._unclaim(n - len(items))
                    if items:
                        worked = True
                        try:
                            ok = self._process(consumer, items, retry)
                        except DBQueueError as exc:
                            self._fail_fatally(queue, exc)
                            continue
                        pending = _Pending(queue, ok) if ok else None
                if worked:
                    empty_rounds, last_work = 0, time.monotonic()
                    continue
                if self.burst and not errored:  # drained (a database error is not "empty")
                    return
                empty_rounds += 1
                self._idle(order, seen, empty_rounds, time.monotonic() - last_work, due)
        finally:
            try:
                if pending is not None:
                    self._flush(pending, retry)
            except DBQueueError as exc:
                self._fail_fatally(order[0].queue, exc)
            finally:
                for consumer in order:
                    quietly(consumer.queue.disconnect)

    def _idle(
        self, order: Sequence[Consumer], seen: int, empty_rounds: int, idle_for: float, due: _Due
    ) -> None:
        """Wait for a notification, the poll policy's time, or the next due work of the
        thread's queues, whichever comes first; rescue the queues whose work fell due."""
        wait = self.poll.wait(empty_rounds, idle_for, self.listening)
        now = time.monotonic()
        if wait > self.poll.busy_max or now - due.planned_at >= DUE_RECHECK:
            due.plan, due.planned_at = self._due_plan(order), now
        if due.plan:  # not past work that falls due (a long sleep), nor long after it (a poll)
            wait = min(wait, max(due.plan[0][0] - now, self.poll.busy_max))
        if not self.doorbell.wait(seen, wait):
            now = time.monotonic()
            while due.plan and due.plan[0][0] <= now:  # a lease may have expired: rescue now
                self._rescue(due.plan.pop(0)[1])

    def _due_plan(self, order: Sequence[Consumer]) -> list[tuple[float, WorkerQueue]]:
        """When each of a thread's queues next has work that no push announces (a delay or a
        back-off ends, a lease expires), on the monotonic clock, soonest first. An idle thread
        sleeps no longer than that, and then rescues the queue (its lease may have expired):
        no waiting for the safety poll or the maintenance thread's next rescue."""
        now, clock = dt.datetime.now(dt.UTC), time.monotonic()
        due: list[tuple[float, WorkerQueue]] = []
        for consumer in order:
            try:
                when = consumer.queue.next_due()
            except Exception as exc:  # the next pop meets the outage and handles it
                log.debug("queue %s: next_due failed (%s)", consumer.queue.name, exc)
                quietly(consumer.queue.disconnect)
                continue
            if when is not None:
                due.append((clock + (when - now).total_seconds() + DUE_MARGIN, consumer.queue))
        return sorted(due, key=lambda d: d[0])

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

    def _flush(self, pending: _Pending, retry: _Retry) -> None:
        """Ack handled items on their own (retrying through database errors)."""
        self._settle(pending.queue, pending.items, [], [], retry)

    def _fail_fatally(self, queue: WorkerQueue, exc: DBQueueError) -> None:
        log.error("queue %s: %s", queue.name, exc)
        with self._lock:
            self._fatal = self._fatal or exc
        self.stop()

    def _database_error(
        self, queue: WorkerQueue, exc: Exception, retry: _Retry, *, settling: bool = False
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

    def _process(self, consumer: Consumer, items: Sequence[Any], retry: _Retry) -> list[Any]:
        """Run the handler; fail what raised; return what succeeded (acked by the caller)."""
        start = time.monotonic()
        key = id(items)
        inflight = _InFlight(consumer.queue, items)
        with self._lock:
            self._inflight[key] = inflight
        ok: list[Any] = []
        failed: list[Any] = []
        errors: list[str] = []
        try:
            # BaseException: a handler calling sys.exit() fails its item, not the thread.
            # (KeyboardInterrupt cannot reach a worker thread: run() handles SIGINT.)
            if consumer.batch:
                inflight.started = len(items)
                try:
                    consumer.handle(list(items))
                    ok = list(items)
                except BaseException:
                    failed, errors = list(items), [traceback.format_exc()] * len(items)
            else:
                for index, item in enumerate(items):
                    if self._releasing.is_set():  # stopping: the rest go back unstarted
                        break
                    inflight.started = index + 1
                    try:
                        consumer.handle(item)
                        ok.append(item)
                    except BaseException:
                        failed.append(item)
                        errors.append(traceback.format_exc())
            handled = time.monotonic()
            self._release(consumer.queue, inflight.unstarted())
            states = self._settle(consumer.queue, [], failed, errors, retry) if failed else {}
        finally:
            with self._lock:
                del self._inflight[key]
        again, final = self._log_failures(consumer.queue, failed, errors, states)
        with self._lock:
            self.stats.handled += len(ok)
            self.stats.failed += final
            self.stats.retried += again
            self.stats.batches += 1
        log.info(
            "queue %s: %d item(s), %d ok, %d failed; handler %.1f ms, fail %.1f ms",
            consumer.queue.name,
            len(items),
            len(ok),
            len(failed),
            (handled - start) * 1000,
            (time.monotonic() - handled) * 1000,
        )
        return ok

    def _settle(
        self,
        queue: WorkerQueue,
        ok: list[Any],
        failed: list[Any],
        errors: list[str],
        retry: _Retry,
    ) -> Mapping[int, State]:
        """Ack and fail, retrying through database errors; count the leases found lost.
        Returns the new states of the failed items (those whose lease was lost left out)."""
        acked: Sequence[int] | None = None
        states: Mapping[int, State] | None = None
        refused = 0  # items the database refused to settle (left to their leases)
        while True:
            try:
                if acked is None:
                    acked = queue.ack(ok) if ok else []
                if states is None:
                    states = queue.fail(failed, errors) if failed else {}
                break
            except Exception as exc:
                if is_outage(exc):
                    self._database_error(queue, exc, retry, settling=True)
                    continue
                if isinstance(exc, DBQueueError):
                    raise
                # Retried, a statement the database refused fails the same way forever.
                if acked is None:
                    self._settle_refused(queue, "ack", ok, exc)
                    acked, refused = [], refused + len(ok)
                else:
                    outcome = self._fail_plainly(queue, failed, exc, retry)
                    if outcome is not None:
                        states, gave_up = outcome
                        refused += gave_up
        retry.reset()
        self._count_lost(queue, len(ok) - len(acked) + len(failed) - len(states) - refused)
        return states

    def _log_failures(
        self,
        queue: WorkerQueue,
        failed: Sequence[Any],
        errors: Sequence[str],
        states: Mapping[int, State],
    ) -> tuple[int, int]:
        """Log each failed attempt with its traceback: WARNING if it will be tried again,
        ERROR if it failed for good. Returns how many of each (an item whose lease was lost
        meanwhile is neither: :meth:`_count_lost` logged it)."""
        again = final = 0
        for item, error in zip(failed, errors, strict=True):
            state = states.get(item.id)
            if state is None:
                continue
            retried = state is State.READY
            again, final = again + retried, final + (not retried)
            log.log(
                logging.WARNING if retried else logging.ERROR,
                "queue %s: item %s failed (attempt %s/%d); %s\n%s",
                queue.name,
                item.id,
                item.attempts,
                queue.max_attempts,
                "it will be tried again after its back-off" if retried else "failed for good",
                storable_error(error).rstrip(),  # a log file takes no lone surrogate either
            )
        return again, final

    def _settle_refused(
        self, queue: WorkerQueue, operation: str, items: Sequence[Any], exc: BaseException
    ) -> None:
        with self._lock:
            self.stats.database_errors += 1
        log.error(
            "queue %s: the database refused to %s item(s) %s; left leased, they come back "
            "when their lease expires",
            queue.name,
            operation,
            ", ".join(str(getattr(i, "id", i)) for i in items),
            exc_info=exc,
        )
        quietly(queue.disconnect)

    def _fail_plainly(
        self, queue: WorkerQueue, items: Sequence[Any], exc: BaseException, retry: _Retry
    ) -> tuple[Mapping[int, State], int] | None:
        """The database refused to record the failures (their error texts): record them with
        a fixed text instead, once; if that is refused too, leave them to their leases. The
        new states and how many items were left; None if an outage cut the fallback short
        (the caller tries again)."""
        with self._lock:
            self.stats.database_errors += 1
        log.error(
            "queue %s: the database refused the failure of item(s) %s; recorded with a fixed "
            "error text instead",
            queue.name,
            ", ".join(str(getattr(i, "id", i)) for i in items),
            exc_info=exc,
        )
        quietly(queue.disconnect)
        text = f"{REFUSED_ERROR} ({type(exc).__name__})"
        try:
            return queue.fail(items, [text] * len(items)), 0
        except Exception as again:
            if is_outage(again):
                self._database_error(queue, again, retry, settling=True)
                return None
            if isinstance(again, DBQueueError):
                raise
            self._settle_refused(queue, "fail", items, again)
            return {}, len(items)

    def _count_lost(self, queue: WorkerQueue, lost: int) -> None:
        if not lost:
            return
        with self._lock:
            self.stats.lost_leases += lost
        log.warning(
            "queue %s: %d lease(s) had expired before the batch was settled; those items "
            "were or will be delivered again (raise the queue's lease?)",
            queue.name,
            lost,
        )

    # -- heartbeat and rescue -------------------------------------------------------------------

    def _maintain(self) -> None:
        queues = {id(c.queue): c.queue for c in self.consumers}
        shortest = min(q.lease.total_seconds() for q in queues.values())
        tick = max(min(shortest / 3, self.rescue_every, CHECK_EVERY), 0.05)
        next_rescue = next_compact = time.monotonic()
        try:
            while not self._done.is_set():
                now = time.monotonic()
                if now >= next_rescue and not self._stopping.is_set():
                    for queue in queues.values():
                        self._rescue(queue)
                    next_rescue = now + self.rescue_every
                if now >= next_compact and not self._stopping.is_set():
                    for queue in queues.values():
                        self._compact(queue)
                    next_compact = now + CHECK_EVERY
                self._heartbeat()
                self._done.wait(tick)
        finally:
            for queue in queues.values():
                quietly(queue.disconnect)

    @staticmethod
    def _guarded[T](queue: WorkerQueue, what: str, call: Callable[[], T]) -> T | None:
        """``call()`` for the maintenance thread: a failure is logged and drops the thread's
        connection (the next round reconnects); None then."""
        try:
            return call()
        except Exception as exc:
            log.warning("queue %s: %s failed (%s)", queue.name, what, exc)
            quietly(queue.disconnect)
            return None

    def _rescue(self, queue: WorkerQueue) -> None:
        result = self._guarded(queue, "rescue", queue.rescue)
        if result is None:
            return
        if result.ready or result.failed:
            # Expired leases (and, on a ring, stranded messages): a worker died or overran.
            log.warning(
                "queue %s: rescued %d message(s) whose lease expired: %d ready again, "
                "%d failed for good",
                queue.name,
                result.ready + result.failed,
                result.ready,
                result.failed,
            )
        if result.returned:  # a ring's retries whose back-off ended: the normal course
            log.info("queue %s: %d message(s) back in the ring", queue.name, result.returned)
        if result.ready or result.returned:
            # Ready again here, without a push to notify anyone: wake this worker's idle
            # consumers now rather than at their next poll.
            self.doorbell.ring()

    def _compact(self, queue: WorkerQueue) -> None:
        result = self._guarded(queue, "compaction", queue.compact)
        if result is None:
            return
        if result.skipped == BUSY:  # another worker is compacting it
            return
        if result.compacted:
            log.info(
                "queue %s: compacted, %s -> %s in %.0f ms (a long transaction keeps vacuum from "
                "removing the versions messages leave behind)",
                queue.name,
                _mib(result.size_before),
                _mib(result.size_after),
                result.seconds * 1000,
            )
        else:
            log.warning(
                "queue %s: grew to %s while a long transaction keeps vacuum from removing the "
                "versions messages leave behind, and could not be compacted: %s",
                queue.name,
                _mib(result.size_before),
                result.skipped,
            )

    def _heartbeat(self) -> None:
        now = time.monotonic()
        with self._lock:
            batches = list(self._inflight.values())
        for batch in batches:
            if now - batch.extended_at < batch.queue.lease.total_seconds() / 3:
                continue
            try:
                batch.queue.extend(batch.items)
                batch.extended_at = now
            except Exception as exc:
                log.warning("queue %s: lease extension failed (%s)", batch.queue.name, exc)
                quietly(batch.queue.disconnect)


class _Retry:
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


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
