"""The worker: its threads' loop (pop, handle, ack with the next pop), idling until work is
due or a push notifies, and the run that starts and stops everything."""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from dbqueue.errors import DBQueueError, InvalidArgument
from dbqueue.metrics import METRICS_HOST, MetricsServer, require_prometheus, serve_worker
from dbqueue.outage import is_outage
from dbqueue.scheduler import Clock, utc_now
from dbqueue.wakeup import Doorbell, Listener, PollPolicy, quietly
from dbqueue.worker.consumer import Chore, Consumer, WorkerQueue, WorkerStats
from dbqueue.worker.handling import Handling
from dbqueue.worker.heartbeat import Activity, Heartbeat
from dbqueue.worker.leases import Leases
from dbqueue.worker.maintenance import Maintenance
from dbqueue.worker.quiet import QUIET_FOR, Throttle
from dbqueue.worker.scheduling import schedule_chores
from dbqueue.worker.signals import Signals
from dbqueue.worker.state import (
    BURST_RECONNECT_FOR,
    Due,
    InFlight,
    Outages,
    Pending,
    Retry,
    log,
)
from dbqueue.worker.tallies import Tallies

#: Seconds between two looks at when work falls due, for an idle thread that polls (the look
#: is one query per queue; a thread about to sleep longer always looks first).
DUE_RECHECK = 1.0
#: Seconds between two summary lines at INFO unless told otherwise.
SUMMARY_EVERY = 60.0
#: The shortest default interval between two rescues, in seconds: a queue with a very short
#: lease is rescued no more than once a second per worker.
RESCUE_FLOOR = 1.0
#: Seconds an idle thread sleeps past an item's due time (timestamps have microseconds, and the
#: statement that takes the item must see it due).
DUE_MARGIN = 0.005
#: Seconds a worker that stops waiting for its database (it gave up, or a signal came during
#: an outage) waits for its lease and maintenance threads, which may be in a connection
#: attempt: it does not wait for the threads in a handler at all.
ABANDON_WAIT = 2.0


class Worker(Handling, Maintenance, Leases, Signals):
    """Runs consumers until stopped (a signal, :meth:`stop`), drained (``burst``) or
    ``max_messages`` items have been handled; its maintenance thread does ``chores`` besides.

    Each batch is logged at DEBUG; every ``summary_every`` seconds (0: never) one INFO line
    sums up what was handled and failed, the rate, and each queue's oldest ready item. A
    thread of its own (``dbqueue-leases``) extends the leases of the batches in hand every
    third of their lease, and touches ``health_file`` (if given) every few seconds, for a
    liveness probe to check its age. Expired leases (a dead worker's items) are rescued every
    ``rescue_every`` seconds: by default a third of the shortest lease, at least
    :data:`RESCUE_FLOOR` and at most 30 s; a slow rescue (a large ring) waits longer, twenty
    times its duration (:func:`~dbqueue.worker.maintenance.rescue_interval`).

    Idle threads wait for a notification on the queues' channels (one listener per database)
    and poll (see :class:`~dbqueue.wakeup.PollPolicy`). A ``heartbeat``
    (:class:`~dbqueue.worker.heartbeat.Heartbeat`) gets what the worker handled per queue over
    the last minute, every few seconds, from the maintenance thread.

    The maintenance thread also pushes the ticks of the handlers' periodic schedules
    (:func:`dbqueue.schedules.periodic`), by ``clock`` (the current time, aware; tests inject
    their own): see :mod:`dbqueue.scheduler`.

    With a ``metrics_port`` (0: any free one) it serves Prometheus metrics on
    ``metrics_host`` while it runs (:func:`dbqueue.metrics.serve_worker`; the ``metrics`` extra).

    When its database goes away, the worker retries with back-off. With ``reconnect_for``
    (a ``burst`` worker's default: :data:`~dbqueue.worker.BURST_RECONNECT_FOR`), once a
    database has been out of reach that long (by any of its threads: a worker whose threads
    are all in a slow handler too), it gives up: :meth:`run` raises
    :class:`~dbqueue.errors.WorkerGaveUp` without waiting for the handlers still running,
    and the items in hand are left to their leases, which bring them back. A failure that
    repeats (the same operation, the same kind of error) is logged at most once every
    ``quiet_for`` seconds (default :data:`~dbqueue.worker.quiet.QUIET_FOR`, 30), the next
    line saying how many were left out (:mod:`dbqueue.worker.quiet`).
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
        chores: Sequence[Chore] = (),
        heartbeat: Heartbeat | None = None,
        summary_every: float = SUMMARY_EVERY,
        health_file: str | os.PathLike[str] | None = None,
        clock: Clock = utc_now,
        metrics_port: int | None = None,
        metrics_host: str = METRICS_HOST,
        quiet_for: float = QUIET_FOR,
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
        if (
            isinstance(summary_every, bool)
            or not isinstance(summary_every, int | float)
            or not 0 <= summary_every < float("inf")
        ):
            raise InvalidArgument(
                f"summary_every must be seconds, 0 or more (0: no summary), got {summary_every!r}"
            )
        if metrics_port is not None:
            if (
                isinstance(metrics_port, bool)
                or not isinstance(metrics_port, int)
                or not 0 <= metrics_port <= 65535
            ):
                raise InvalidArgument(
                    f"metrics_port must be a TCP port, 0 to 65535, got {metrics_port!r}"
                )
            require_prometheus()  # now, not once the worker runs
        if (
            isinstance(quiet_for, bool)
            or not isinstance(quiet_for, int | float)
            or not 0 <= quiet_for < float("inf")
        ):
            raise InvalidArgument(f"quiet_for must be seconds, 0 or more, got {quiet_for!r}")
        self.consumers = list(consumers)
        self.quiet = Throttle(quiet_for, logger=log)
        self.chores = [*chores, *schedule_chores(self.consumers, clock, self.quiet)]
        self.concurrency = concurrency
        self.burst = burst
        #: Seconds of database errors in a row after which the worker gives up (WorkerGaveUp);
        #: None: it keeps trying (a service's worker waits for its database to come back).
        self.reconnect_for = (
            reconnect_for if reconnect_for is not None or not burst else BURST_RECONNECT_FOR
        )
        self.poll = poll or PollPolicy()
        # A dead worker's items come back a third of a lease after their lease expired (and
        # an idle thread rescues a queue as soon as one of its leases expires; see _idle).
        shortest = min(c.queue.lease.total_seconds() for c in self.consumers)
        self.rescue_every = (
            rescue_every if rescue_every is not None else min(30.0, max(shortest / 3, RESCUE_FLOOR))
        )
        self.summary_every = float(summary_every)
        self.health_file = None if health_file is None else Path(health_file)
        self.stats = WorkerStats()
        self.heartbeat = heartbeat
        self.activity = Activity()
        self.tallies = Tallies()
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        #: The metrics endpoint while the worker runs with a ``metrics_port`` (its ``port``:
        #: the one it listens on, if ``metrics_port`` was 0).
        self.metrics: MetricsServer | None = None
        self.doorbell = Doorbell()
        # A burst worker ends as soon as its queues are empty, and never waits for a push: no
        # listener (no connection to open, none to wait for when it ends).
        self.listeners = [] if burst else self._listeners()
        self._all_notify = bool(self.listeners) and all(
            c.queue.channel is not None for c in self.consumers
        )
        self._budget = max_messages
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._releasing = threading.Event()
        self._done = threading.Event()
        self._inflight: dict[int, InFlight] = {}
        self._fatal: BaseException | None = None
        self._abandoned = threading.Event()
        self._outages = Outages()
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
            listeners.append(
                Listener(first.connect_listener, channels, self.doorbell, quiet=self.quiet)
            )
        return listeners

    @property
    def listening(self) -> bool:
        """Whether a push to any of the worker's queues would ring its doorbell right now
        (otherwise idle threads keep polling)."""
        return self._all_notify and all(x.listening for x in self.listeners)

    def run(self, *, handle_signals: bool = True) -> WorkerStats:
        """Run until stopped; return the tallies. Raises a fatal :class:`DBQueueError`."""
        start = time.monotonic()
        if self.metrics_port is not None:
            self.metrics = serve_worker(
                self.tallies, self.consumers, self.metrics_port, self.metrics_host
            )
            log.info("metrics on http://%s:%d/metrics", self.metrics_host, self.metrics.port)
        restore = self._install_signals() if handle_signals else {}
        for listener in self.listeners:
            listener.start()
        # Daemon threads: a worker that stops waiting for its database (see _abandon) leaves
        # a thread in a handler to it, and the process may exit meanwhile. Otherwise run()
        # joins every thread before it returns.
        maintenance = threading.Thread(
            target=self._maintain, name="dbqueue-maintenance", daemon=True
        )
        leases = threading.Thread(target=self._keep_leases, name="dbqueue-leases", daemon=True)
        threads = [
            threading.Thread(target=self._work, args=(i,), name=f"dbqueue-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        log.info(
            "worker started: %d thread(s) on %s",
            self.concurrency,
            ", ".join(c.queue.name for c in self.consumers),
        )
        try:
            maintenance.start()
            leases.start()
            for t in threads:
                t.start()
            for t in threads:
                # A timed join lets the main thread run signal handlers. Once the worker
                # stopped waiting for its database, a thread still in a handler is left to
                # finish on its own: nothing it did could be recorded now.
                while t.is_alive() and not self._abandoned.is_set():
                    t.join(0.2)
        finally:
            if any(t.is_alive() for t in threads):  # abandoned, or run() is being unwound
                self._abandoned.set()
            self._stopping.set()
            self._done.set()
            wait = ABANDON_WAIT if self._abandoned.is_set() else None
            maintenance.join(wait)
            if leases.ident is not None:  # started
                leases.join(wait)
            for listener in self.listeners:
                listener.stop()
            for signum, handler in restore.items():
                signal.signal(signum, handler)
            if self.metrics is not None:
                self.metrics.close()
                self.metrics = None
            self.stats.seconds = time.monotonic() - start
        log.info(
            "worker stopped: %d handled, %d failed, %d attempt(s) to retry, in %d batches, "
            "%.1f s%s",
            self.stats.handled,
            self.stats.failed,
            self.stats.retried,
            self.stats.batches,
            self.stats.seconds,
            "; the items in hand are left to their leases" if self._abandoned.is_set() else "",
        )
        if self._fatal is not None:
            raise self._fatal
        return self.stats

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
        empty_rounds, last_work, retry = 0, time.monotonic(), Retry()
        due = Due()
        # Items handled successfully are acked by the thread's next pop of the same queue, in
        # the same statement (ack_pop): one commit per batch instead of two. They are acked
        # on their own before a pop of another queue, and when the thread stops.
        pending: Pending | None = None
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
                    started = time.monotonic()
                    try:
                        if pending is not None:
                            acked, items = queue.ack_pop(pending.items, n)
                            self._count_lost(queue, len(pending.items) - acked)
                            pending = None
                        else:
                            items = queue.pop(n)
                    except Exception as exc:
                        self._unclaim(n)
                        operation = "ack and pop" if pending is not None else "pop"
                        self._database_error(queue, exc, retry, operation)
                        errored = True
                        continue
                    self._reached(queue, retry, started)
                    self._unclaim(n - len(items))
                    if items:
                        worked = True
                        try:
                            ok = self._process(consumer, items, retry)
                        except DBQueueError as exc:
                            self._fail_fatally(queue, exc)
                            continue
                        pending = Pending(queue, ok) if ok else None
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
        self, order: Sequence[Consumer], seen: int, empty_rounds: int, idle_for: float, due: Due
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
            queue = consumer.queue
            try:
                when = queue.next_due()
            except Exception as exc:  # the next pop meets the outage and handles it
                if is_outage(exc):
                    self._outages.failed(queue, exc)
                self.quiet.failure(
                    f"queue {queue.name}: next_due",
                    exc,
                    "queue %s: next_due failed (%s)",
                    queue.name,
                    exc,
                    level=logging.DEBUG,
                )
                quietly(queue.disconnect)
                continue
            if when is not None:
                due.append((clock + (when - now).total_seconds() + DUE_MARGIN, queue))
        return sorted(due, key=lambda d: d[0])

    def _flush(self, pending: Pending, retry: Retry) -> None:
        """Ack handled items on their own (retrying through database errors)."""
        self._settle(pending.queue, pending.items, [], [], retry)
