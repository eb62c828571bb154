"""What the admins of every queue table share (split queues, ring slots, ring failed tables):
read-only pages, the last error, deletes through the queue, and the counts above the list."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import display_for_value
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from dbqueue.message import format_age

#: Payload columns shown in a queue's list (all of them are on the detail page).
LIST_PAYLOAD_FIELDS = 4
#: Characters of the last error shown in the list.
ERROR_PREVIEW = 80


def display_time(value: dt.datetime | None) -> str:
    """A time as the admin shows model fields: localised, in the current time zone."""
    return str(display_for_value(value, "-"))


def with_age(stats: dict[str, Any]) -> dict[str, Any]:
    """A queue's stats with ``oldest_ready``, the age of the oldest ready item as text."""
    return {**stats, "oldest_ready": format_age(stats["oldest_ready_age"])}


def changelist_url_for(site: admin.AdminSite, model: type[models.Model]) -> str | None:
    """The model's changelist on ``site``, or None if it is not registered there."""
    opts = model._meta
    try:
        return reverse(f"{site.name}:{opts.app_label}_{opts.model_name}_changelist")
    except NoReverseMatch:  # registered on another admin site, or not at all
        return None


@dataclass(frozen=True, slots=True)
class Count:
    """One figure above a queue's list: "<value> <label> (<note>)", linked to ``url``."""

    label: str
    value: Any
    note: str = ""
    url: str | None = None
    css: str = ""


class QueueTableAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The shared half of the queue admins: rows are read-only (messages are pushed by code,
    which validates them, and change through the actions), and deletes go through the queue,
    which removes a message from every table that holds it."""

    list_per_page = 50
    change_list_template = "admin/dbqueue_django/queue_change_list.html"
    #: The column holding a row's message number (the argument of ``queue.delete``).
    message_id_field = "pk"

    @property
    def _queue(self) -> Any:
        """The model's queue, on the database the router picks for it."""
        return self.model.queue

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        """The figures shown above the list (from the queue's ``stats()``)."""
        raise NotImplementedError

    def _ids(self, queryset: QuerySet[Any]) -> list[int]:
        return list(queryset.values_list(self.message_id_field, flat=True))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return list(self.get_fields(request, obj))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # messages are pushed by code, which validates them

    @admin.display(description="last error")
    def error(self, obj: Any) -> str:
        text = (obj.last_error or "").strip()
        last_line = text.splitlines()[-1] if text else ""
        return last_line if len(last_line) <= ERROR_PREVIEW else last_line[:ERROR_PREVIEW] + "…"

    @admin.display(description="last error (traceback)")
    def traceback(self, obj: Any) -> str:
        if not obj.last_error:
            return "-"
        return format_html('<pre class="dbqueue-traceback">{}</pre>', obj.last_error)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        stats = with_age(self._queue.stats())
        context = {
            **(extra_context or {}),
            "queue_stats": stats,
            "queue_counts": self.queue_counts(request, stats),
        }
        return super().changelist_view(request, extra_context=context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Rows are read-only: they change through the actions.
        context = {**(extra_context or {}), "show_save": False,
                   "show_save_and_continue": False, "show_save_and_add_another": False}  # fmt: skip
        return super().change_view(request, object_id, form_url, extra_context=context)

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        # The message number: the key of a split queue's row or a failed row, a slot's seq.
        self._queue.delete([obj.id])  # type: ignore[attr-defined]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._queue.delete(self._ids(queryset))
