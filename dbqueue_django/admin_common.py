"""What the admins of every queue table share (split queues, ring slots, ring failed tables):
read-only pages, the last error, deletes through the queue, and the counts above the list."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import display_for_value
from django.contrib.admin.views.main import ChangeList
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils import formats, timezone
from django.utils.html import format_html

from dbqueue.message import format_age
from dbqueue_django.admin_item_page import ItemPageAdmin

#: Payload columns shown in a queue's list (all of them are on the detail page): three, so
#: the list fits a 1280-px window beside the admin's menu and filters.
LIST_PAYLOAD_FIELDS = 3
#: Characters of the last error shown in the list.
ERROR_PREVIEW = 80


def _local(value: dt.datetime) -> dt.datetime | None:
    """``value`` in the current time zone (a naive one as it is); None if it has no time
    there: within a day of the ends of Python's datetime range, e.g. a run_at near 9999
    written by SQL outside dbqueue (a push refuses one past MAX_RUN_AT) seen east of UTC."""
    if not timezone.is_aware(value):
        return value
    try:
        return timezone.localtime(value)
    except OverflowError:
        return None


def _as_stored(value: dt.datetime) -> str:
    """A time that has no local time, shown as it is, in its own zone (named): a page that
    holds one still opens."""
    return f"{formats.localize(value.replace(tzinfo=None))} {value.tzname()}"


def display_time(value: dt.datetime | None) -> str:
    """A time as the admin shows model fields: localised, in the current time zone."""
    if value is not None and _local(value) is None:
        return _as_stored(value)
    return str(display_for_value(value, "-"))


def list_time(value: dt.datetime | None) -> str:
    """A time for a list's narrow column: its date and its time of day, each kept on one
    line (localised, in the current time zone)."""
    if value is None:
        return "-"
    local = _local(value)
    if local is None:
        return format_html('<span class="dbqueue-when">{}</span>', _as_stored(value))
    # This year's dates without the year ("Nov. 27"): the column stays narrow.
    this_year = local.year == timezone.localtime().year
    day = formats.date_format(local, "N j" if this_year else "SHORT_DATE_FORMAT")
    return format_html(
        '<span class="dbqueue-when" title="{}">{}</span> <span class="dbqueue-when">{}</span>',
        display_time(value),
        day,
        formats.time_format(local, "TIME_FORMAT"),
    )


def time_column(field: str, description: str) -> Callable[[Any], str]:
    """A list column showing the time in ``field`` as :func:`list_time` does, sorted by it."""

    @admin.display(description=description, ordering=field)
    def column(obj: Any) -> str:
        return list_time(getattr(obj, field))

    column.__name__ = column.__qualname__ = f"{field}_column"  # the cells' CSS class
    return column


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


class QueueTableAdmin(ItemPageAdmin):
    """The shared half of the queue admins: rows are read-only (messages are pushed by code,
    which validates them, and change through the actions and the item page's buttons), and
    deletes go through the queue, which removes a message from every table that holds it."""

    list_per_page = 50
    change_list_template = "admin/dbqueue_django/queue_change_list.html"
    #: The column holding a row's message number (the argument of ``queue.delete``).
    message_id_field = "pk"

    @property
    def _queue(self) -> Any:
        """The model's queue, on the database the router picks for it."""
        return self.model.queue

    def queue_for(self, request: HttpRequest) -> Any:
        """The queue whose deliveries ``request``'s list, counts and actions are about: the
        model's (a queue with consumer groups: the group the request chose)."""
        return self._queue

    def error_text(self, obj: Any) -> str | None:
        """A row's last error (a consumer group's admin: the group's own)."""
        return obj.last_error  # type: ignore[no-any-return]

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
        text = (self.error_text(obj) or "").strip()
        last_line = text.splitlines()[-1] if text else ""
        if len(last_line) > ERROR_PREVIEW:
            last_line = last_line[:ERROR_PREVIEW] + "…"
        # In a box of bounded width, so the list shares its room with the payload's columns.
        return format_html('<span class="dbqueue-error">{}</span>', last_line) if last_line else ""

    @admin.display(description="last error (traceback)")
    def traceback(self, obj: Any) -> str:
        error = self.error_text(obj)
        if not error:
            return "-"
        return format_html('<pre class="dbqueue-traceback">{}</pre>', error)

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)
        except (OverflowError, ValueError) as exc:
            # Django's date drill-down computes the end of the year, month or day chosen,
            # past Python's datetime range for the last ones (9999 is offered when a time
            # there was written by SQL outside dbqueue): the list opens without the choice,
            # as Django's list does for any lookup it cannot run.
            raise IncorrectLookupParameters(exc) from exc

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        stats = with_age(self.queue_for(request).stats())
        context = {
            **(extra_context or {}),
            "queue_stats": stats,
            "queue_counts": self.queue_counts(request, stats),
        }
        return super().changelist_view(request, extra_context=context)

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        # The message number: the key of a split queue's row or a failed row, a slot's seq.
        self._queue.delete([obj.id])  # type: ignore[attr-defined]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._queue.delete(self._ids(queryset))
