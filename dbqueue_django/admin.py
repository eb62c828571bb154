"""The Django admin for queues: every queue model appears under its app with no ``admin.py``
of yours, plus a "Queue overview" page listing every queue.

A split queue's list shows the counts per state and the age of the oldest ready item, filters
by state, and offers three actions: **Retry** (failed items back to ready, attempts reset; done
items, which a queue with ``keep_done`` keeps, are not retried: their work succeeded),
**Delete** (both tables), and **Set priority**. A ring queue's list shows its occupancy and the
messages in its slots; its failed messages have a list of their own, with **Retry** (pushed
again at the tail) and **Delete** (see :mod:`dbqueue_django.ring_admin`). Detail pages show the
payload, the queue columns and the last error's traceback, read-only. Actions need the model's
change or delete permission; the overview lists only the queues the user may view.

To customise, subclass :class:`QueueModelAdmin` (or the ring admins) and register it yourself:
a model that is already registered is left alone.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import PermissionDenied
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from dbqueue.errors import InvalidArgument
from dbqueue.message import State, format_age
from dbqueue_django.admin_common import (
    LIST_PAYLOAD_FIELDS,
    Count,
    QueueTableAdmin,
    changelist_url_for,
    display_time,
    with_age,
)
from dbqueue_django.models import BaseQueueModel, QueueOverview, RingQueueModel, queue_models
from dbqueue_django.ring_admin import RingFailedAdmin, RingQueueModelAdmin, ring_overview
from dbqueue_django.spec import payload_fields

__all__ = ["QueueModelAdmin", "QueueOverviewAdmin", "format_age", "register_queue_models"]


class StateFilter(admin.SimpleListFilter):
    """Ready (due now), scheduled (due later), leased, done (kept by ``keep_done``), failed."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in ("ready", "scheduled", "leased", "done", "failed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value, now = self.value(), timezone.now()
        if value == "ready":
            return queryset.filter(queue_meta__state=State.READY, queue_meta__run_at__lte=now)
        if value == "scheduled":
            return queryset.filter(queue_meta__state=State.READY, queue_meta__run_at__gt=now)
        if value == "leased":
            return queryset.filter(queue_meta__state=State.LEASED)
        if value in ("done", "failed"):
            return queryset.filter(queue_meta__state=State.parse(value))
        return queryset


class QueueActionForm(ActionForm):
    """The action bar, with the new priority for "Set priority"."""

    priority = forms.IntegerField(required=False, label="Priority", help_text="-32768..32767")


class QueueModelAdmin(QueueTableAdmin):
    """The admin of one split queue model (registered for every one automatically)."""

    action_form = QueueActionForm
    # Django's own "Delete selected" stays (with its confirmation page): it ends in
    # delete_queryset(), which deletes from both tables.
    actions = ["retry_items", "set_priority"]
    list_filter = [StateFilter]
    ordering = ["-id"]

    # -- what is shown ------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)
        annotated: QuerySet[Any] = queryset.annotate(
            q_state=F("queue_meta__state"),
            q_attempts=F("queue_meta__attempts"),
            q_priority=F("queue_meta__priority"),
            q_run_at=F("queue_meta__run_at"),
            q_lease_until=F("queue_meta__lease_until"),
        )
        return annotated

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)][:LIST_PAYLOAD_FIELDS]
        return ["id", *names, "state", "attempts", "priority", "run_at", "finished_at",
                "enqueued_at", "error"]  # fmt: skip

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["id", *names, "state", "attempts", "priority", "run_at", "lease_until",
                "enqueued_at", "traceback"]  # fmt: skip

    def queue_counts(self, request: HttpRequest, stats: dict[str, Any]) -> list[Count]:
        expired = f"{stats['expired']} expired" if stats["expired"] else ""
        return [
            Count("ready", stats["ready"]),
            Count("scheduled", stats["scheduled"]),
            Count("leased", stats["leased"], note=expired),
            Count("done", stats["done"], url="?state=done"),
            Count("failed", stats["failed"], url="?state=failed", css="failed"),
            Count("oldest ready", stats["oldest_ready"]),
        ]

    @admin.display(description="state", ordering="queue_meta__state")
    def state(self, obj: Any) -> str:
        if obj.q_state is None:
            return "-"
        state = State(obj.q_state)
        if state is State.READY and obj.q_run_at > timezone.now():
            return "scheduled"
        return state.name.lower()

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
        finished = obj.q_state in (State.DONE, State.FAILED)
        return display_time(obj.q_run_at if finished else None)

    @admin.display(description="lease until")
    def lease_until(self, obj: Any) -> str:
        return display_time(obj.q_lease_until)

    # -- actions ------------------------------------------------------------------------------

    @admin.action(description="Retry selected failed items", permissions=["change"])
    def retry_items(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = self._ids(queryset)
        done = self._queue.retry(ids)
        skipped = len(ids) - done
        note = f" ({skipped} not failed, left as they were)" if skipped else ""
        self.message_user(request, f"{done} item(s) back to ready{note}.", messages.SUCCESS)

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


class QueueOverviewAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """ "Queue overview": every queue the user may view, with its counts (a ring's occupancy
    too)."""

    def _visible(self, request: HttpRequest) -> list[type[BaseQueueModel]]:
        user: Any = request.user
        return [
            m
            for m in queue_models()
            if user.has_perm(f"{m._meta.app_label}.view_{m._meta.model_name}")
            or user.has_perm(f"{m._meta.app_label}.change_{m._meta.model_name}")
        ]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff and self._visible(request))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def _row(self, model: type[BaseQueueModel]) -> dict[str, Any]:
        opts = model._meta
        url = changelist_url_for(self.admin_site, model)
        stats = with_age(model.queue.stats())
        row = {
            "label": f"{opts.app_config.verbose_name} / {opts.verbose_name_plural}",
            "url": url,
            "failed_url": f"{url}?state=failed" if url else None,
            "done_url": f"{url}?state=done" if url else None,
            "stats": stats,
            "occupancy": "-",
        }
        if issubclass(model, RingQueueModel):
            row.update(ring_overview(self.admin_site, model, stats))
        return row

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **(extra_context or {}),
            "title": "Queue overview",
            "rows": [self._row(model) for model in self._visible(request)],
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/dbqueue_django/queue_overview.html", context)


def register_queue_models(site: admin.AdminSite | None = None) -> None:
    """Register the queue admins for every queue model not registered yet (a ring's failed
    model too), and the overview page. Called when the app is ready, after the admin modules
    were imported."""
    site = site or admin.site
    for model in queue_models():
        if issubclass(model, RingQueueModel):
            pairs: list[tuple[Any, Any]] = [
                (model, RingQueueModelAdmin),
                (model.failed_model, RingFailedAdmin),
            ]
        else:
            pairs = [(model, QueueModelAdmin)]
        for registered, model_admin in pairs:
            if not site.is_registered(registered):
                site.register(registered, model_admin)
    if not site.is_registered(QueueOverview):
        site.register(QueueOverview, QueueOverviewAdmin)
