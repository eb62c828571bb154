"""The Django admin's list of task results (the Tasks backend's run records), read-only.

*dbqueue > Task results* lists every task that ran, with its status, times and attempts,
filters by status, backend and queue name, and finds a task by its path or id. A result's page
shows its arguments, return value and each failed attempt's traceback. Nothing there can be
added, changed or deleted: results are the worker's record (``manage.py prunetasks`` and the
backend's ``result_retention`` delete old ones), and a failed task is retried from its queue
item, under *dbqueue > Tasks*, which a failed result links to.

To customise, subclass :class:`TaskResultAdmin` and register it for
:class:`~dbqueue_django.models.TaskRun` yourself: a registered model is left alone.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from dbqueue_django.models import TaskItem, TaskRun

__all__ = ["TaskResultAdmin", "register_task_results"]


def _time_column(field: str, description: str) -> Callable[[Any, TaskRun], str]:
    """An admin column (and detail field) showing the time ``field`` to the millisecond."""

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: TaskRun) -> str:
        return _time(getattr(obj, field))

    return column


#: What a result's page shows, in order: all of it read-only.
DETAIL: tuple[str, ...] = (
    "id", "task_path", "status", "backend", "queue_name", "priority", "run_after_time", "enqueued",
    "started", "last_attempted", "finished", "took", "attempts", "worker_ids", "arguments",
    "keyword_arguments", "return_value_json", "tracebacks", "queue_item",
)  # fmt: skip


class TaskResultAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Task results, read-only: listed, filtered, searched and shown, never edited."""

    list_display = ["id", "task_path", "status", "queue_name", "backend", "enqueued",
                    "finished", "took", "attempts"]  # fmt: skip
    list_filter = ["status", "backend", "queue_name"]
    search_fields = ["task_path", "=id"]
    ordering = ["-id"]
    fields = readonly_fields = DETAIL

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the backend writes results when a task runs

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a result records what happened

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # prunetasks and result_retention delete old results

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskRun]:
        return super().get_queryset(request).defer("return_value", "errors")

    @admin.display(description="attempts")
    def attempts(self, obj: TaskRun) -> int:
        return len(obj.worker_ids)

    # Times to the millisecond: a task often takes less than the admin's minute.
    run_after_time = _time_column("run_after", "run after")
    enqueued = _time_column("enqueued_at", "enqueued at")
    started = _time_column("started_at", "started at")
    last_attempted = _time_column("last_attempted_at", "last attempted at")
    finished = _time_column("finished_at", "finished at")

    @admin.display(description="took")
    def took(self, obj: TaskRun) -> str:
        """From the start of its last attempt to its end."""
        if obj.finished_at is None or obj.last_attempted_at is None:
            return "-"
        seconds = (obj.finished_at - obj.last_attempted_at).total_seconds()
        return f"{seconds:.3f}\N{NO-BREAK SPACE}s"

    @admin.display(description="args")
    def arguments(self, obj: TaskRun) -> str:
        return _json(obj.args)

    @admin.display(description="kwargs")
    def keyword_arguments(self, obj: TaskRun) -> str:
        return _json(obj.kwargs)

    @admin.display(description="return value")
    def return_value_json(self, obj: TaskRun) -> str:
        return _json(obj.return_value) if obj.status == "SUCCESSFUL" else "-"

    @admin.display(description="errors (a traceback per failed attempt)")
    def tracebacks(self, obj: TaskRun) -> str:
        if not obj.errors:
            return "-"
        return format_html_join(
            "",
            '<p>{}</p><pre class="dbqueue-traceback">{}</pre>',
            ((e.get("exception_class_path", ""), e.get("traceback", "")) for e in obj.errors),
        )

    @admin.display(description="queue item")
    def queue_item(self, obj: TaskRun) -> str:
        """A link to the task's item in the queue while it has one (failed, or run again)."""
        if not TaskItem.objects.filter(pk=obj.pk).exists():
            return "-"
        url = reverse(f"{self.admin_site.name}:dbqueue_django_taskitem_change", args=[obj.pk])
        return format_html('<a href="{}">task #{}</a>', url, obj.pk)


def _time(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _json(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


def register_task_results(site: admin.AdminSite | None = None) -> None:
    """Register :class:`TaskResultAdmin` for TaskRun, unless the project registered it."""
    site = site or admin.site
    if not site.is_registered(TaskRun):
        site.register(TaskRun, TaskResultAdmin)
