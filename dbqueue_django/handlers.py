"""``@handler``: what ``runqueueworker`` runs for each queue model.

Handlers live in a ``handlers`` module of any installed app, which the worker imports as the
admin imports ``admin`` modules::

    # shop/handlers.py
    from dbqueue_django import handler

    @handler(OrderConfirmation)                        # one item at a time
    def send_confirmation(job): ...

    @handler(PriceUpdate, batch=True, batch_size=500)  # a whole batch at once
    def apply_prices(jobs): ...
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from dbqueue.handlers import DEFAULT_BATCH_SIZE, Handler, HandlerKey, HandlerRegistry

__all__ = ["DEFAULT_BATCH_SIZE", "Handler", "autodiscover", "handler", "handlers", "unregister"]

if TYPE_CHECKING:
    from dbqueue_django.models import BaseQueueModel


def _is_queue(model: Any) -> bool:
    from dbqueue_django.models import is_queue_model

    return is_queue_model(model)


_REGISTRY = HandlerRegistry(
    is_queue=_is_queue,
    queue_label=lambda model: str(model._meta.label),
    expected="a concrete QueueModel or RingQueueModel subclass",
    error=ImproperlyConfigured,
)


def handler[F: Callable[..., object]](
    model: type[BaseQueueModel],
    *,
    batch: bool = False,
    batch_size: int | None = None,
    group: str | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``model``'s queue.

    ``batch=False``: called with one model instance per item; an exception fails that item.
    ``batch=True``: called with the list of instances; an exception fails the whole batch.
    ``batch_size``: how many items a worker pops at a time (``--batch-size`` overrides it).
    ``group``: for a queue with consumer groups (``QueueOptions.groups``), the group whose
    deliveries it handles; such a queue takes one handler per group.
    """
    return _REGISTRY.decorator(model, batch=batch, batch_size=batch_size, group=group)


#: The Django Tasks backend whose tasks the worker runs (see dbqueue_django.tasks).
TASKS_BACKEND = "dbqueue_django.tasks.DBQueueBackend"


def autodiscover() -> None:
    """Import the ``handlers`` module of every installed app; with the Tasks backend
    configured, the task queue's handler too."""
    autodiscover_modules("handlers")
    backends = getattr(settings, "TASKS", None) or {}
    if any(params.get("BACKEND") == TASKS_BACKEND for params in backends.values()):
        if importlib.util.find_spec("django.tasks") is None:
            raise ImproperlyConfigured(f"{TASKS_BACKEND} needs Django 6.0 or newer (django.tasks)")
        from dbqueue_django.models import TaskItem
        from dbqueue_django.tasks import run_task

        handler(TaskItem, batch_size=1)(run_task)


def handlers() -> dict[HandlerKey, Handler]:
    """Every registered handler, by model and consumer group (after :func:`autodiscover`)."""
    return _REGISTRY.handlers()


def unregister(model: type[Any], group: str | None = None) -> None:
    """Forget ``model``'s handler (of ``group``; tests that register their own)."""
    _REGISTRY.unregister(model, group)
