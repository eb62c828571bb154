"""What a worker tells the world about itself: who it is, that it is alive, and what it
handled per queue over the last minute. Its maintenance thread hands a :class:`WorkerReport`
to a :class:`Heartbeat` every few seconds, and once more when it stops; a front stores it
where operators read it (Django: ``dbqueue_django.worker_rows``, which ``queuestats`` sums
into a queue's throughput). The handlers' threads only add to counters in memory."""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from dbqueue.worker.consumer import WorkerQueue

#: Seconds the rolling counts cover: a report says what was handled in the last minute.
WINDOW = 60
#: Seconds between two heartbeats, unless the heartbeat says otherwise.
BEAT_EVERY = 5.0
#: A worker whose last heartbeat is older than this is taken for gone (it was killed, or its
#: database is out of reach): a few missed beats, not one slow one.
ALIVE_WITHIN = dt.timedelta(seconds=4 * BEAT_EVERY)


@dataclass(frozen=True, slots=True)
class QueueActivity:
    """What a worker did with one of its queues over the last :data:`WINDOW` seconds."""

    queue: WorkerQueue
    #: Items its handler handled successfully.
    handled: int
    #: Failed attempts (to be retried, or failed for good).
    failed: int


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One heartbeat of a worker."""

    #: Unique to this run of this worker: host, process id and a random suffix.
    worker_id: str
    hostname: str
    pid: int
    started_at: dt.datetime
    #: The last report of a worker that stopped.
    stopped: bool
    queues: tuple[QueueActivity, ...]


class Heartbeat(Protocol):
    """Where a worker's reports go: :meth:`beat` runs on the maintenance thread (with that
    thread's own connections) every :attr:`every` seconds, and once more with ``stopped``
    set when the worker stops. An exception is logged, and the worker carries on."""

    @property
    def every(self) -> float:
        """Seconds between two beats (:data:`BEAT_EVERY`)."""

    def beat(self, report: WorkerReport) -> None:
        """Store ``report``."""


class RollingCount:
    """Events over the last :data:`WINDOW` seconds, in one-second buckets (``now``: seconds on
    the monotonic clock)."""

    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        self._buckets: deque[list[int]] = deque()  # [second, count], oldest first

    def add(self, n: int, now: float) -> None:
        second = int(now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([second, n])
        self._forget(second)

    def total(self, now: float) -> int:
        self._forget(int(now))
        return sum(count for _, count in self._buckets)

    def _forget(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] <= second - WINDOW:
            self._buckets.popleft()


class Activity:
    """A worker's identity and its rolling counts per queue. Thread-safe: the handlers'
    threads add, the maintenance thread reports."""

    def __init__(self) -> None:
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.worker_id = f"{self.hostname}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.started_at = dt.datetime.now(dt.UTC)
        self._lock = threading.Lock()
        self._counts: dict[int, tuple[RollingCount, RollingCount]] = {}

    def add(self, queue: WorkerQueue, handled: int, failed: int, now: float | None = None) -> None:
        """Count a batch of ``queue``: ``handled`` items handled, ``failed`` attempts failed."""
        now = time.monotonic() if now is None else now
        with self._lock:
            counts = self._counts.setdefault(id(queue), (RollingCount(), RollingCount()))
            counts[0].add(handled, now)
            counts[1].add(failed, now)

    def report(
        self, queues: Iterable[WorkerQueue], *, stopped: bool = False, now: float | None = None
    ) -> WorkerReport:
        """The report of ``queues`` (a queue with nothing counted reports zeros)."""
        now = time.monotonic() if now is None else now
        activities = []
        with self._lock:
            for queue in queues:
                counts = self._counts.get(id(queue))
                handled, failed = (c.total(now) for c in counts) if counts else (0, 0)
                activities.append(QueueActivity(queue, handled, failed))
        return WorkerReport(
            self.worker_id, self.hostname, self.pid, self.started_at, stopped, tuple(activities)
        )
