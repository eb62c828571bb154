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

from dbqueue.errors import DBQueueError, InvalidArgument
from dbqueue.message import RescueResult, State
from dbqueue.wakeup import Doorbell, Listener, PollPolicy, quietly

log = logging.getLogger("dbqueue.worker")

#: The longest wait between retries after a database error.
RETRY_MAX = 5.0


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

    handled: int = 0
    failed: int = 0
    batches: int = 0
    lost_leases: int = 0
    database_errors: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """The line a worker command prints when it stops."""
        return (
            f"{self.handled} handled, {self.failed} failed, {self.batches} batches in "
            f"{self.seconds:.1f} s"
        )


@dataclass(frozen=True, slots=True)
class _Pending:
    """Items a thread handled successfully, not acked yet (see Worker._work)."""

    queue: WorkerQueue
    items: list[Any]


@dataclass(slots=True)
class _InFlight:
    queue: WorkerQueue
    items: Sequence[Any]
    extended_at: float = field(default_factory=time.monotonic)


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
    ) -> None:
        if not consumers:
            raise InvalidArgument("a worker needs at least one queue with a handler")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument(f"concurrency must be a positive int, got {concurrency!r}")
        if max_messages is not None and (
            isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1
        ):
            raise InvalidArgument(f"max_messages must be a positive int, got {max_messages!r}")
        self.consumers = list(consumers)
        self.concurrency = concurrency
        self.burst = burst
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

    def stop(self) -> None:
        """Stop taking work; every thread finishes and settles the batch in hand."""
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
            "worker stopped: %d handled, %d failed in %d batches, %.1f s",
            self.stats.handled,
            self.stats.failed,
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
            log.warning("%s: finishing the batches in hand, then exiting (again to force)", name)
            self.stop()
            return
        # Leases bring back whatever was in hand: nothing is lost by leaving now.
        log.warning("%s again: exiting at once", name)
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
                idle_for = time.monotonic() - last_work
                self.doorbell.wait(seen, self.poll.wait(empty_rounds, idle_for, self.listening))
        finally:
            try:
                if pending is not None:
                    self._flush(pending, retry)
            except DBQueueError as exc:
                self._fail_fatally(order[0].queue, exc)
            finally:
                for consumer in order:
                    quietly(consumer.queue.disconnect)

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
        """A DBQueueError stops the worker; anything else is the database being unreachable:
        drop the connection and wait (a stop cuts the wait short, unless a batch is being
        settled, which goes on until the database is back)."""
        if isinstance(exc, DBQueueError):
            self._fail_fatally(queue, exc)
            return
        with self._lock:
            self.stats.database_errors += 1
        delay = retry.next()
        log.warning("queue %s: database error (%s); retrying in %.1f s", queue.name, exc, delay)
        quietly(queue.disconnect)
        (self._done if settling else self._stopping).wait(delay)

    def _process(self, consumer: Consumer, items: Sequence[Any], retry: _Retry) -> list[Any]:
        """Run the handler; fail what raised; return what succeeded (acked by the caller)."""
        start = time.monotonic()
        key = id(items)
        with self._lock:
            self._inflight[key] = _InFlight(consumer.queue, items)
        ok: list[Any] = []
        failed: list[Any] = []
        errors: list[str] = []
        try:
            # BaseException: a handler calling sys.exit() fails its item, not the thread.
            # (KeyboardInterrupt cannot reach a worker thread: run() handles SIGINT.)
            if consumer.batch:
                try:
                    consumer.handle(list(items))
                    ok = list(items)
                except BaseException:
                    failed, errors = list(items), [traceback.format_exc()] * len(items)
            else:
                for item in items:
                    try:
                        consumer.handle(item)
                        ok.append(item)
                    except BaseException:
                        failed.append(item)
                        errors.append(traceback.format_exc())
            handled = time.monotonic()
            if failed:
                self._settle(consumer.queue, [], failed, errors, retry)
        finally:
            with self._lock:
                del self._inflight[key]
        with self._lock:
            self.stats.handled += len(ok)
            self.stats.failed += len(failed)
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
    ) -> None:
        """Ack and fail, retrying through database errors; count the leases found lost."""
        acked: Sequence[int] | None = None
        states: Mapping[int, State] | None = None
        while True:
            try:
                if acked is None:
                    acked = queue.ack(ok) if ok else []
                if states is None:
                    states = queue.fail(failed, errors) if failed else {}
                break
            except DBQueueError:
                raise
            except Exception as exc:
                self._database_error(queue, exc, retry, settling=True)
        retry.reset()
        self._count_lost(queue, len(ok) - len(acked) + len(failed) - len(states))

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
        tick = max(min(shortest / 3, self.rescue_every), 0.05)
        next_rescue = time.monotonic()
        try:
            while not self._done.is_set():
                now = time.monotonic()
                if now >= next_rescue and not self._stopping.is_set():
                    for queue in queues.values():
                        self._rescue(queue)
                    next_rescue = now + self.rescue_every
                self._heartbeat()
                self._done.wait(tick)
        finally:
            for queue in queues.values():
                quietly(queue.disconnect)

    def _rescue(self, queue: WorkerQueue) -> None:
        try:
            result = queue.rescue()
        except Exception as exc:
            log.warning("queue %s: rescue failed (%s)", queue.name, exc)
            quietly(queue.disconnect)
            return
        if result.ready or result.failed:
            # Expired leases (and, on a ring, ended back-offs and stranded messages).
            log.warning(
                "queue %s: rescued %d message(s): %d ready again, %d failed for good",
                queue.name,
                result.ready + result.failed,
                result.ready,
                result.failed,
            )
        if result.ready:
            # Ready again here, without a push to notify anyone: wake this worker's idle
            # consumers now rather than at their next poll.
            self.doorbell.ring()

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

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, RETRY_MAX)
        return delay

    def reset(self) -> None:
        self.delay = 0.1
