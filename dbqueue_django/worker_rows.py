"""The workers' heartbeats as rows: :class:`QueueWorker`, one row per worker run and queue in
the queue's own database, written by ``runqueueworker``'s maintenance thread every few
seconds (:class:`dbqueue_django.worker.DjangoHeartbeat`) and read by ``queuestats``.

Times are the database's (``Now()``), written and compared there, so the clocks of the hosts
running workers and commands need not agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import models, transaction
from django.db.models.functions import Now

from dbqueue.worker.heartbeat import ALIVE_WITHIN, WorkerReport

#: Rows of workers not seen for this long are deleted by the next heartbeat in their database
#: (a worker killed, a container gone): long enough to look back at a crash.
FORGET_AFTER = dt.timedelta(days=1)


class QueueWorker(models.Model):
    """A worker serving a queue, as its last heartbeat told: who it is, when it was last seen
    and what it handled in the minute before."""

    worker_id = models.CharField(max_length=300, help_text="host:pid:run, one per worker run")
    queue = models.CharField(max_length=255, help_text="the queue model's app_label.Model")
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    handled = models.IntegerField(default=0, help_text="items handled in the last minute")
    failed = models.IntegerField(default=0, help_text="attempts failed in the last minute")

    class Meta:
        app_label = "dbqueue_django"
        verbose_name = "queue worker"
        constraints = [
            models.UniqueConstraint(fields=["worker_id", "queue"], name="dbqueue_worker_queue")
        ]

    def __str__(self) -> str:
        return f"{self.worker_id} on {self.queue}"


def record_beat(alias: str, report: WorkerReport, queues: Iterable[tuple[str, int, int]]) -> None:
    """Write ``report`` into database ``alias``: a row per (label, handled, failed) of
    ``queues``, in one transaction; then forget the workers gone for :data:`FORGET_AFTER`."""
    rows = QueueWorker.objects.using(alias)
    stopped_at = Now() if report.stopped else None
    with transaction.atomic(using=alias):
        for label, handled, failed in queues:
            seen: dict[str, Any] = {
                "seen_at": Now(),
                "stopped_at": stopped_at,
                "handled": handled,
                "failed": failed,
            }
            # Only this worker's maintenance thread writes its rows: no race to create them.
            if not rows.filter(worker_id=report.worker_id, queue=label).update(**seen):
                rows.create(
                    worker_id=report.worker_id,
                    queue=label,
                    hostname=report.hostname,
                    pid=report.pid,
                    started_at=report.started_at,
                    **seen,
                )
        rows.filter(seen_at__lt=Now() - FORGET_AFTER).delete()


@dataclass(frozen=True, slots=True)
class QueueThroughput:
    """What the live workers of a queue did over the last minute."""

    #: Items handled successfully.
    handled: int
    #: Failed attempts.
    failed: int
    #: Workers serving the queue now.
    workers: int


def live_throughput(alias: str) -> dict[str, QueueThroughput]:
    """Per queue label, the sums of the workers seen within
    :data:`~dbqueue.worker.heartbeat.ALIVE_WITHIN` in database ``alias``: each reports the
    minute up to its last heartbeat, a few seconds old at most. A worker that stopped in that
    time still counts for what it handled, not as serving the queue."""
    rows = (
        QueueWorker.objects.using(alias)
        .filter(seen_at__gte=Now() - ALIVE_WITHIN)
        .values("queue")
        .annotate(
            handled_sum=models.Sum("handled"),
            failed_sum=models.Sum("failed"),
            running=models.Count("id", filter=models.Q(stopped_at__isnull=True)),
        )
        .order_by("queue")
    )
    return {
        r["queue"]: QueueThroughput(r["handled_sum"], r["failed_sum"], r["running"]) for r in rows
    }


@dataclass(frozen=True, slots=True)
class LastBeat:
    """The most recent heartbeat of the running workers serving a queue."""

    #: Whether one came within the interval asked for (compared by the database's clock).
    recent: bool
    #: When the last one came (None: no running worker ever sent one).
    seen_at: dt.datetime | None


def last_beats(alias: str, within: dt.timedelta) -> dict[str, LastBeat]:
    """Per queue label, the last heartbeat of the workers of database ``alias`` still
    running (not stopped), and whether it came within ``within``."""
    rows = (
        QueueWorker.objects.using(alias)
        .filter(stopped_at__isnull=True)
        .values("queue")
        .annotate(
            last=models.Max("seen_at"),
            recent=models.Count("id", filter=models.Q(seen_at__gte=Now() - within)),
        )
        .order_by("queue")
    )
    return {r["queue"]: LastBeat(r["recent"] > 0, r["last"]) for r in rows}
