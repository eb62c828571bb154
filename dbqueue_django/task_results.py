"""Deleting the results of finished tasks: what ``manage.py prunetasks`` and the Tasks
backend's ``result_retention`` option (applied by the worker) do.

A task has finished once it succeeded or failed. For the tasks that finished before a cutoff,
pruning deletes

* their results (:class:`~dbqueue_django.models.TaskRun`), but not those of a task retried
  since, whose queue item is ready or running again;
* the queue items of the failed ones, which wait in the queue for a retry from the admin:
  a pruned failed task can no longer be retried.

It deletes in batches, a transaction each, so a first prune of a large table holds no lock for
long. It works with the database's tables only, so it runs on Django 5.2 as well (where there
is nothing to prune).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import models, router, transaction
from django.utils import timezone

from dbqueue.message import State
from dbqueue_django.models import TaskItem, TaskRun

#: A finished task's status (django.tasks.TaskResultStatus, which Django 5.2 lacks).
FINISHED = ("SUCCESSFUL", "FAILED")
#: Rows deleted per transaction.
PRUNE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Pruned:
    """What a prune deleted (or would delete)."""

    #: Task results (run records).
    results: int
    #: Failed tasks' queue items.
    failed_tasks: int

    def __str__(self) -> str:
        return f"{self.results} task result(s) and {self.failed_tasks} failed task(s)"


class FinishedTasks:
    """The tasks that finished before ``cutoff``, in database ``using`` (default: where the
    router writes the task tables), of Tasks backend ``backend`` (default: every one)."""

    def __init__(
        self, cutoff: dt.datetime, *, using: str | None = None, backend: str | None = None
    ) -> None:
        self.cutoff = cutoff
        self.using = using or router.db_for_write(TaskRun)
        self.backend = backend

    @classmethod
    def older_than(
        cls, age: dt.timedelta, *, using: str | None = None, backend: str | None = None
    ) -> FinishedTasks:
        """The tasks that finished longer than ``age`` ago."""
        return cls(timezone.now() - age, using=using, backend=backend)

    def results(self) -> models.QuerySet[TaskRun]:
        """Their results, but those of tasks queued again since (a retry)."""
        queued = self._items().filter(queue_meta__state__in=[State.READY, State.LEASED])
        runs = TaskRun.objects.using(self.using).filter(
            status__in=FINISHED, finished_at__lt=self.cutoff
        )
        if self.backend is not None:
            runs = runs.filter(backend=self.backend)
        return runs.exclude(pk__in=queued.values("pk"))

    def failed_tasks(self) -> models.QuerySet[Any]:
        """The queue items of those that failed (``run_at`` holds when they failed)."""
        return self._items().filter(
            queue_meta__state=State.FAILED, queue_meta__run_at__lt=self.cutoff
        )

    def _items(self) -> models.QuerySet[Any]:
        items = TaskItem.objects.using(self.using).all()
        return items.filter(backend=self.backend) if self.backend is not None else items

    def count(self) -> Pruned:
        """How many a :meth:`delete` would delete now."""
        return Pruned(self.results().count(), self.failed_tasks().count())

    def delete(self, *, batch: int = PRUNE_BATCH) -> Pruned:
        """Delete them, ``batch`` rows per transaction."""
        items = _delete_in_batches(self.failed_tasks, self.using, batch)
        results = _delete_in_batches(self.results, self.using, batch)
        return Pruned(results, items)


def _delete_in_batches(select: Callable[[], models.QuerySet[Any]], using: str, batch: int) -> int:
    """Delete the rows ``select()`` finds, ``batch`` per transaction; how many."""
    deleted = 0
    while True:
        with transaction.atomic(using=using):
            pks = list(select().order_by("pk").values_list("pk", flat=True)[:batch])
            if not pks:
                return deleted
            # By key, under the same conditions again: a row changed meanwhile (a failed task
            # retried from the admin) is left alone. The count is of the model's own rows (a
            # task item's meta row goes with it).
            rows = select().filter(pk__in=pks)
            deleted += rows.delete()[1].get(rows.model._meta.label, 0)
