"""The ``a``-prefixed twins of ``Model.queue``'s operations (``apush``, ``apop_batch``, ...).

Each twin is made from its operation's one definition, as Django makes its async ORM methods
(``aget`` awaits ``get``): it runs the queue's sync method through ``sync_to_async`` in the
thread-sensitive executor. There, every sync call of one request (each ORM call, each twin,
each function wrapped by ``sync_to_async``) runs in the same thread, on the same connection,
so a twin sees the transaction state the request's other calls left: none outside
``atomic()`` (autocommit: it commits at once), or the block a caller opened in that thread.

The sync methods themselves refuse to run where an event loop runs
(:func:`refuse_async_context`), as Django's ORM does, with a hint at the twin.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation


def async_twin[Q, **P, R](
    operation: Callable[Concatenate[Q, P], R],
) -> Callable[Concatenate[Q, P], Coroutine[Any, Any, R]]:
    """``operation`` as a coroutine method named ``a<operation>``: it awaits the queue's own
    ``<operation>`` (a subclass's override included) in the thread-sensitive executor."""
    name = operation.__name__

    @functools.wraps(operation)  # the signature help() and editors show
    async def method(self: Q, /, *args: P.args, **kw: P.kwargs) -> R:
        sync: Callable[P, R] = getattr(self, name)
        return await sync_to_async(sync)(*args, **kw)

    method.__name__ = method.__qualname__ = f"a{name}"
    method.__doc__ = (
        f":meth:`{name}` for async code: run in the thread-sensitive executor, on the "
        f"connection of the request's other ORM calls (see :mod:`dbqueue_django.async_twins`)."
    )
    return method


def refuse_async_context(model: type[Any]) -> None:
    """Raise SynchronousOnlyOperation if an event loop runs in this thread (unless
    ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set, as Django's ORM allows): a database call there would
    block every other request of the loop."""
    if os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE"):
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise SynchronousOnlyOperation(
        f"{model.__name__}.queue cannot run a database call in an async context: await its "
        f"a-method (apush, apush_many, apop_batch, ...), or call it in a function run by "
        f"sync_to_async (to push in the same transaction as other writes)"
    )
