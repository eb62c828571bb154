"""The worker's periodic summary: every ``summary_every`` seconds one INFO line says what it
handled and failed since the last one, at what rate, and how old each queue's oldest ready
item is (the backlog). The per-batch lines are at DEBUG: at a hundred orders a second they
made megabytes of log a minute."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from dbqueue.message import format_age
from dbqueue.wakeup import quietly
from dbqueue.worker.consumer import WorkerQueue, WorkerStats

#: The summary's own logger, so a logging configuration can keep it at INFO while the rest of
#: ``dbqueue`` logs warnings only.
log = logging.getLogger("dbqueue.worker.summary")


class Summary:
    """What the next summary line counts from: the tallies at the last one."""

    def __init__(self, stats: WorkerStats, now: float | None = None) -> None:
        self._stats = stats
        self._handled = stats.handled
        self._failed = stats.failed + stats.retried
        self._since = time.monotonic() if now is None else now

    def line(self, queues: Iterable[WorkerQueue], now: float | None = None) -> str:
        """The summary since the last line (or the start), then start counting again. A
        queue whose age cannot be read (the database is away) shows ``?``."""
        now = time.monotonic() if now is None else now
        handled = self._stats.handled - self._handled
        failed = self._stats.failed + self._stats.retried - self._failed
        seconds = max(now - self._since, 1e-9)
        ages = ", ".join(f"{q.name} {oldest_ready(q)}" for q in queues)
        self._handled += handled
        self._failed += failed
        self._since = now
        return (
            f"summary of the last {seconds:.0f} s: {handled:,} handled, {failed:,} failed "
            f"attempt(s), {handled / seconds:,.1f}/s; oldest ready: {ages}"
        )


def oldest_ready(queue: WorkerQueue) -> str:
    """The age of ``queue``'s oldest ready item as the summary shows it (``-``: none)."""
    try:
        return format_age(queue.oldest_ready_age())
    except Exception:  # the database is away: the summary is still worth a line
        quietly(queue.disconnect)
        return "?"
