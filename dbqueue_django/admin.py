"""The Django admin for queues: every queue model appears under its app with no ``admin.py``
of yours, plus a "Queue overview" page listing every queue.

Each queue's list shows the counts per state and the age of the oldest ready item, filters by
state, and offers three actions: **Retry** (failed items back to ready, attempts reset),
**Delete** (both tables), and **Set priority**. The detail page shows the payload, the meta
columns and the last error's traceback, read-only. Actions need the model's change or delete
permission; the overview lists only the queues the user may view.

To customise, subclass :class:`QueueModelAdmin` and register it yourself: a queue model that
is already registered is left alone.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.utils import display_for_value
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html

from dbqueue.errors import InvalidArgument
from dbqueue.message import State
from dbqueue_django.models import QueueModel, QueueOverview, queue_models
from dbqueue_django.spec import payload_fields

#: Payload columns shown in a queue's list (all of them are on the detail page).
LIST_PAYLOAD_FIELDS = 4
#: Characters of the last error shown in the list.
ERROR_PREVIEW = 80


def format_age(age: dt.timedelta | None) -> str:
    """``4.8 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``; "-" for no age."""
    if age is None:
        return "-"
    seconds = age.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {sec} s"


def _when(value: dt.datetime | None) -> str:
    """A time as the admin shows model fields: localised, in the current time zone."""
    return str(display_for_value(value, "-"))


def _with_age(stats: dict[str, Any]) -> dict[str, Any]:
    return {**stats, "oldest_ready": format_age(stats["oldest_ready_age"])}


class StateFilter(admin.SimpleListFilter):
    """Ready (due now), scheduled (due later), leased, failed."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in ("ready", "scheduled", "leased", "failed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value, now = self.value(), timezone.now()
        if value == "ready":
            return queryset.filter(queue_meta__state=State.READY, queue_meta__run_at__lte=now)
        if value == "scheduled":
            return queryset.filter(queue_meta__state=State.READY, queue_meta__run_at__gt=now)
        if value == "leased":
            return queryset.filter(queue_meta__state=State.LEASED)
        if value == "failed":
            return queryset.filter(queue_meta__state=State.FAILED)
        return queryset


class QueueActionForm(ActionForm):
    """The action bar, with the new priority for "Set priority"."""

    priority = forms.IntegerField(required=False, label="Priority", help_text="-32768..32767")


class QueueModelAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The admin of one queue model (registered for every queue model automatically)."""

    action_form = QueueActionForm
    # Django's own "Delete selected" stays (with its confirmation page): it ends in
    # delete_queryset(), which deletes from both tables.
    actions = ["retry_items", "set_priority"]
    list_filter = [StateFilter]
    list_per_page = 50
    change_list_template = "admin/dbqueue_django/queue_change_list.html"
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
        return ["id", *names, "state", "attempts", "priority", "run_at", "failed_at",
                "enqueued_at", "error"]  # fmt: skip

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        names = [f.name for f in payload_fields(self.model)]
        return ["id", *names, "state", "attempts", "priority", "run_at", "lease_until",
                "enqueued_at", "traceback"]  # fmt: skip

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return self.get_fields(request, obj)

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
        return _when(obj.q_run_at)

    @admin.display(description="failed at", ordering="queue_meta__run_at")
    def failed_at(self, obj: Any) -> str:
        # For a failed item run_at records when it failed (see split_fail).
        return _when(obj.q_run_at if obj.q_state == State.FAILED else None)

    @admin.display(description="lease until")
    def lease_until(self, obj: Any) -> str:
        return _when(obj.q_lease_until)

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
        stats = _with_age(self._queue.stats())
        context = {**(extra_context or {}), "queue_stats": stats}
        return super().changelist_view(request, extra_context=context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Items are read-only: change them through the actions (or push a new one).
        context = {**(extra_context or {}), "show_save": False,
                   "show_save_and_continue": False, "show_save_and_add_another": False}  # fmt: skip
        return super().change_view(request, object_id, form_url, extra_context=context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # items are pushed by code, which validates them

    # -- actions ------------------------------------------------------------------------------

    @property
    def _queue(self) -> Any:
        """The model's queue, on the database the router picks for it."""
        return self.model.queue

    def _ids(self, queryset: QuerySet[Any]) -> list[int]:
        return list(queryset.values_list("pk", flat=True))

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

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        self._queue.delete([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._queue.delete(self._ids(queryset))


class QueueOverviewAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """ "Queue overview": every queue the user may view, with its counts."""

    def _visible(self, request: HttpRequest) -> list[type[QueueModel]]:
        user: Any = request.user
        return [
            m
            for m in queue_models()
            if user.has_perm(f"{m._meta.app_label}.view_{m._meta.model_name}")
            or user.has_perm(f"{m._meta.app_label}.change_{m._meta.model_name}")
        ]

    def _changelist_url(self, model: type[models.Model]) -> str | None:
        return _changelist_url_for(self.admin_site, model)

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

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows = []
        for model in self._visible(request):
            opts = model._meta
            rows.append(
                {
                    "label": f"{opts.app_config.verbose_name} / {opts.verbose_name_plural}",
                    "url": self._changelist_url(model),
                    "stats": _with_age(model.queue.stats()),
                }
            )
        context = {
            **self.admin_site.each_context(request),
            **(extra_context or {}),
            "title": "Queue overview",
            "rows": rows,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/dbqueue_django/queue_overview.html", context)


def _changelist_url_for(site: admin.AdminSite, model: type[models.Model]) -> str | None:
    opts = model._meta
    try:
        return reverse(f"{site.name}:{opts.app_label}_{opts.model_name}_changelist")
    except NoReverseMatch:  # registered on another admin site, or not at all
        return None


def register_queue_models(site: admin.AdminSite | None = None) -> None:
    """Register :class:`QueueModelAdmin` for every queue model not registered yet, and the
    overview page. Called when the app is ready, after the admin modules were imported."""
    site = site or admin.site
    for model in queue_models():
        if not site.is_registered(model):
            site.register(model, QueueModelAdmin)
    if not site.is_registered(QueueOverview):
        site.register(QueueOverview, QueueOverviewAdmin)
