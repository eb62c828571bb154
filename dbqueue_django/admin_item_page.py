"""A queue item's page in the admin: read-only, titled after the item's state ("View failed
order confirmation"), with a **Retry** button when the item failed, a **Cancel** button when
it may still be cancelled (ready, scheduled or leased, in a split queue) and Django's
**Delete**.

Retry and Cancel are POSTs (with Django's CSRF token) to ``<id>/retry/`` and
``<id>/cancel/``, under the model's change permission; each runs the same operation as the
list's action, says what happened in a message and goes back to the list the page was opened
from (its filters kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse


class ItemPageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The item page of the queue admins. Subclasses say what state an item is in, whether
    it can be retried, and how a retry is run and reported."""

    change_form_template = "admin/dbqueue_django/queue_change_form.html"

    def item_state(self, obj: Any) -> str:
        """The item's state as the list shows it ("failed", "ready", ...)."""
        raise NotImplementedError

    def item_noun(self) -> str:
        """What one item is called in the page's title ("order confirmation")."""
        return str(self.opts.verbose_name)

    def item_subtitle(self, request: HttpRequest, obj: Any) -> str | None:
        """The page's subtitle, under its title (None: Django's, the item itself)."""
        return None

    def can_retry(self, obj: Any) -> bool:
        """Whether ``obj`` may be retried: it failed for good."""
        return False

    def retry_ids(self, request: HttpRequest, ids: list[int]) -> None:
        """Retry the items (by message number) and tell the user what happened."""
        raise NotImplementedError

    def can_cancel(self, obj: Any) -> bool:
        """Whether ``obj`` may be cancelled: ready, scheduled or leased (split queues)."""
        return False

    def cancel_ids(self, request: HttpRequest, ids: list[int]) -> None:
        """Cancel the items and tell the user what happened."""
        raise NotImplementedError

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        buttons = [
            path(
                f"<path:object_id>/{view}/",
                self.admin_site.admin_view(getattr(self, f"{view}_view")),
                name=f"{info[0]}_{info[1]}_{view}",
            )
            for view in ("retry", "cancel")
        ]
        # Before Django's own: its last pattern takes any "<id>/..." path.
        return [*buttons, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            # Nothing on the page is a form field: items change through Retry and Delete.
            return HttpResponseNotAllowed(["GET", "HEAD"])
        obj = self.get_object(request, unquote(object_id))
        context: dict[str, Any] = {"show_save": False, "show_save_and_continue": False,
                                   "show_save_and_add_another": False}  # fmt: skip
        if obj is not None:
            context["title"] = f"View {self.item_state(obj)} {self.item_noun()}"
            subtitle = self.item_subtitle(request, obj)
            if subtitle is not None:
                context["subtitle"] = subtitle
            if self.can_retry(obj) and self.has_change_permission(request, obj):
                context["retry_url"] = self._url("retry", quote(obj.pk))
            if self.can_cancel(obj) and self.has_change_permission(request, obj):
                context["cancel_url"] = self._url("cancel", quote(obj.pk))
        context.update(extra_context or {})
        return super().change_view(request, object_id, form_url, extra_context=context)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: retry the item, then back to the list with a message."""
        return self._button(request, object_id, self.retry_ids)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: cancel the item, then back to the list with a message."""
        return self._button(request, object_id, self.cancel_ids)

    def _button(
        self,
        request: HttpRequest,
        object_id: str,
        run: Callable[[HttpRequest, list[int]], None],
    ) -> HttpResponse:
        """A button's POST: ``run`` on the item, then back to the list with a message."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        if obj is None:
            name = str(self.opts.verbose_name).capitalize()
            text = f'{name} with ID "{unquote(object_id)}" does not exist. Perhaps it was deleted?'
            self.message_user(request, text, messages.WARNING)
        else:
            run(request, [obj.id])
        changelist = self._url("changelist")
        preserved: dict[str, Any] = {
            "preserved_filters": self.get_preserved_filters(request),
            "opts": self.opts,
        }
        return HttpResponseRedirect(add_preserved_filters(preserved, changelist))

    def _url(self, view: str, *args: Any) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}"
        return reverse(name, args=args)
