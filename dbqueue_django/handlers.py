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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

if TYPE_CHECKING:
    from dbqueue_django.models import BaseQueueModel

#: The batch a worker pops for a per-item handler: items are handled one after the other, and
#: acked in one statement.
DEFAULT_BATCH_SIZE = 100


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler of one queue model."""

    model: type[BaseQueueModel]
    func: Callable[[Any], object]
    batch: bool
    batch_size: int

    @property
    def label(self) -> str:
        return f"{self.model._meta.label} -> {self.func.__module__}.{self.func.__qualname__}"


_HANDLERS: dict[type[Any], Handler] = {}


def handler[F: Callable[..., object]](
    model: type[BaseQueueModel], *, batch: bool = False, batch_size: int | None = None
) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``model``'s queue.

    ``batch=False``: called with one model instance per item; an exception fails that item.
    ``batch=True``: called with the list of instances; an exception fails the whole batch.
    ``batch_size``: how many items a worker pops at a time (``--batch-size`` overrides it).
    """
    from dbqueue_django.models import is_queue_model

    if not is_queue_model(model):
        raise ImproperlyConfigured(
            f"@handler needs a concrete QueueModel or RingQueueModel subclass, got {model!r}"
        )
    if not isinstance(batch, bool):
        raise ImproperlyConfigured(f"@handler(batch=...) must be a bool, got {batch!r}")
    size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ImproperlyConfigured(f"@handler(batch_size=...) must be positive, got {size!r}")

    def register(func: F) -> F:
        new = Handler(model, func, batch, size)
        old = _HANDLERS.get(model)
        if old is not None and _name(old.func) != _name(func):
            raise ImproperlyConfigured(
                f"{model._meta.label} already has a handler ({old.label}); a queue has one "
                f"handler, so {_name(func)} cannot be registered too"
            )
        _HANDLERS[model] = new
        return func

    return register


def _name(func: Callable[..., object]) -> str:
    return f"{func.__module__}.{func.__qualname__}"


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


def handlers() -> dict[type[Any], Handler]:
    """Every registered handler, by model (after :func:`autodiscover`)."""
    return dict(_HANDLERS)


def unregister(model: type[Any]) -> None:
    """Forget ``model``'s handler (tests that register their own)."""
    _HANDLERS.pop(model, None)
