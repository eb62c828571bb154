"""Template tags of the queue admins' pages (``{% load dbqueue_admin %}``)."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy

register = template.Library()


@register.inclusion_tag("admin/date_hierarchy.html")
def queue_date_hierarchy(cl: Any) -> dict[str, Any]:
    """Django's date drill-down above a list, left out when the list holds a time it cannot
    show: Django converts the list's first and last times to the current time zone, which
    overflows for one near the ends of Python's datetime range (a run_at near 9999 written by
    SQL outside dbqueue, seen east of UTC). The list itself shows such a time as it is."""
    try:
        return date_hierarchy(cl) or {"show": False}
    except OverflowError:
        return {"show": False}
