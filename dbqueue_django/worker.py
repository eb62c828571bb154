"""The core worker over Django: each queue model with a handler becomes a consumer whose
operations run on the worker thread's own Django connection."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.db import connections

from dbqueue.conninfo import libpq_conninfo
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import FrontWorkerQueue, worker_channel
from dbqueue_django.handlers import Handler
from dbqueue_django.queue import DjangoQueue


class DjangoWorkerQueue(FrontWorkerQueue):
    """Implements :class:`dbqueue.worker.WorkerQueue` for one queue model on one alias: the
    model's queue runs on the worker thread's own Django connection."""

    def __init__(self, queue: DjangoQueue[Any]) -> None:
        self.queue = queue
        self.alias = queue.alias
        core = queue.core
        self._channel = worker_channel(core)
        self._lease = core.spec.options.lease

    @property
    def name(self) -> str:
        return f"{self.queue.model._meta.label}@{self.alias}"

    @property
    def channel(self) -> str | None:
        return self._channel

    @property
    def lease(self) -> dt.timedelta:
        return self._lease

    @property
    def max_attempts(self) -> int:
        return self.queue.core.spec.options.max_attempts

    @property
    def database(self) -> str:
        return self.alias

    def connect_listener(self) -> Any:
        """A new psycopg connection with the alias's settings (PostgreSQL only)."""
        wrapper = connections[self.alias]
        if wrapper.vendor != "postgresql":
            return None
        import psycopg

        info = libpq_conninfo(wrapper.get_connection_params())
        return psycopg.connect(info, autocommit=True)

    def _front(self) -> DjangoQueue[Any]:
        return self.queue

    def disconnect(self) -> None:
        connections[self.alias].close()


def build_worker(
    handlers: Iterable[Handler],
    *,
    database: str | None = None,
    concurrency: int = 1,
    batch_size: int | None = None,
    burst: bool = False,
    max_messages: int | None = None,
    reconnect_for: float | None = None,
) -> Worker:
    """A worker running ``handlers``, each queue on ``database`` (default: the router's);
    ``reconnect_for``: see :class:`dbqueue.worker.Worker`."""
    consumers = [
        Consumer(
            DjangoWorkerQueue(h.model.queue.using(database) if database else h.model.queue),
            h.func,
            batch=h.batch,
            batch_size=batch_size or h.batch_size,
        )
        for h in handlers
    ]
    return Worker(
        consumers,
        concurrency=concurrency,
        burst=burst,
        max_messages=max_messages,
        reconnect_for=reconnect_for,
    )
