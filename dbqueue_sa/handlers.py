"""``@handler``: what ``dbqueue worker`` runs for each queue class.

Handlers live in modules the worker is told to import (``dbqueue worker --url URL
myapp.handlers``); importing a module runs its decorators, which register the functions::

    # myapp/handlers.py
    from dbqueue_sa import handler
    from myapp.models import OrderConfirmation, PriceUpdate

    @handler(OrderConfirmation)                        # one item at a time
    def send_confirmation(job): ...

    @handler(PriceUpdate, batch=True, batch_size=500)  # a whole batch at once
    def apply_prices(jobs): ...

A handler receives detached instances of the mapped class (with ``attempts`` set; see
:meth:`dbqueue_sa.SAQueue.pop_batch`); it opens its own ``Session`` for any database work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dbqueue.errors import InvalidArgument
from dbqueue.handlers import DEFAULT_BATCH_SIZE, Handler, HandlerKey, HandlerRegistry
from dbqueue_sa.mixins import queue_classes

__all__ = ["DEFAULT_BATCH_SIZE", "Handler", "handler", "handlers", "unregister"]


def _is_queue(model: Any) -> bool:
    return isinstance(model, type) and model in queue_classes()


def _label(model: type[Any]) -> str:
    return f"{model.__name__} ({model.__queue_spec__.table})"


_REGISTRY = HandlerRegistry(
    is_queue=_is_queue,
    queue_label=_label,
    expected="a mapped QueueMixin or RingQueueMixin class",
    error=InvalidArgument,
)


def handler[F: Callable[..., object]](
    model: type[Any],
    *,
    batch: bool = False,
    batch_size: int | None = None,
    group: str | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``model``'s queue.

    ``model`` is a mapped ``QueueMixin`` or ``RingQueueMixin`` class. ``batch=False``: the
    function is called with one instance per item, and an exception fails that item;
    ``batch=True``: with the list of instances, and an exception fails the whole batch.
    ``batch_size``: how many items a worker pops at a time (``--batch-size`` overrides it).
    ``group``: for a queue with consumer groups (``QueueOptions.groups``), the group whose
    deliveries it handles; such a queue takes one handler per group.
    Raises :class:`~dbqueue.errors.InvalidArgument` for anything else, and when the queue
    already has a different handler (registering the same function again is harmless: a
    module imported twice).
    """
    return _REGISTRY.decorator(model, batch=batch, batch_size=batch_size, group=group)


def handlers() -> dict[HandlerKey, Handler]:
    """Every registered handler, by queue class and consumer group, in registration order."""
    return _REGISTRY.handlers()


def unregister(model: type[Any], group: str | None = None) -> None:
    """Forget ``model``'s handler (of ``group``; tests that register their own)."""
    _REGISTRY.unregister(model, group)
