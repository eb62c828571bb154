"""The admin of the Django Tasks backend's queue (:class:`~dbqueue_django.models.TaskItem`):
a split queue's admin, with the task's own columns and a filter by task queue name.

A task's **attempts** are the queue item's, as on every queue's page: those since it was
pushed or last retried (a task has one, ``max_attempts = 1``). Django's ``TaskResult.attempts``
counts every run, retries included: the page shows that count as **runs**, from the worker's
run record, so the two numbers are never confused.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from dbqueue_django.admin_filters import ErrorClassFilter, TaskQueueFilter
from dbqueue_django.models import TaskRun
from dbqueue_django.split_admin import QueueModelAdmin, StateFilter


class TaskItemAdmin(QueueModelAdmin):
    """The tasks waiting, running or failed (registered automatically)."""

    list_filter = [StateFilter, TaskQueueFilter, ErrorClassFilter]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return ["id", "task_path", "queue_name", "state", "attempts", "priority", "run_or_finished",
                "error"]  # fmt: skip

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fields = super().get_fields(request, obj)
        at = fields.index("attempts") + 1
        return [*fields[:at], "runs", *fields[at:]]

    @admin.display(description="runs (retries included)")
    def runs(self, obj: Any) -> int:
        # What Django's TaskResult.attempts counts: one worker id per run.
        run = TaskRun.objects.filter(pk=obj.pk).only("worker_ids").first()
        return len(run.worker_ids) if run is not None else 0
