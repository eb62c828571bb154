"""The admin of a split queue (a data table and its meta table): the items with their state,
counts per state, a filter by state, and the Retry, Cancel, Set priority and Delete
actions. A unique queue's list and item page also show each item's unique key, which the
search box searches."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from dbqueue.errors import InvalidArgument
from dbqueue.message import CancelOutcome, State
from dbqueue.unique import UNIQUE_KEY_COLUMN
from dbqueue_django.admin_common import (
    LIST_PAYLOAD_FIELDS,
    Count,
    QueueTableAdmin,
    display_time,
    list_time,
)
from dbqueue_django.admin_filters import ErrorClassFilter
from dbqueue_django.spec import has_unique_keys, payload_fields


class StateFilter(admin.SimpleListFilter):
    """Ready (due now), scheduled (due later), leased, done (kept by ``keep_done``), failed,
    cancelled (as the stats count them: a cancelling item is leased until its lease ends)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        states = ("ready", "scheduled", "leased", "done", "failed", "cancelled")
        return [(s, s) for s in states]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value, now = self.value(), timezone.now()
        if value == "ready":
            return queryset.filter(queue_meta__state=State.READY, queue_meta__run_at__lte=now)
        if value == "scheduled":
            return queryset.filter(queue_meta__state=State.READY, queue_meta__run_at__gt=now)
        # A cancelling item is leased until its lease ends, then cancelled (see split_stats).
        cancelling = Q(queue_meta__state=State.CANCELLING)
        if value == "leased":
            live = cancelling & Q(queue_meta__lease_until__gte=now)
            return queryset.filter(Q(queue_meta__state=State.LEASED) | live)
        if value == "cancelled":
            ended = cancelling & Q(queue_meta__lease_until__lt=now)
            return queryset.filter(Q(queue_meta__state=State.CANCELLED) | ended)
        if value in ("done", "failed"):
            return queryset.filter(queue_meta__state=State.parse(value))
        return queryset


#: How the admin's message tells each outcome of a cancel.
CANCEL_TOLD = {
    CancelOutcome.CANCELLED: "cancelled (will never run)",
    CancelOutcome.REQUESTED: "leased: cancellation requested (recorded when its worker settles it)",
    CancelOutcome.ALREADY: "already cancelled",
    CancelOutcome.FINISHED: "already finished, left as they were",
    CancelOutcome.MISSING: "no longer in the queue",
}
CHANGED = {CancelOutcome.CANCELLED, CancelOutcome.REQUESTED}


class QueueActionForm(ActionForm):
    """The action bar, with the new priority for "Set priority"."""

    # No label beside the box: the placeholder names it, so the bar keeps to one line.
    priority = forms.IntegerField(
        required=False,
        label="",
        widget=forms.NumberInput(
            attrs={"placeholder": "priority", "aria-label": "Priority", "title": "-32768..32767"}
        ),
    )


class QueueModelAdmin(QueueTableAdmin):
    """The admin of one split queue model (registered for every one automatically)."""

    action_form = QueueActionForm
    # Django's own "Delete selected" stays (with its confirmation page): it ends in
    # delete_queryset(), which deletes from both tables.
    actions = ["retry_items", "cancel_items", "set_priority"]
    list_filter = [StateFilter, ErrorClassFilter]
    search_fields = ["=id", "last_error"]
    # A done or failed item's run_at is when it finished (see finished_at).
    date_hierarchy = "queue_meta__run_at"
    # No `ordering`: Django's list then orders by -pk (newest first) itself, and marks no column
    # as sorted, whose arrows would widen the id column.

    # -- what is shown ------------------------------------------------------------------------

    @property
    def _unique(self) -> list[str]:
        """["unique_key"] for a unique queue (its meta table has the column), else []: the
        column its list and item page show, after the payload."""
        return [UNIQUE_KEY_COLUMN] if has_unique_keys(self.model) else []

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)
        meta = {f"q_{name}": F(f"queue_meta__{name}") for name in self._unique}
        annotated: QuerySet[Any] = queryset.annotate(
            q_state=F("queue_meta__state"),
            q_attempts=F("queue_meta__attempts"),
            q_priority=F("queue_meta__priority"),
            q_run_at=F("queue_meta__run_at"),
            q_lease_until=F("queue_meta__lease_until"),
            **meta,
        )
        return annotated

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        # A key is text such as {"account":"acme","kind":"sync"}: searched for a part of it.
        return [*self.search_fields, *(f"queue_meta__{name}" for name in self._unique)]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["id", *names, *self._unique, "state", "attempts", "priority", "run_or_finished",
                "error"]  # fmt: skip

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["id", *names, *self._unique, "state", "attempts", "priority", "run_at",
                "finished_at", "lease_until", "enqueued_at", "traceback"]  # fmt: skip

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        expired = f"{stats['expired']} expired" if stats["expired"] else ""
        return [
            Count("ready", stats["ready"]),
            Count("scheduled", stats["scheduled"]),
            Count("leased", stats["leased"], note=expired),
            Count("done", stats["done"], url="?state=done"),
            Count("failed", stats["failed"], url="?state=failed", css="failed"),
            Count("cancelled", stats["cancelled"], url="?state=cancelled"),
            Count("oldest ready", stats["oldest_ready"]),
        ]

    @admin.display(description="state", ordering="queue_meta__state")
    def state(self, obj: Any) -> str:
        if obj.q_state is None:
            return "-"
        state = State(obj.q_state)
        if state is State.READY and obj.q_run_at > timezone.now():
            return "scheduled"
        if state is State.CANCELLING:
            return "cancelling"
        return state.name.lower()

    @admin.display(description="unique key", ordering="queue_meta__unique_key")
    def unique_key(self, obj: Any) -> str:
        return obj.q_unique_key or "-"

    @admin.display(description="attempts", ordering="queue_meta__attempts")
    def attempts(self, obj: Any) -> int | None:
        return obj.q_attempts  # type: ignore[no-any-return]

    @admin.display(description="priority", ordering="queue_meta__priority")
    def priority(self, obj: Any) -> int | None:
        return obj.q_priority  # type: ignore[no-any-return]

    @admin.display(description="run at", ordering="queue_meta__run_at")
    def run_at(self, obj: Any) -> str:
        return display_time(obj.q_run_at)

    @admin.display(description="finished at", ordering="queue_meta__run_at")
    def finished_at(self, obj: Any) -> str:
        # For a done or failed item run_at records when it left the queue (see split_fail,
        # split_ack_done).
        finished = obj.q_state in (State.DONE, State.FAILED, State.CANCELLED)
        return display_time(obj.q_run_at if finished else None)

    @admin.display(description="lease until")
    def lease_until(self, obj: Any) -> str:
        return display_time(obj.q_lease_until)

    @admin.display(description="run at / finished", ordering="queue_meta__run_at")
    def run_or_finished(self, obj: Any) -> str:
        # One column for both: a done or failed item's run_at is when it finished.
        return list_time(obj.q_run_at)

    # -- the item page ------------------------------------------------------------------------

    def item_state(self, obj: Any) -> str:
        return self.state(obj)

    def can_retry(self, obj: Any) -> bool:
        return obj.q_state == State.FAILED  # type: ignore[no-any-return]

    def retry_ids(self, request: HttpRequest, ids: list[int]) -> None:
        done = self._queue.retry(ids)
        skipped = len(ids) - done
        note = f" ({skipped} not failed, left as they were)" if skipped else ""
        self.message_user(request, f"{done} item(s) back to ready{note}.", messages.SUCCESS)

    def can_cancel(self, obj: Any) -> bool:
        return obj.q_state in (State.READY, State.LEASED)

    def cancel_ids(self, request: HttpRequest, ids: list[int]) -> None:
        outcomes = list(self._queue.cancel(ids).values())
        counts = {o: outcomes.count(o) for o in CancelOutcome if o in outcomes}
        parts = [f"{n} {CANCEL_TOLD[o]}" for o, n in counts.items()]
        level = messages.SUCCESS if set(counts) & CHANGED else messages.WARNING
        self.message_user(request, f"Cancel: {'; '.join(parts) or 'nothing selected'}.", level)

    # -- actions ------------------------------------------------------------------------------

    @admin.action(description="Cancel selected items", permissions=["change"])
    def cancel_items(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self.cancel_ids(request, self._ids(queryset))

    @admin.action(description="Retry selected failed items", permissions=["change"])
    def retry_items(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self.retry_ids(request, self._ids(queryset))

    @admin.action(description="Set priority of selected items", permissions=["change"])
    def set_priority(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        raw = request.POST.get("priority", "").strip()
        try:
            priority = int(raw)
        except ValueError:
            self.message_user(request, "Enter the new priority (an integer).", messages.ERROR)
            return
        try:
            done = self._queue.set_priority(self._ids(queryset), priority)
        except InvalidArgument as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        self.message_user(request, f"{done} item(s) now have priority {priority}.")
