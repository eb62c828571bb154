"""The registry behind every front end's ``@handler``: which function the worker runs for each
queue, per item or per batch, and how many items it pops at a time.

The adapters create one :class:`HandlerRegistry` each, saying what a queue is in their terms
(a Django queue model, a mapped SQLAlchemy queue class), how to name one, and which error a
bad registration raises (Django's ``ImproperlyConfigured``, the core's ``InvalidArgument``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The batch a worker pops for a per-item handler: items are handled one after the other, and
#: acked in one statement.
DEFAULT_BATCH_SIZE = 100


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler of one queue (``model``: the adapter's queue class)."""

    model: type[Any]
    func: Callable[[Any], object]
    batch: bool
    batch_size: int
    #: How logs and errors name the queue (the model's name when empty).
    queue_label: str = ""

    @property
    def label(self) -> str:
        return f"{self.queue_label or self.model.__name__} -> {function_name(self.func)}"


def function_name(func: Callable[..., object]) -> str:
    """``module.qualname`` of a function: how a handler is named, and compared."""
    return f"{func.__module__}.{func.__qualname__}"


class HandlerRegistry:
    """The handlers of one front end, by queue class, in registration order."""

    def __init__(
        self,
        *,
        is_queue: Callable[[Any], bool],
        queue_label: Callable[[type[Any]], str],
        expected: str,
        error: type[Exception],
    ) -> None:
        self._is_queue = is_queue
        self._queue_label = queue_label
        self._expected = expected
        self._error = error
        self._handlers: dict[type[Any], Handler] = {}

    def decorator[F: Callable[..., object]](
        self, model: type[Any], *, batch: bool = False, batch_size: int | None = None
    ) -> Callable[[F], F]:
        """The ``@handler(model, batch=..., batch_size=...)`` decorator (see the adapters)."""
        if not self._is_queue(model):
            raise self._error(f"@handler needs {self._expected}, got {model!r}")
        if not isinstance(batch, bool):
            raise self._error(f"@handler(batch=...) must be a bool, got {batch!r}")
        size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise self._error(f"@handler(batch_size=...) must be a positive int, got {size!r}")

        def register(func: F) -> F:
            new = Handler(model, func, batch, size, self._queue_label(model))
            old = self._handlers.get(model)
            # By name, not identity: re-importing a module (python -m of a handlers module,
            # say) makes new function objects for the same handlers.
            if old is not None and function_name(old.func) != function_name(func):
                raise self._error(
                    f"{new.queue_label} already has a handler ({old.label}); a queue has one "
                    f"handler, so {function_name(func)} cannot be registered too"
                )
            self._handlers[model] = new
            return func

        return register

    def handlers(self) -> dict[type[Any], Handler]:
        """Every registered handler, by queue class."""
        return dict(self._handlers)

    def unregister(self, model: type[Any]) -> None:
        """Forget ``model``'s handler (tests that register their own)."""
        self._handlers.pop(model, None)
