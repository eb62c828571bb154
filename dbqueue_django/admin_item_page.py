"""A queue item's page in the admin: read-only, titled after the item's state ("View failed
order confirmation"), with a **Retry** button when the item failed and Django's **Delete**.

Retry is a POST (with Django's CSRF token) to ``<id>/retry/``, under the model's change
permission; it runs the same retry as the list's action, says what happened in a message and
goes back to the list the page was opened from (its filters kept).
"""

from __future__ import annotations

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

    def can_retry(self, obj: Any) -> bool:
        """Whether ``obj`` may be retried: it failed for good."""
        return False

    def retry_ids(self, request: HttpRequest, ids: list[int]) -> None:
        """Retry the items (by message number) and tell the user what happened."""
        raise NotImplementedError

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        retry = path(
            "<path:object_id>/retry/",
            self.admin_site.admin_view(self.retry_view),
            name="{}_{}_retry".format(*info),
        )
        # Before Django's own: its last pattern takes any "<id>/..." path.
        return [retry, *super().get_urls()]

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
            if self.can_retry(obj) and self.has_change_permission(request, obj):
                context["retry_url"] = self._url("retry", quote(obj.pk))
        context.update(extra_context or {})
        return super().change_view(request, object_id, form_url, extra_context=context)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: retry the item, then back to the list with a message."""
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
            self.retry_ids(request, [obj.id])
        changelist = self._url("changelist")
        preserved: dict[str, Any] = {
            "preserved_filters": self.get_preserved_filters(request),
            "opts": self.opts,
        }
        return HttpResponseRedirect(add_preserved_filters(preserved, changelist))

    def _url(self, view: str, *args: Any) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}"
        return reverse(name, args=args)
