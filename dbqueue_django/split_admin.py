"""The admin of a split queue (a data table and its meta table): the items with their state,
counts per state, a filter by state, and the Retry, Cancel, Set priority and Delete
actions. A unique queue's list and item page also show each item's unique key, which the
search box searches."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.utils import unquote
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
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
from dbqueue_django.spec import has_unique_keys, meta_relation, payload_fields


class StateFilter(admin.SimpleListFilter):
    """Ready (due now), scheduled (due later), leased, done (kept by ``keep_done``), failed,
    cancelled (as the stats count them: a cancelling item is leased until its lease ends)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        states = ("ready", "scheduled", "leased", "done", "failed", "cancelled")
        return [(s, s) for s in states]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # On the admin's annotations (QueueModelAdmin.get_queryset): the meta columns of the
        # queue's meta model, or of the consumer group the list shows.
        value, now = self.value(), timezone.now()
        if value == "ready":
            return queryset.filter(q_state=State.READY, q_run_at__lte=now)
        if value == "scheduled":
            return queryset.filter(q_state=State.READY, q_run_at__gt=now)
        # A cancelling item is leased until its lease ends, then cancelled (see split_stats).
        cancelling = Q(q_state=State.CANCELLING)
        if value == "leased":
            live = cancelling & Q(q_lease_until__gte=now)
            return queryset.filter(Q(q_state=State.LEASED) | live)
        if value == "cancelled":
            ended = cancelling & Q(q_lease_until__lt=now)
            return queryset.filter(Q(q_state=State.CANCELLED) | ended)
        if value in ("done", "failed"):
            return queryset.filter(q_state=State.parse(value))
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


def annotate_meta(queryset: QuerySet[Any], relation: str, extra: list[str]) -> QuerySet[Any]:
    """``queryset`` with the meta columns reached through ``relation`` as ``q_<column>``
    (the admin's columns, filters and sorting read them), ``extra`` columns too."""
    columns = ["state", "attempts", "priority", "run_at", "lease_until", *extra]
    annotated: QuerySet[Any] = queryset.annotate(
        **{f"q_{c}": F(f"{relation}__{c}") for c in columns}
    )
    return annotated


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
        return annotate_meta(queryset, "queue_meta", self._unique)

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

    @admin.display(description="state", ordering="q_state")
    def state(self, obj: Any) -> str:
        if obj.q_state is None:
            return "-"
        state = State(obj.q_state)
        if state is State.READY and obj.q_run_at > timezone.now():
            return "scheduled"
        if state is State.CANCELLING:
            return "cancelling"
        return state.name.lower()

    @admin.display(description="unique key", ordering="q_unique_key")
    def unique_key(self, obj: Any) -> str:
        return obj.q_unique_key or "-"

    @admin.display(description="attempts", ordering="q_attempts")
    def attempts(self, obj: Any) -> int | None:
        return obj.q_attempts  # type: ignore[no-any-return]

    @admin.display(description="priority", ordering="q_priority")
    def priority(self, obj: Any) -> int | None:
        return obj.q_priority  # type: ignore[no-any-return]

    @admin.display(description="run at", ordering="q_run_at")
    def run_at(self, obj: Any) -> str:
        return display_time(obj.q_run_at)

    @admin.display(description="finished at", ordering="q_run_at")
    def finished_at(self, obj: Any) -> str:
        # For a done or failed item run_at records when it left the queue (see split_fail,
        # split_ack_done).
        finished = obj.q_state in (State.DONE, State.FAILED, State.CANCELLED)
        return display_time(obj.q_run_at if finished else None)

    @admin.display(description="lease until")
    def lease_until(self, obj: Any) -> str:
        return display_time(obj.q_lease_until)

    @admin.display(description="run at / finished", ordering="q_run_at")
    def run_or_finished(self, obj: Any) -> str:
        # One column for both: a done or failed item's run_at is when it finished.
        return list_time(obj.q_run_at)

    # -- the item page ------------------------------------------------------------------------

    def item_state(self, obj: Any) -> str:
        return self.state(obj)

    def can_retry(self, obj: Any) -> bool:
        return obj.q_state == State.FAILED  # type: ignore[no-any-return]

    def retry_ids(self, request: HttpRequest, ids: list[int]) -> None:
        done = self.queue_for(request).retry(ids)
        skipped = len(ids) - done
        note = f" ({skipped} not failed, left as they were)" if skipped else ""
        self.message_user(request, f"{done} item(s) back to ready{note}.", messages.SUCCESS)

    def can_cancel(self, obj: Any) -> bool:
        return obj.q_state in (State.READY, State.LEASED)

    def cancel_ids(self, request: HttpRequest, ids: list[int]) -> None:
        outcomes = list(self.queue_for(request).cancel(ids).values())
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
            done = self.queue_for(request).set_priority(self._ids(queryset), priority)
        except InvalidArgument as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        self.message_user(request, f"{done} item(s) now have priority {priority}.")


#: The list's filter by consumer group: ``?group=<name>`` (default: the queue's first group).
GROUP_PARAM = "group"


class GroupFilter(admin.SimpleListFilter):
    """The consumer group whose deliveries a queue with groups lists (its states, counts and
    actions): one group at a time, the first one unless chosen."""

    title = "consumer group"
    parameter_name = GROUP_PARAM

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(g, g) for g in model_admin.model.queue.spec.options.groups]

    def choices(self, changelist: Any) -> Any:
        # No "All": a list shows one group's states (the group chosen, else the first).
        chosen = self.value() or changelist.model.queue.spec.options.groups[0]
        for value, title in self.lookup_choices:
            yield {
                "selected": chosen == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset  # GroupedQueueModelAdmin.get_queryset reads the group


class GroupChoice:
    """What the admin of a queue with consumer groups (split or ring) shares: the group a
    request chose in the :class:`GroupFilter`, and that group's queue."""

    model: Any

    def group_of(self, request: HttpRequest) -> str:
        """The group ``request`` chose (``?group=``, or the list's filters kept by an item
        page), else the queue's first."""
        groups: tuple[str, ...] = self.model.queue.spec.options.groups
        kept = QueryDict(request.GET.get("_changelist_filters", ""))
        chosen = request.GET.get(GROUP_PARAM) or kept.get(GROUP_PARAM)
        return chosen if chosen in groups else groups[0]

    def queue_for(self, request: HttpRequest) -> Any:
        return self.model.queue.group(self.group_of(request))

    def item_subtitle(self, request: HttpRequest, obj: Any) -> str | None:
        # Django's subtitle (the item), and which group's state the page shows.
        return f"{obj} — consumer group {self.group_of(request)}"


class GroupedQueueModelAdmin(GroupChoice, QueueModelAdmin):
    """The admin of a split queue with consumer groups (``QueueOptions.groups``): the list,
    its counts, the state filter and the Retry, Cancel and Set priority actions are of one
    group, chosen in the "consumer group" filter (the first by default); Delete deletes items
    from every group. An item's page shows, and its Retry and Cancel buttons act on, the
    group of the list it was opened from; opened without one, the first group that holds
    the item (the page is then reloaded with that group chosen, so its buttons act on it)."""

    list_filter = [GroupFilter, StateFilter]
    date_hierarchy = None  # type: ignore[assignment] # the run_at of which group?

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        relation = meta_relation(self.group_of(request))
        queryset: QuerySet[Any] = super(QueueModelAdmin, self).get_queryset(request)
        held = queryset.filter(**{f"{relation}__isnull": False})
        return annotate_meta(held, relation, ["last_error"])

    def error_text(self, obj: Any) -> str | None:
        return obj.q_last_error  # type: ignore[no-any-return]

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        return ["=id", f"{meta_relation(self.group_of(request))}__last_error"]

    def _held_by(self, request: HttpRequest, object_id: str, group: str) -> bool:
        """Whether consumer group ``group`` holds the item ``object_id``."""
        held = {f"{meta_relation(group)}__isnull": False}
        queryset = super(QueueModelAdmin, self).get_queryset(request)
        return bool(queryset.filter(pk=unquote(object_id), **held).exists())

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        chosen = self.group_of(request)
        if not self._held_by(request, object_id, chosen):
            others = [g for g in self.model.queue.spec.options.groups if g != chosen]
            holder = next((g for g in others if self._held_by(request, object_id, g)), None)
            if holder is not None:  # the page of the group that holds it
                kept = QueryDict(request.GET.get("_changelist_filters", ""), mutable=True)
                kept[GROUP_PARAM] = holder
                query = QueryDict(mutable=True)
                query["_changelist_filters"] = kept.urlencode()
                return HttpResponseRedirect(f"{request.path}?{query.urlencode()}")
        return super().change_view(request, object_id, form_url, extra_context)
