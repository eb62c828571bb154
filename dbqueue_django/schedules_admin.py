"""The Django admin's list of periodic schedules (:class:`QueueSchedule` rows), read-only.

*dbqueue > Queue schedules* lists every schedule the workers declared, with its queue, cron
expression, time zone, the last tick a worker pushed and the next one, times in the
schedule's own zone. Nothing there can be added, changed or deleted: schedules are declared
in code (``@periodic``, the queue option ``schedule``) and the workers write their rows.

To customise, subclass :class:`QueueScheduleAdmin` and register it for
:class:`~dbqueue_django.schedule_rows.QueueSchedule` yourself: a registered model is left
alone.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from dbqueue_django.schedule_rows import QueueSchedule

__all__ = ["QueueScheduleAdmin", "register_schedules"]


class QueueScheduleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Periodic schedules, read-only: listed, filtered by queue, searched and shown."""

    list_display = ["name", "queue", "expression", "timezone", "last_tick_at", "next_tick_at"]
    list_filter = ["queue"]
    search_fields = ["name", "queue"]
    ordering = ["name"]
    # Styles that fit long names and times beside the filters in a 1280-px window.
    change_list_template = "admin/dbqueue_django/schedule_change_list.html"
    fields = readonly_fields = (
        "name", "queue", "expression", "timezone", "since_at", "last_tick_at", "next_tick_at",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules are declared in code; the workers write their rows

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a row records the workers' claims

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a worker would declare it again at its next start

    @admin.display(description="declared since", ordering="since")
    def since_at(self, obj: QueueSchedule) -> str:
        return _in_zone(obj.since, obj.timezone)

    @admin.display(description="last tick", ordering="last_tick")
    def last_tick_at(self, obj: QueueSchedule) -> str:
        return _in_zone(obj.last_tick, obj.timezone, never="never")

    @admin.display(description="next tick", ordering="next_tick")
    def next_tick_at(self, obj: QueueSchedule) -> str:
        return _in_zone(obj.next_tick, obj.timezone)


def _in_zone(value: dt.datetime | None, zone: str, never: str = "-") -> str:
    """``value`` as a wall-clock time of the schedule's zone (its ticks are written in it)."""
    if value is None:
        return never
    try:
        local = value.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        local = timezone.localtime(value)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


def register_schedules(site: admin.AdminSite | None = None) -> None:
    """Register :class:`QueueScheduleAdmin` for QueueSchedule, unless the project did."""
    site = site or admin.site
    if not site.is_registered(QueueSchedule):
        site.register(QueueSchedule, QueueScheduleAdmin)
