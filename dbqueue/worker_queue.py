"""A queue of either layout (:class:`~dbqueue.split.SplitQueue`,
:class:`~dbqueue.ring.RingQueue`) as the worker uses it, without a framework: each worker thread
gets its own executor from ``connect()``. For a ring, ``rescue`` is its sweeper."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbqueue.compaction import CompactResult
from dbqueue.executor import Executor
from dbqueue.message import Message, RescueResult, State
from dbqueue.ring import RingQueue
from dbqueue.split import SplitQueue

#: A queue of either layout: both have the same operations.
AnyQueue = SplitQueue | RingQueue


class ExecutorQueue:
    """Implements :class:`dbqueue.worker.WorkerQueue` over executors made by ``connect``
    (autocommit connections: each pop, ack and fail commits on its own).

    ``close`` closes an executor's connection; by default its ``close()`` method. ``listen``
    opens a new psycopg connection for LISTEN (PostgreSQL), for workers to wake up at a push;
    ``database`` names the database (queues in one database share a listener).
    """

    def __init__(
        self,
        queue: AnyQueue,
        connect: Callable[[], Executor],
        *,
        close: Callable[[Executor], object] | None = None,
        name: str | None = None,
        listen: Callable[[], Any] | None = None,
        database: str = "default",
    ) -> None:
        self.queue = queue
        self._connect = connect
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
    def database(self) -> str:
        return self._database

    def connect_listener(self) -> Any:
        return self._listen() if self._listen is not None else None

    def _ex(self) -> Executor:
        ex: Executor | None = getattr(self._local, "ex", None)
        if ex is None:
            ex = self._local.ex = self._connect()
        return ex

    def pop(self, n: int) -> list[Message]:
        return self.queue.pop_batch(self._ex(), n)

    def ack(self, items: Sequence[Any]) -> list[int]:
        return self.queue.ack(self._ex(), items, strict=False)

    def ack_pop(self, items: Sequence[Any], n: int) -> tuple[int, list[Message]]:
        return self.queue.ack_pop(self._ex(), items, n)

    def fail(self, items: Sequence[Any], errors: Sequence[str]) -> Mapping[int, State]:
        return self.queue.fail(self._ex(), items, list(errors), strict=False)

    def extend(self, items: Sequence[Any]) -> list[int]:
        return self.queue.extend(self._ex(), items)

    def rescue(self) -> RescueResult:
        return self.queue.rescue(self._ex())

    def next_due(self) -> dt.datetime | None:
        return self.queue.next_due(self._ex())

    def compact(self) -> CompactResult | None:
        return self.queue.compact_if_grown(self._ex())

    def release(self, items: Sequence[Any]) -> list[int]:
        return self.queue.release(self._ex(), items)

    def disconnect(self) -> None:
        ex = getattr(self._local, "ex", None)
        self._local.ex = None
        if ex is not None:
            self._close(ex)


def worker_channel(queue: AnyQueue) -> str | None:
    """The channel a worker LISTENs on for ``queue``, or None when pushes never notify."""
    if queue.dialect.supports_listen_notify and queue.spec.options.notify_interval is not None:
        return queue.spec.channel
    return None


def _close(ex: Executor) -> None:
    close = getattr(ex, "close", None)
    if close is not None:
        close()
