"""The worker's maintenance thread: rescue expired leases, compact grown tables, and extend
the leases of batches still being handled."""

from __future__ import annotations

import time
from collections.abc import Callable

from dbqueue.compaction import BUSY, CHECK_EVERY
from dbqueue.wakeup import quietly
from dbqueue.worker.consumer import WorkerQueue
from dbqueue.worker.state import WorkerBase, log


class Maintenance(WorkerBase):
    """The maintenance part of :class:`~dbqueue.worker.Worker`."""

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
                mib(result.size_before),
                mib(result.size_after),
                result.seconds * 1000,
            )
        else:
            log.warning(
                "queue %s: grew to %s while a long transaction keeps vacuum from removing the "
                "versions messages leave behind, and could not be compacted: %s",
                queue.name,
                mib(result.size_before),
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


def mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
