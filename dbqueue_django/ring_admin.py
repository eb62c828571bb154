"""The admin of ring queues: the messages in the ring's slots, and its side table.

Both lists show the ring's occupancy above them: its slots, the share in use, and how many
messages are ready, leased, retrying (waiting out a back-off, in the side table) and failed.
The slots' list shows only slots holding a message, in push order; **Delete** empties their
slots. The side table's
list (the failed model) shows the messages out of the ring: failed ones (the default filter),
those waiting out a retry's back-off or put aside to be pushed again, and leases a pusher moved
aside. It offers **Retry** for failed messages (each pushed again at the tail under a new
number, attempts reset; those that find the ring full wait aside for a free slot) and
**Delete**.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from dbqueue.message import State
from dbqueue.ring import SlotState
from dbqueue_django.admin_common import (
    LIST_PAYLOAD_FIELDS,
    Count,
    QueueTableAdmin,
    changelist_url_for,
)
from dbqueue_django.ring_model import SIDE_STATES, SLOT_STATES
from dbqueue_django.spec import payload_fields


def occupancy_text(stats: dict[str, Any]) -> str:
    """``3 / 8 (38%)``: the slots holding a message (ready or leased), of the ring's slots."""
    return f"{stats['in_slots']} / {stats['capacity']} ({stats['occupancy']:.0%})"


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
    """Ready, leased (the states of a slot holding a message)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), name) for value, name in SLOT_STATES if value != SlotState.EMPTY]

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
        return queryset.exclude(state=SlotState.EMPTY)

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


class SideStateFilter(admin.SimpleListFilter):
    """Failed (the default), waiting, leased aside: the states of the side table's rows."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), name) for value, name in SIDE_STATES] + [("all", "all")]

    def choices(self, changelist: Any) -> Any:
        # No "All" entry of Django's own: the default (no parameter) is "failed".
        for lookup, title in self.lookup_choices:
            selected = self.value() == lookup or (self.value() is None and lookup == FAILED)
            yield {
                "selected": selected,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or FAILED
        return queryset if value == "all" else queryset.filter(state=int(value))


#: The side table list's default filter.
FAILED = str(int(State.FAILED))


class RingFailedAdmin(QueueTableAdmin):
    """A ring's side table: failed messages, and those out of the ring for a while
    (registered for every ring's failed model automatically)."""

    actions = ["retry_messages"]  # and Django's "Delete selected"
    list_filter = [SideStateFilter]
    ordering = ["-failed_at", "-id"]

    @property
    def _queue(self) -> Any:
        return self.model.ring_model.queue

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["id", *names, "state", "attempts", "pushed_at", "failed_at", "run_at", "error"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["id", *names, "state", "attempts", "pushed_at", "failed_at", "run_at",
                "lease_until", "traceback"]  # fmt: skip

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        ring = self.model.ring_model
        return ring_counts(self.admin_site, ring, stats)

    @admin.action(description="Retry selected messages", permissions=["change"])
    def retry_messages(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = self._ids(queryset)
        done = self._queue.retry(ids)
        waiting = queryset.model._default_manager.using(queryset.db).filter(
            id__in=ids, state=int(State.READY)
        )
        aside = waiting.count()
        text = f"{done - aside} message(s) pushed again."
        if aside:
            text += (
                f" {aside} wait(s) aside for a free slot (the ring is full): the sweeper "
                f"pushes them as soon as there is room."
            )
        if done < len(ids):
            text += f" {len(ids) - done} were not failed messages and stayed as they were."
        warn = aside or done < len(ids)
        self.message_user(request, text, messages.WARNING if warn else messages.SUCCESS)
