"""A queue as the worker uses it (:class:`dbqueue.worker.WorkerQueue`): its operations are the
front layer's (:class:`~dbqueue.front.FrontQueue`), run with the worker's choices (acks and
fails of items whose lease may have moved on are not errors, the upkeep of the queue's tables).

:class:`FrontWorkerQueue` is what every adapter shares; :class:`ExecutorQueue` runs a core
queue without a framework, each worker thread on its own executor from ``connect()``.
"""

from __future__ import annotations

import datetime as dt
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dbqueue.executor import Executor
from dbqueue.front import AnyQueue, ExecutorFront, FrontQueue
from dbqueue.message import RescueResult, State
from dbqueue.schedules import Schedule
from dbqueue.unreadable import counting_failed
from dbqueue.upkeep.rounds import UpkeepReport

#: Guards the workers' threads' counts of unreadable messages (FrontWorkerQueue).
_UNREADABLE_LOCK = threading.Lock()


class FrontWorkerQueue(ABC):
    """The worker's operations over the front queue of the calling thread (``_front``)."""

    @abstractmethod
    def _front(self) -> FrontQueue[Any]:
        """The queue on the calling thread's connection."""

    #: Unreadable messages this queue's pops failed for good, not yet taken by the worker.
    _failed_unreadable = 0

    def pop(self, n: int) -> list[Any]:
        with self._counting_unreadable():
            return self._front().pop_batch(n)

    def ack(self, items: Sequence[Any]) -> list[int]:
        return self._front().ack(items, strict=False)

    def ack_pop(self, items: Sequence[Any], n: int) -> tuple[int, list[Any]]:
        with self._counting_unreadable():
            return self._front().ack_pop(items, n)

    @contextmanager
    def _counting_unreadable(self) -> Iterator[None]:
        """Add to :meth:`take_failed_unreadable` the unreadable messages a pop in the block
        failed for good: the items it returns leave them out, so the worker would not count
        them as failed otherwise (see :mod:`dbqueue.unreadable`)."""
        with counting_failed() as counted:
            try:
                yield
            finally:
                if counted.count:
                    with _UNREADABLE_LOCK:
                        self._failed_unreadable += counted.count

    def take_failed_unreadable(self) -> int:
        """How many unreadable messages this queue's pops failed for good since the last call
        (the worker counts them as failed)."""
        with _UNREADABLE_LOCK:
            taken, self._failed_unreadable = self._failed_unreadable, 0
        return taken

    def fail(self, items: Sequence[Any], errors: Sequence[str]) -> Mapping[int, State]:
        return self._front().fail(items, list(errors), strict=False)

    def extend(self, items: Sequence[Any]) -> list[int]:
        return self._front().extend(items)

    def rescue(self) -> RescueResult:
        return self._front().rescue()

    def next_due(self) -> dt.datetime | None:
        return self._front().next_due()

    def oldest_ready_age(self) -> dt.timedelta | None:
        age: dt.timedelta | None = self._front().stats()["oldest_ready_age"]
        return age

    def upkeep(self) -> UpkeepReport:
        return self._front().upkeep()

    @property
    def table(self) -> str:
        """The queue's table: how spans name it (:mod:`dbqueue.tracing`)."""
        return self._front().spec.table

    def stats(self) -> dict[str, Any]:
        """The queue's :meth:`~dbqueue.front.FrontQueue.stats` (what a metrics scrape reads)."""
        return self._front().stats()

    def pushed(self) -> int:
        """The queue's :meth:`~dbqueue.front.FrontQueue.pushed`."""
        return self._front().pushed()

    def release(self, items: Sequence[Any]) -> list[int]:
        return self._front().release(items)

    def on_connection[T](self, work: Callable[[Executor], T]) -> T:
        """``work(ex)`` on the calling thread's connection (see
        :class:`dbqueue.scheduler.ScheduleTarget`)."""
        _, ex = self._front()._bind()
        return work(ex)

    def push_if_claimed(
        self, claim: Callable[[Executor], bool], payload: Callable[[], Mapping[str, Any]]
    ) -> int | None:
        """Push ``payload()`` in one transaction with ``claim(ex)``, if the claim takes: a
        schedule's tick (see :class:`dbqueue.scheduler.ScheduleTarget`)."""
        front = self._front()
        core, ex = front._bind()
        with ex.atomic():
            if not claim(ex):
                return None
            # A consumer group's tick goes to the queue, which delivers it to every group.
            return core.pushing_queue().push(ex, front._payload(payload()))


class ExecutorQueue(FrontWorkerQueue):
    """Implements :class:`dbqueue.worker.WorkerQueue` over executors made by ``connect``
    (autocommit connections: each pop, ack and fail commits on its own).

    ``make`` builds a model instance from a popped message's columns (a front's
    ``_instance``; without it the worker's items are the messages). ``close`` closes an
    executor's connection; by default its ``close()`` method. ``listen`` opens a new psycopg
    connection for LISTEN (PostgreSQL), for workers to wake up at a push; ``database`` names
    the database (queues in one database share a listener).
    """

    def __init__(
        self,
        queue: AnyQueue,
        connect: Callable[[], Executor],
        *,
        make: Callable[[dict[str, Any], dict[str, Any]], Any] | None = None,
        close: Callable[[Executor], object] | None = None,
        name: str | None = None,
        listen: Callable[[], Any] | None = None,
        database: str = "default",
    ) -> None:
        self.queue = queue
        self._connect = connect
        self._make = make
        self._close = close or _close
        self._name = name or queue.spec.table
        self._local = threading.local()
        self._listen = listen
        self._database = database

    @property
    def name(self) -> str:
        return self._name

    @property
    def channel(self) -> str | None:
        return worker_channel(self.queue) if self._listen is not None else None

    @property
    def lease(self) -> dt.timedelta:
        return self.queue.spec.options.lease

    @property
    def max_attempts(self) -> int:
        return self.queue.spec.options.max_attempts

    @property
    def queue_schedules(self) -> tuple[Schedule, ...]:
        """The queue's own periodic schedules (its option ``schedule``)."""
        return self.queue.spec.options.schedule

    @property
    def database(self) -> str:
        return self._database

    def connect_listener(self) -> Any:
        return self._listen() if self._listen is not None else None

    def _front(self) -> ExecutorFront[Any]:
        front: ExecutorFront[Any] | None = getattr(self._local, "front", None)
        if front is None:
            front = ExecutorFront(self.queue, self._connect(), self._make)
            self._local.front = front
        return front

    def disconnect(self) -> None:
        front: ExecutorFront[Any] | None = getattr(self._local, "front", None)
        self._local.front = None
        if front is not None:
            self._close(front.ex)


def worker_channel(queue: AnyQueue) -> str | None:
    """The channel a worker LISTENs on for ``queue``, or None when pushes never notify."""
    if queue.dialect.supports_listen_notify and queue.spec.options.notify_interval is not None:
        return queue.spec.channel
    return None


def _close(ex: Executor) -> None:
    close = getattr(ex, "close", None)
    if close is not None:
        close()
