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
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from dbqueue.message import format_age
from dbqueue_django.admin_common import changelist_url_for, with_age
from dbqueue_django.models import (
    BaseQueueModel,
    QueueOverview,
    RingQueueModel,
    TaskItem,
    queue_models,
)
from dbqueue_django.ring_admin import (
    GroupedRingQueueModelAdmin,
    RingFailedAdmin,
    RingQueueModelAdmin,
    ring_overview,
)
from dbqueue_django.spec import groups_of
from dbqueue_django.split_admin import GroupedQueueModelAdmin, QueueModelAdmin
from dbqueue_django.task_item_admin import TaskItemAdmin

__all__ = ["QueueModelAdmin", "QueueOverviewAdmin", "format_age", "register_queue_models"]


#: The overview's filter by queue: ``?queue=shop.orderconfirmation`` (the model's label).
QUEUE_PARAM = "queue"


class QueueOverviewAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """ "Queue overview": every queue the user may view, with its counts (a ring's occupancy
    too); ``?queue=<app_label>.<model_name>`` shows one."""

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

    @staticmethod
    def _label(model: type[BaseQueueModel]) -> str:
        opts = model._meta
        return f"{opts.app_config.verbose_name} / {opts.verbose_name_plural}"

    def _rows(self, model: type[BaseQueueModel]) -> list[dict[str, Any]]:
        """The model's row, or a queue with consumer groups' row per group (linked to its
        list filtered on the group)."""
        groups = groups_of(model)
        if not groups:
            return [self._row(model)]
        rows = []
        for group in groups:
            url = changelist_url_for(self.admin_site, model)
            rows.append(
                self._row(model, group, f"{url}?{urlencode({'group': group})}" if url else None)
            )
        return rows

    def _row(
        self, model: type[BaseQueueModel], group: str | None = None, url: str | None = None
    ) -> dict[str, Any]:
        queue: Any = model.queue if group is None else model.queue.group(group)
        url = url or changelist_url_for(self.admin_site, model)
        stats = with_age(queue.stats())
        joint = "&" if url and "?" in url else "?"
        row = {
            "label": self._label(model) + ("" if group is None else f" [{group}]"),
            "url": url,
            "failed_url": f"{url}{joint}state=failed" if url else None,
            "done_url": f"{url}{joint}state=done" if url else None,
            "stats": stats,
            "occupancy": "-",
        }
        if issubclass(model, RingQueueModel):
            row.update(ring_overview(self.admin_site, model, stats, group))
        return row

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        visible = self._visible(request)
        chosen = request.GET.get(QUEUE_PARAM)
        shown = [m for m in visible if chosen in (None, m._meta.label_lower)]
        choices = [{"display": "All", "query_string": "?", "selected": not shown or chosen is None}]
        choices += [
            {
                "display": self._label(m),
                "query_string": f"?{urlencode({QUEUE_PARAM: m._meta.label_lower})}",
                "selected": m._meta.label_lower == chosen,
            }
            for m in visible
        ]
        context = {
            **self.admin_site.each_context(request),
            **(extra_context or {}),
            "title": "Queue overview",
            # An unknown queue (a stale link) shows them all.
            "rows": [row for model in shown or visible for row in self._rows(model)],
            "queue_choices": choices,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/dbqueue_django/queue_overview.html", context)


def split_admin_for(model: type[BaseQueueModel]) -> type[QueueModelAdmin]:
    """The admin class of a split queue model: the task queue's, a queue with consumer
    groups', or the plain one."""
    if model is TaskItem:
        return TaskItemAdmin
    return GroupedQueueModelAdmin if groups_of(model) else QueueModelAdmin


def register_queue_models(site: admin.AdminSite | None = None) -> None:
    """Register the queue admins for every queue model not registered yet (a ring's failed
    model too), and the overview page. Called when the app is ready, after the admin modules
    were imported."""
    site = site or admin.site
    for model in queue_models():
        if issubclass(model, RingQueueModel):
            grouped = bool(model.queue_group_models)
            pairs: list[tuple[Any, Any]] = [
                (model, GroupedRingQueueModelAdmin if grouped else RingQueueModelAdmin),
                (model.failed_model, RingFailedAdmin),
                *((side, RingFailedAdmin) for side in model.queue_group_failed_models.values()),
            ]
        else:
            pairs = [(model, split_admin_for(model))]
        for registered, model_admin in pairs:
            if not site.is_registered(registered):
                site.register(registered, model_admin)
    if not site.is_registered(QueueOverview):
        site.register(QueueOverview, QueueOverviewAdmin)
