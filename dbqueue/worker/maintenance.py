"""The worker's maintenance thread: rescue expired leases, keep the queues' tables up
(:mod:`dbqueue.upkeep`: a split queue's heads, compaction of tables a long transaction grew),
send the worker's heartbeat, log its summary, and do the chores a front adds (Django's task
result retention). Leases are extended by a thread of their own
(:mod:`dbqueue.worker.leases`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from dbqueue.outage import is_outage
from dbqueue.upkeep.compaction import CHECK_EVERY
from dbqueue.wakeup import quietly
from dbqueue.worker.consumer import WorkerQueue
from dbqueue.worker.state import WorkerBase, log
from dbqueue.worker.summary import Summary
from dbqueue.worker.summary import log as summary_log

#: A slow periodic rescue is spaced to this many times its duration: a ring of 200,000 slots
#: takes 0.4 to 0.5 s to rescue, which every third of a 10-s lease would keep a database
#: connection busy an eighth of the time, per worker (bench/reports/2026-11-27-lease.md).
RESCUE_SPACING = 20


def rescue_interval(every: float, took: float) -> float:
    """Seconds from one periodic rescue to the next: ``every``, or :data:`RESCUE_SPACING`
    times the ``took`` seconds the last one took if that is longer."""
    return max(every, took * RESCUE_SPACING)


class Maintenance(WorkerBase):
    """The maintenance part of :class:`~dbqueue.worker.Worker`."""

    def _maintain(self) -> None:
        queues = {id(c.queue): c.queue for c in self.consumers}
        tick = max(min(self.rescue_every, CHECK_EVERY), 0.05)
        next_rescue = next_upkeep = next_beat = time.monotonic()
        summary = Summary(self.stats, next_rescue)
        next_summary = next_rescue + self.summary_every
        beating = True  # the last heartbeat went through (a failure is logged once a run)
        chores_due = [next_rescue] * len(self.chores)
        try:
            # Before the loop: a burst that finds nothing to do still does its chores once.
            self._do_chores(chores_due)
            while not self._done.is_set():
                self._give_up_if_due()  # (the lease thread too: this one may be in a connect)
                now = time.monotonic()
                if now >= next_rescue and not self._stopping.is_set():
                    for queue in queues.values():
                        self._rescue(queue)
                    took = time.monotonic() - now
                    next_rescue = now + rescue_interval(self.rescue_every, took)
                if now >= next_upkeep and not self._stopping.is_set():
                    for queue in queues.values():
                        self._upkeep(queue)
                    next_upkeep = now + CHECK_EVERY
                if self.heartbeat is not None and now >= next_beat and not self._abandoned.is_set():
                    beating = self._beat(queues.values(), beating)
                    next_beat = now + self.heartbeat.every
                if self.summary_every and now >= next_summary:
                    summary_log.info("%s", summary.line(queues.values(), now))
                    next_summary = now + self.summary_every
                if not self._stopping.is_set():
                    self._do_chores(chores_due)
                self._done.wait(tick)
        finally:
            if self.heartbeat is not None and not self._abandoned.is_set():
                self._beat(queues.values(), beating, stopped=True)
            for queue in queues.values():
                quietly(queue.disconnect)
            for chore in self.chores:
                quietly(chore.disconnect)

    def _do_chores(self, due: list[float]) -> None:
        """Do the chores whose turn it is (``due``: when each is next, on the monotonic
        clock)."""
        for index, chore in enumerate(self.chores):
            now = time.monotonic()
            if now < due[index]:
                continue
            due[index] = now + chore.every
            try:
                done = chore.run()
            except Exception as exc:
                self.quiet.failure(
                    chore.name,
                    exc,
                    "%s failed (%s); tried again in %.0f s",
                    chore.name,
                    exc,
                    chore.every,
                )
                quietly(chore.disconnect)
                continue
            if done:
                log.info("%s: %s", chore.name, done)

    def _guarded[T](self, queue: WorkerQueue, what: str, call: Callable[[], T]) -> T | None:
        """``call()`` for the maintenance thread: a failure drops the thread's connection
        (the next round reconnects) and is logged, at most once every ``quiet_for`` seconds
        while it repeats (a compaction check fails ten times a second while the database is
        away); None then. An outage counts towards the worker's ``reconnect_for``."""
        try:
            return call()
        except Exception as exc:
            if is_outage(exc):
                self._outages.failed(queue, exc)
            self.quiet.failure(
                f"queue {queue.name}: {what}",
                exc,
                "queue %s: %s failed (%s)",
                queue.name,
                what,
                exc,
            )
            quietly(queue.disconnect)
            return None

    def _rescue(self, queue: WorkerQueue) -> None:
        started = time.monotonic()
        result = self._guarded(queue, "rescue", queue.rescue)
        if result is None:
            return
        self._outages.reached(queue, started)  # (a rescue is a statement: it answered)
        self.tallies.rescued(queue.name, ready=result.ready, failed=result.failed)
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

    def _upkeep(self, queue: WorkerQueue) -> None:
        report = self._guarded(queue, "upkeep", queue.upkeep)
        if report is None or report.compaction is None:
            return
        result = report.compaction
        if result.compacted:
            log.info(
                "queue %s: compacted, %s -> %s in %.0f ms (a long transaction had kept vacuum "
                "from removing the versions messages leave behind)",
                queue.name,
                mib(result.size_before),
                mib(result.size_after),
                result.seconds * 1000,
            )
            return
        # Tried again every few seconds while a transaction holds the horizon: said once in
        # a while (dbqueue.worker.quiet), not at every attempt.
        self.quiet.warning(
            (f"queue {queue.name}: compaction", "skipped"),
            "queue %s: grew to %s while a long transaction keeps vacuum from removing the "
            "versions messages leave behind; not compacted yet: %s",
            queue.name,
            mib(result.size_before),
            result.skipped,
        )

    def _beat(self, queues: Iterable[WorkerQueue], beating: bool, *, stopped: bool = False) -> bool:
        """Hand the worker's report to its heartbeat; whether it went through. A failure is
        logged at WARNING after a success, and only at DEBUG while it keeps failing (a
        database without the heartbeat's table, say): the heartbeat never stops the work."""
        assert self.heartbeat is not None
        try:
            self.heartbeat.beat(self.activity.report(queues, stopped=stopped))
        except Exception as exc:
            log.log(
                logging.WARNING if beating else logging.DEBUG,
                "the worker's heartbeat failed (%s); it keeps working, and tries again",
                exc,
            )
            return False
        return True


def mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
