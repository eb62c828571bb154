"""The core worker over Django: each queue model with a handler becomes a consumer whose
operations run on the worker thread's own Django connection, and its heartbeat becomes rows of
:class:`~dbqueue_django.worker_rows.QueueWorker` in each queue's database."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from typing import Any

from django.db import connections

from dbqueue.conninfo import libpq_conninfo
from dbqueue.schedules import Schedule
from dbqueue.worker import Consumer, Worker, WorkerReport
from dbqueue.worker.heartbeat import BEAT_EVERY
from dbqueue.worker.loop import SUMMARY_EVERY
from dbqueue.worker_queue import FrontWorkerQueue, worker_channel
from dbqueue_django.handlers import Handler
from dbqueue_django.models import TaskItem
from dbqueue_django.queue import DjangoGroupQueue, DjangoQueue
from dbqueue_django.worker_rows import record_beat


class DjangoWorkerQueue(FrontWorkerQueue):
    """Implements :class:`dbqueue.worker.WorkerQueue` for one queue model on one alias: the
    model's queue runs on the worker thread's own Django connection."""

    def __init__(self, queue: DjangoQueue[Any] | DjangoGroupQueue[Any]) -> None:
        self.queue = queue
        self.alias = queue.alias
        core = queue.core
        self._channel = worker_channel(core)
        self._lease = core.spec.options.lease

    @property
    def label(self) -> str:
        """How heartbeats and stats name the queue: ``app.Model``, or for a consumer group
        ``app.Model[group]``."""
        return queue_label(self.queue)

    @property
    def name(self) -> str:
        return f"{self.label}@{self.alias}"

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
    def queue_schedules(self) -> tuple[Schedule, ...]:
        """The queue's own periodic schedules (its option ``schedule``)."""
        return self.queue.spec.options.schedule

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

    def _front(self) -> DjangoQueue[Any] | DjangoGroupQueue[Any]:
        return self.queue

    def disconnect(self) -> None:
        connections[self.alias].close()


class DjangoHeartbeat:
    """Implements :class:`dbqueue.worker.Heartbeat`: each report is written as rows of
    :class:`~dbqueue_django.worker_rows.QueueWorker`, those of a queue in its own database
    (where ``queuestats`` reads its counts), on the maintenance thread's connections."""

    def __init__(self, every: float = BEAT_EVERY) -> None:
        self.every = every

    def beat(self, report: WorkerReport) -> None:
        by_alias: dict[str, list[tuple[str, int, int]]] = {}
        for activity in report.queues:
            queue = activity.queue
            if isinstance(queue, DjangoWorkerQueue):
                row = (queue.label, activity.handled, activity.failed)
                by_alias.setdefault(queue.alias, []).append(row)
        failure: Exception | None = None
        for alias, rows in by_alias.items():
            try:
                record_beat(alias, report, rows)
            except Exception as exc:  # a database out of reach, or not migrated
                # Dropped: the next beat reconnects (and a database that is back is used).
                connections[alias].close()
                failure = failure or exc
        if failure is not None:
            raise failure


def queue_label(queue: DjangoQueue[Any] | DjangoGroupQueue[Any]) -> str:
    """``app.Model``, or for a consumer group's queue ``app.Model[group]``: how the worker's
    logs, heartbeats, ``queuestats`` and ``queuehealth`` name a queue."""
    label = queue.model._meta.label
    return f"{label}[{queue.name}]" if isinstance(queue, DjangoGroupQueue) else label


def handler_queue(h: Handler, database: str | None) -> DjangoQueue[Any] | DjangoGroupQueue[Any]:
    """The queue ``h`` consumes, on ``database`` (default: the router's): its model's, or for
    a handler of a consumer group that group's."""
    queue: DjangoQueue[Any] = h.model.queue.using(database) if database else h.model.queue
    return queue.group(h.group) if h.group is not None else queue


def build_worker(
    handlers: Iterable[Handler],
    *,
    database: str | None = None,
    concurrency: int = 1,
    batch_size: int | None = None,
    burst: bool = False,
    max_messages: int | None = None,
    reconnect_for: float | None = None,
    heartbeat: DjangoHeartbeat | None = None,
    summary_every: float = SUMMARY_EVERY,
    health_file: str | os.PathLike[str] | None = None,
    metrics_port: int | None = None,
) -> Worker:
    """A worker running ``handlers``, each queue on ``database`` (default: the router's);
    ``reconnect_for``, ``summary_every``, ``health_file`` and ``metrics_port``: see
    :class:`dbqueue.worker.Worker`. A worker that runs tasks also
    applies the Tasks backends' ``result_retention``. Its heartbeat (default: a
    :class:`DjangoHeartbeat`) is what ``queuestats`` reads a queue's throughput from."""
    consumers = [
        Consumer(
            DjangoWorkerQueue(handler_queue(h, database)),
            h.func,
            batch=h.batch,
            batch_size=batch_size or h.batch_size,
        )
        for h in handlers
    ]
    chores = []
    if any(h.model is TaskItem for h in handlers):
        from dbqueue_django.tasks import result_retention_chores  # Django 6+: django.tasks

        chores = result_retention_chores(database)
    return Worker(
        consumers,
        concurrency=concurrency,
        burst=burst,
        max_messages=max_messages,
        reconnect_for=reconnect_for,
        chores=chores,
        heartbeat=heartbeat or DjangoHeartbeat(),
        summary_every=summary_every,
        health_file=health_file,
        metrics_port=metrics_port,
    )
