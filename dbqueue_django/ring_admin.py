"""The admin of ring queues: the messages in the ring's slots, and its side table.

Both lists show the ring's occupancy above them: its slots, the share in use, and how many
messages are ready, spilled (the overflow of a full ring, counted in ready too), leased,
retrying (waiting out a back-off, in the side table) and failed.
The slots' list shows only slots holding a message, in push order; **Delete** empties their
slots. The side table's
list (the failed model) shows the messages out of the ring: failed ones (the default filter),
those waiting out a retry's back-off or put aside to be pushed again, leases a pusher moved
aside, and spilled messages (waiting for room in the ring: not failures, never offered for
Retry, and shown under their own filter). It offers **Retry** for failed messages (each pushed
again at the tail under a new number, attempts reset; those that find the ring full wait aside
for a free slot) and **Delete**.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from dbqueue.message import State
from dbqueue.ring import SlotState
from dbqueue.ring.states import SideState
from dbqueue_django.admin_common import (
    LIST_PAYLOAD_FIELDS,
    Count,
    QueueTableAdmin,
    changelist_url_for,
    time_column,
)
from dbqueue_django.admin_filters import ErrorClassFilter
from dbqueue_django.ring_model import SIDE_STATES, SLOT_STATES, group_relation
from dbqueue_django.ring_queue import group_slots
from dbqueue_django.spec import payload_fields
from dbqueue_django.split_admin import GroupChoice, GroupFilter


def occupancy_text(stats: dict[str, Any]) -> str:
    """``3 / 8 (38%)``: the slots holding a message (ready or leased), of the ring's slots."""
    return f"{stats['in_slots']} / {stats['capacity']} ({stats['occupancy']:.0%})"


def ring_counts(
    site: admin.AdminSite, ring: Any, stats: dict[str, Any], group: str | None = None
) -> list[Count]:
    """The figures above a ring's lists (slots or failed; of consumer group ``group``'s)."""
    expired = f"{stats['expired']} expired" if stats["expired"] else ""
    failed_url = changelist_url_for(site, side_model(ring, group))
    spilled = stats.get("spilled", 0)
    spilled_url = f"{failed_url}?state={int(SideState.SPILLED)}" if failed_url else None
    return [
        Count("slots", stats["capacity"], note=f"{stats['occupancy']:.0%} in use"),
        Count("ready", stats["ready"]),
        # Counted in ready too: waiting for room in the ring, not failed.
        Count("spilled", spilled, url=spilled_url if spilled else None),
        Count("leased", stats["leased"], note=expired),
        Count("retrying", stats["scheduled"]),
        Count("failed", stats["failed"], url=failed_url, css="failed"),
        Count("oldest ready", stats["oldest_ready"]),
    ]


def side_model(ring: Any, group: str | None = None) -> Any:
    """The side model of a ring (``<Model>Failed``), or of its consumer group ``group``
    (``<Model>Side_<group>``)."""
    return ring.failed_model if group is None else ring.queue_group_failed_models[group]


def ring_overview(
    site: admin.AdminSite, ring: Any, stats: dict[str, Any], group: str | None = None
) -> dict[str, Any]:
    """What a ring's row of the queue overview shows beyond the counts (a ring with consumer
    groups has a row per group, ``group``)."""
    return {
        "occupancy": occupancy_text(stats),
        "failed_url": changelist_url_for(site, side_model(ring, group)),
        "done_url": None,  # a ring keeps no done messages: its slots are reused
    }


# The lists' time columns, kept narrow (see time_column); the pages show the fields.
PUSHED_AT = time_column("pushed_at", "pushed at")
LEASE_UNTIL = time_column("lease_until", "lease until")
FAILED_AT = time_column("failed_at", "failed at")
RUN_AT = time_column("run_at", "run at")
GROUP_LEASE_UNTIL = time_column("group_lease_until", "lease until")


class RingStateFilter(admin.SimpleListFilter):
    """Ready, leased (the states of a slot holding a message)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), name) for value, name in SLOT_STATES if value != SlotState.EMPTY]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value or not value.isdigit():
            return queryset
        # A ring with consumer groups lists the chosen group's states (group_slots).
        grouped = "group_state" in queryset.query.annotations
        return queryset.filter(**{"group_state" if grouped else "state": int(value)})


class RingQueueModelAdmin(QueueTableAdmin):
    """The messages in a ring's slots (registered for every ring model automatically)."""

    actions: list[Any] = []  # Django's "Delete selected" stays: it empties the slots
    list_filter = [RingStateFilter, ErrorClassFilter]
    search_fields = ["=seq", "last_error"]
    ordering = ["seq"]
    message_id_field = "seq"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)
        return queryset.exclude(state=SlotState.EMPTY)

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["message", *names, "state", "attempts", PUSHED_AT, LEASE_UNTIL, "error"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["message", "slot", *names, "state", "attempts", "pushed_at", "lease_until",
                "traceback"]  # fmt: skip

    @admin.display(description="message", ordering="seq")
    def message(self, obj: Any) -> int:
        return int(obj.seq)

    def item_state(self, obj: Any) -> str:
        return dict(SLOT_STATES)[obj.state]

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        return ring_counts(self.admin_site, self.model, stats)


class GroupedRingQueueModelAdmin(GroupChoice, RingQueueModelAdmin):
    """The messages in the slots of a ring with consumer groups: the list, its counts and
    state filter are of one group, chosen in the "consumer group" filter (the first by
    default), as in :class:`~dbqueue_django.split_admin.GroupedQueueModelAdmin`; Delete
    deletes messages from every group. Each group's failed messages are in its side model's
    list (linked from the counts), where Retry acts on that group."""

    list_filter = [GroupFilter, RingStateFilter]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super(RingQueueModelAdmin, self).get_queryset(request)
        return group_slots(queryset, self.group_of(request))

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        return ["=seq", f"{group_relation(self.group_of(request))}__last_error"]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["message", *names, "group_state_text", "group_attempts_text", PUSHED_AT,
                GROUP_LEASE_UNTIL, "error"]  # fmt: skip

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["message", "slot", *names, "group_state_text", "group_attempts_text",
                "pushed_at", "group_lease", "traceback"]  # fmt: skip

    def error_text(self, obj: Any) -> str | None:
        return obj.group_error  # type: ignore[no-any-return]

    # Not named after the slot's own fields, which the admin would show instead.
    @admin.display(description="state", ordering="group_state")
    def group_state_text(self, obj: Any) -> str:
        return self.item_state(obj)

    @admin.display(description="attempts", ordering="group_attempts")
    def group_attempts_text(self, obj: Any) -> int:
        return int(obj.group_attempts)

    @admin.display(description="lease until")
    def group_lease(self, obj: Any) -> Any:
        return obj.group_lease_until or "-"

    def item_state(self, obj: Any) -> str:
        return dict(SLOT_STATES)[obj.group_state]

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        return ring_counts(self.admin_site, self.model, stats, self.group_of(request))


class SideStateFilter(admin.SimpleListFilter):
    """Failed (the default), waiting, leased aside, spilled: the states of the side table's
    rows."""

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
    list_filter = [SideStateFilter, ErrorClassFilter]
    search_fields = ["=id", "last_error"]
    date_hierarchy = "failed_at"
    # Newest failure first; Django adds -pk for ties itself, without marking the id sorted.
    ordering = ["-failed_at"]

    @property
    def _queue(self) -> Any:
        """The ring's queue, or for a consumer group's side model the group's."""
        queue = self.model.ring_model.queue
        group = self.model.queue_group
        return queue if group is None else queue.group(group)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if self._queue.spec.fans_out:
            # A ring with consumer groups keeps here only what spilled before any group got
            # it: the counts are each group's (on their lists), none is the ring's as a whole.
            context = {**(extra_context or {}), "queue_counts": []}
            return super(QueueTableAdmin, self).changelist_view(request, context)
        return super().changelist_view(request, extra_context)

    def item_state(self, obj: Any) -> str:
        return dict(SIDE_STATES)[obj.state]

    def item_noun(self) -> str:
        return str(self.model.ring_model._meta.verbose_name)

    def can_retry(self, obj: Any) -> bool:
        return obj.state == State.FAILED  # type: ignore[no-any-return]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["id", *names, "state", "attempts", FAILED_AT, RUN_AT, "error"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["id", *names, "state", "attempts", "pushed_at", "failed_at", "run_at",
                "lease_until", "traceback"]  # fmt: skip

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        ring = self.model.ring_model
        return ring_counts(self.admin_site, ring, stats, self.model.queue_group)

    @admin.action(description="Retry selected messages", permissions=["change"])
    def retry_messages(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self.retry_ids(request, self._ids(queryset))

    def retry_ids(self, request: HttpRequest, ids: list[int]) -> None:
        done = self._queue.retry(ids)
        waiting = self.model._default_manager.filter(id__in=ids, state=int(State.READY))
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
