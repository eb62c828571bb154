"""The shop's HTTP API: place an order (and enqueue its confirmation), read the queue's stats."""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from shop.forms import OrderForm
from shop.models import OrderConfirmation, OrderEvent


@csrf_exempt  # a JSON API for scripts (curl, the demo command): no session, no CSRF cookie
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Create the order and push its confirmation and its event in ONE transaction: all or
    nothing."""
    form = OrderForm(request.POST)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors.get_json_data()}, status=400)
    with transaction.atomic():
        order = form.save()
        message_id = OrderConfirmation.queue.push(order_id=order.pk, email=order.email)
        # A ring is bounded: with no worker draining it for a while, this push waits
        # push_timeout for a free slot, then raises QueueFull and the order rolls back.
        OrderEvent.queue.push(order_id=order.pk, total=order.total)
    return JsonResponse({"order": order.pk, "message": message_id}, status=201)


def _json_value(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


@require_GET
def queue_stats(request: HttpRequest) -> JsonResponse:
    """``OrderConfirmation.queue.stats()``; ``oldest_ready_age`` in seconds (or null)."""
    stats = OrderConfirmation.queue.stats()
    return JsonResponse({key: _json_value(value) for key, value in stats.items()})
