"""List filters every queue admin shares: by the class of the last error, and by a task's
queue name."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.db.models.functions import Right
from django.http import HttpRequest

from dbqueue_django.error_classes import class_line_pattern, error_class, is_class_name

#: How many of the latest errors the filter reads to list the classes it offers: a bounded
#: read however many items failed (an older class is still found by searching its name).
ERROR_CLASS_SAMPLE = 500
#: Characters read from the end of each of those errors: where a traceback names its class.
ERROR_TAIL_CHARS = 2000


class ErrorClassFilter(admin.SimpleListFilter):
    """Rows whose last error names an exception class (``ValueError``, ``shop.mail.SmtpDown``).

    The choices are the classes of the latest errors; the filter matches a line naming the
    class anywhere in the error, so a chained exception's cause is matched too.
    """

    title = "error class"
    parameter_name = "error_class"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queryset = model_admin.get_queryset(request).filter(last_error__isnull=False)
        pk = queryset.model._meta.pk.name
        tails = queryset.order_by(f"-{pk}").values_list(
            Right("last_error", ERROR_TAIL_CHARS), flat=True
        )[:ERROR_CLASS_SAMPLE]
        classes = {name for tail in tails if (name := error_class(tail))}
        return [(name, name) for name in sorted(classes)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value or not is_class_name(value):
            return queryset
        return queryset.filter(last_error__regex=class_line_pattern(value))


class TaskQueueFilter(admin.SimpleListFilter):
    """Django Tasks' queue names (``@task(queue_name=...)``), which all share one dbqueue
    queue: the names of the tasks in it."""

    title = "queue"
    parameter_name = "queue_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = model_admin.get_queryset(request).order_by().values_list("queue_name", flat=True)
        return [(name, name) for name in sorted(set(names.distinct()))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(queue_name=value) if value else queryset
