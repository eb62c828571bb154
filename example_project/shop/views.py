"""The shop's HTTP API: place an order (and enqueue its confirmation), from a sync or an async
view, and read the queue's stats."""

import time
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from shop.forms import OrderForm
from shop.models import Order, OrderConfirmation, OrderEvent, PageView

#: The user id of a page view by a visitor who is not signed in (the order API has no sign-in).
ANONYMOUS = 0


def save_order(form: OrderForm) -> tuple[Order, int]:
    """Create the order and push its confirmation and its event in ONE transaction: all or
    nothing. Return the order and its confirmation's message id."""
    with transaction.atomic():
        order = form.save()
        message_id = OrderConfirmation.queue.push(order_id=order.pk, email=order.email)
        # A ring is bounded: with no worker draining it for a while, this push spills into
        # the ring's overflow table (when_full = "spill") and the order goes through.
        OrderEvent.queue.push(order_id=order.pk, total=order.total)
    return order, message_id


def _refused(form: OrderForm) -> JsonResponse:
    return JsonResponse({"errors": form.errors.get_json_data()}, status=400)


def _placed(order: Order, message_id: int) -> JsonResponse:
    return JsonResponse({"order": order.pk, "message": message_id}, status=201)


@csrf_exempt  # a JSON API for scripts (curl, the demo command): no session, no CSRF cookie
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Place an order (see :func:`save_order`)."""
    form = OrderForm(request.POST)
    if not form.is_valid():
        return _refused(form)
    return _placed(*save_order(form))


@csrf_exempt
@require_POST
async def place_order_async(request: HttpRequest) -> JsonResponse:
    """Place an order from an async view (served by ``shopsite.asgi``), and record the page
    view."""
    started = time.monotonic()
    form = OrderForm(request.POST)  # validation runs no query: the form has no unique field
    if form.is_valid():
        # Django has no async atomic(): the order's transaction is save_order, a sync function
        # that sync_to_async runs in this request's thread, on its connection.
        response = _placed(*await sync_to_async(save_order)(form))
    else:
        response = _refused(form)
    # Outside any transaction apush commits at once, on its own: a page view lost to a crash
    # right after the order committed is fine, so it need not wait for the order's.
    elapsed_ms = round((time.monotonic() - started) * 1000)
    await PageView.queue.apush(user_id=ANONYMOUS, path=request.path, duration_ms=elapsed_ms)
    return response


def _json_value(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


@require_GET
def queue_stats(request: HttpRequest) -> JsonResponse:
    """``OrderConfirmation.queue.stats()``; ``oldest_ready_age`` in seconds (or null)."""
    stats = OrderConfirmation.queue.stats()
    return JsonResponse({key: _json_value(value) for key, value in stats.items()})
