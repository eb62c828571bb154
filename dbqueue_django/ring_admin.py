"""The admin of ring queues: the messages in the ring's slots, and its failed messages.

Both lists show the ring's occupancy above them: its slots, the share in use, and how many
messages are ready, leased, retrying (waiting out a back-off) and failed. The slots' list shows
only slots holding a message, in push order; **Delete** empties their slots. The failed list
offers **Retry** (each message pushed again at the tail under a new number, attempts reset;
those that find the ring full stay failed) and **Delete**.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from dbqueue.ring import EMPTY
from dbqueue_django.admin_common import (
    LIST_PAYLOAD_FIELDS,
    Count,
    QueueTableAdmin,
    changelist_url_for,
)
from dbqueue_django.ring_model import SLOT_STATES
from dbqueue_django.spec import payload_fields


def occupancy_text(stats: dict[str, Any]) -> str:
    """``3 / 8 (38%)``: messages held (ready, leased, retrying) of the ring's slots."""
    held = stats["ready"] + stats["leased"] + stats["scheduled"]
    return f"{held} / {stats['capacity']} ({stats['occupancy']:.0%})"


def ring_counts(site: admin.AdminSite, ring: Any, stats: dict[str, Any]) -> list[Count]:
    """The figures above a ring's lists (slots or failed)."""
    expired = f"{stats['expired']} expired" if stats["expired"] else ""
    failed_url = changelist_url_for(site, ring.failed_model)
    return [
        Count("slots", stats["capacity"], note=f"{stats['occupancy']:.0%} in use"),
        Count("ready", stats["ready"]),
        Count("leased", stats["leased"], note=expired),
        Count("retrying", stats["scheduled"]),
        Count("failed", stats["failed"], url=failed_url, css="failed"),
        Count("oldest ready", stats["oldest_ready"]),
    ]


def ring_overview(site: admin.AdminSite, ring: Any, stats: dict[str, Any]) -> dict[str, Any]:
    """What a ring's row of the queue overview shows beyond the counts."""
    return {
        "occupancy": occupancy_text(stats),
        "failed_url": changelist_url_for(site, ring.failed_model),
        "done_url": None,  # a ring keeps no done messages: its slots are reused
    }


class RingStateFilter(admin.SimpleListFilter):
    """Ready, leased, retrying (the states of a slot holding a message)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), name) for value, name in SLOT_STATES if value != EMPTY]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(state=int(value)) if value and value.isdigit() else queryset


class RingQueueModelAdmin(QueueTableAdmin):
    """The messages in a ring's slots (registered for every ring model automatically)."""

    actions: list[Any] = []  # Django's "Delete selected" stays: it empties the slots
    list_filter = [RingStateFilter]
    ordering = ["seq"]
    message_id_field = "seq"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)
        return queryset.exclude(state=EMPTY)

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["message", *names, "state", "attempts", "pushed_at", "lease_until", "error"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["message", "slot", *names, "state", "attempts", "pushed_at", "lease_until",
                "traceback"]  # fmt: skip

    @admin.display(description="message", ordering="seq")
    def message(self, obj: Any) -> int:
        return int(obj.seq)

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        return ring_counts(self.admin_site, self.model, stats)


class RingFailedAdmin(QueueTableAdmin):
    """A ring's failed messages (registered for every ring's failed model automatically)."""

    actions = ["retry_messages"]  # and Django's "Delete selected"
    ordering = ["-failed_at", "-id"]

    @property
    def _queue(self) -> Any:
        return self.model.ring_model.queue

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["id", *names, "attempts", "pushed_at", "failed_at", "error"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["id", *names, "attempts", "pushed_at", "failed_at", "traceback"]

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        ring = self.model.ring_model
        return ring_counts(self.admin_site, ring, stats)

    @admin.action(description="Retry selected messages", permissions=["change"])
    def retry_messages(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = self._ids(queryset)
        done = self._queue.retry(ids)
        stayed = len(ids) - done
        text = f"{done} message(s) pushed again."
        if stayed:
            text += f" {stayed} stayed failed because the ring was full; retry them later."
        self.message_user(request, text, messages.WARNING if stayed else messages.SUCCESS)
