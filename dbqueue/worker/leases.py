"""The lease keeper: a thread of its own (``dbqueue-leases``) that extends the leases of the
batches being handled every third of their lease, touches the worker's health file, and gives
up on a database out of reach for the worker's ``reconnect_for`` (its handlers' threads may
all be in a slow handler, meeting no database).

It does nothing else, so neither a slow handler nor a long maintenance chore (a compaction, a
rescue of a large ring) can let a lease lapse while its item is still being worked on; and a
health file it keeps fresh says the worker's process and threads are running."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

from dbqueue.outage import is_outage
from dbqueue.wakeup import quietly
from dbqueue.worker.consumer import WorkerQueue
from dbqueue.worker.state import WorkerBase, log

#: Seconds between two touches of the health file: a probe allows a few times this.
HEALTH_EVERY = 5.0
#: The lease thread's longest sleep, in seconds (it also wakes up when the worker stops).
LEASE_TICK_MAX = 1.0


class Leases(WorkerBase):
    """The lease part of :class:`~dbqueue.worker.Worker`."""

    def _keep_leases(self) -> None:
        """The lease thread: extend what is in hand and touch the health file until the
        worker is done; then close the thread's connections."""
        queues = {id(c.queue): c.queue for c in self.consumers}
        shortest = min(q.lease.total_seconds() for q in queues.values())
        # A sixth of the shortest lease: a batch is extended between a third and a half of
        # its lease after the last extension, well before it lapses.
        tick = max(min(shortest / 6, LEASE_TICK_MAX), 0.01)
        next_touch = time.monotonic()
        touching = True  # the last touch went through (a failure is logged once a run)
        try:
            while not self._done.is_set():
                self._extend_leases()
                self._count_failed_unreadable(queues.values())
                self._give_up_if_due()
                now = time.monotonic()
                if self.health_file is not None and now >= next_touch:
                    touching = touch(self.health_file, touching)
                    next_touch = now + HEALTH_EVERY
                self._done.wait(tick)
        finally:
            # After the handlers' threads' last pop (run() joins them first, then this thread):
            # the closing summary counts every one.
            self._count_failed_unreadable(queues.values())
            for queue in queues.values():
                quietly(queue.disconnect)

    def _count_failed_unreadable(self, queues: Iterable[WorkerQueue]) -> None:
        """Count as failed, in the run's stats, tallies (the metrics) and activity, the
        unreadable messages the queues' pops failed for good: the core fails them as it pops
        them, so no handler sees them (see :mod:`dbqueue.unreadable`). Done on this thread,
        not beside the pop: it wakes at least once a second, and ends after the handlers'
        threads and before the closing summary; the pops stay as they are."""
        for queue in queues:
            failed = queue.take_failed_unreadable()
            if not failed:
                continue
            with self._lock:
                self.stats.failed += failed
            self.activity.add(queue, 0, failed)
            self.tallies.handled(queue.name, ok=0, retried=0, failed=failed, durations=[])

    def _extend_leases(self) -> None:
        """Extend the leases of the batches in hand whose last extension (or pop) is a third
        of their lease old."""
        now = time.monotonic()
        with self._lock:
            batches = list(self._inflight.values())
        for batch in batches:
            if now - batch.extended_at < batch.queue.lease.total_seconds() / 3:
                continue
            if self._abandoned.is_set():  # no more tries: the leases are left to expire
                return
            queue = batch.queue
            started = time.monotonic()
            try:
                queue.extend(batch.items)
                batch.extended_at = now
            except Exception as exc:
                if is_outage(exc):
                    self._outages.failed(queue, exc)
                self.quiet.failure(
                    f"queue {queue.name}: lease extension",
                    exc,
                    "queue %s: lease extension failed (%s)",
                    queue.name,
                    exc,
                )
                quietly(queue.disconnect)
            else:
                self._outages.reached(queue, started)


def touch(path: Path, touching: bool = True) -> bool:
    """Set ``path``'s modification time to now, creating the file if need be; whether that
    went through. A failure (a read-only or missing directory) is logged at WARNING after a
    success, at DEBUG while it keeps failing: a probe reading the file fails, as it should."""
    try:
        path.touch()
    except OSError as exc:
        level = logging.WARNING if touching else logging.DEBUG
        log.log(level, "could not touch the health file %s (%s)", path, exc)
        return False
    return True
