"""What Django's own Tasks tests (``vendor/tasks``) run against instead of Django's dummy and
immediate backends: DBQueueBackend, its tables and its worker.

The stand-ins add only what those tests call besides the backend API: the dummy's ``results``
and ``clear()``, read from and done on the backend's own tables, and, for the immediate
backend, the worker run that it does inside ``enqueue()``. Every result they return is the
one DBQueueBackend stores and ``get_result()`` reads.
"""

from __future__ import annotations

from typing import Any

from django.tasks.base import Task, TaskResult
from django.test import TransactionTestCase

from dbqueue.handlers import Handler
from dbqueue_django.models import TaskItem, TaskRun
from dbqueue_django.tasks import DBQueueBackend, run_task
from dbqueue_django.worker import build_worker

#: The BACKEND settings the vendored tests name instead of Django's dummy and immediate ones.
DUMMY = "tests.django.upstream_tasks.adapt.DummyStandIn"
IMMEDIATE = "tests.django.upstream_tasks.adapt.ImmediateStandIn"
#: Routes the backend's tables to SQLite (the tests' SQLite variants; see conftest.py).
ON_SQLITE = "tests.django.upstream_tasks.adapt.TasksOnSQLite"


def run_worker() -> int:
    """Run the worker on the task queue until nothing is due; how many tasks it ran."""
    task_queue = Handler(TaskItem, run_task, batch=False, batch_size=1)
    return build_worker([task_queue], burst=True).run(handle_signals=False).handled


class DummyStandIn(DBQueueBackend):
    """DBQueueBackend where the tests expect Django's DummyBackend, which stores tasks and never
    runs them: no worker runs here either."""

    @property
    def results(self) -> list[TaskResult[..., Any]]:
        """The result of every task this backend stored, oldest first (the dummy's list)."""
        ids = set(TaskItem.objects.filter(backend=self.alias).values_list("pk", flat=True))
        ids |= set(TaskRun.objects.filter(backend=self.alias).values_list("pk", flat=True))
        return [self.get_result(str(pk)) for pk in sorted(ids)]

    def clear(self) -> None:
        """Delete every task this backend stored (the dummy empties its list)."""
        TaskItem.objects.filter(backend=self.alias).delete()
        TaskRun.objects.filter(backend=self.alias).delete()


class ImmediateStandIn(DummyStandIn):
    """DBQueueBackend where the tests expect Django's ImmediateBackend, which runs the task
    inside ``enqueue()``: enqueue, run the worker, return the result as stored."""

    def enqueue[**P, R](
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        enqueued = super().enqueue(task, args, kwargs)
        run_worker()
        return self.get_result(enqueued.id)


class DatabaseTestCase(TransactionTestCase):
    """The base of every vendored test class, where Django's have SimpleTestCase (no database)
    or TransactionTestCase: the backend writes to the database, and the worker reads it on
    connections of its own, so the test's writes must be committed (a TestCase's enclosing
    transaction would hide them). The task tables are emptied after each test."""

    databases = {"default"}
    available_apps = ["dbqueue_django"]


class TasksOnSQLite:
    """A database router: the backend's tables (the dbqueue_django app's) on ``sqlite``."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return "sqlite" if model._meta.app_label == "dbqueue_django" else None

    db_for_write = db_for_read
