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
    #: The consumer group whose deliveries it handles (``QueueOptions.groups``), or None.
    group: str | None = None

    @property
    def label(self) -> str:
        return f"{self.queue_label or self.model.__name__} -> {function_name(self.func)}"


#: Where the registry keeps a handler: its queue class, and its consumer group or None.
HandlerKey = tuple[type[Any], str | None]


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
        self._handlers: dict[HandlerKey, Handler] = {}

    def decorator[F: Callable[..., object]](
        self,
        model: type[Any],
        *,
        batch: bool = False,
        batch_size: int | None = None,
        group: str | None = None,
    ) -> Callable[[F], F]:
        """The ``@handler(model, batch=..., batch_size=..., group=...)`` decorator (see the
        adapters). A queue with consumer groups takes one handler per group, and none without
        a group."""
        if not self._is_queue(model):
            raise self._error(f"@handler needs {self._expected}, got {model!r}")
        self._check_group(model, group)
        if not isinstance(batch, bool):
            raise self._error(f"@handler(batch=...) must be a bool, got {batch!r}")
        size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise self._error(f"@handler(batch_size=...) must be a positive int, got {size!r}")

        def register(func: F) -> F:
            label = self._queue_label(model)
            new = Handler(model, func, batch, size, label if group is None else f"{label}[{group}]",
                          group)  # fmt: skip
            old = self._handlers.get((model, group))
            # By name, not identity: re-importing a module (python -m of a handlers module,
            # say) makes new function objects for the same handlers.
            if old is not None and function_name(old.func) != function_name(func):
                raise self._error(
                    f"{new.queue_label} already has a handler ({old.label}); a queue has one "
                    f"handler, so {function_name(func)} cannot be registered too"
                )
            self._handlers[(model, group)] = new
            return func

        return register

    def _check_group(self, model: type[Any], group: str | None) -> None:
        """The registration error for a group ``model``'s queue does not declare, or for no
        group where it declares some."""
        groups: tuple[str, ...] = model.queue.spec.options.groups
        if group is None and groups:
            raise self._error(
                f"{self._queue_label(model)} delivers each item to each of its consumer groups "
                f"({', '.join(groups)}): register a handler per group, "
                f"@handler(..., group={groups[0]!r})"
            )
        if group is not None and group not in groups:
            raise self._error(
                f"@handler(group={group!r}): {self._queue_label(model)} has "
                + (f"the consumer groups {', '.join(groups)}" if groups else "no consumer groups")
            )

    def handlers(self) -> dict[HandlerKey, Handler]:
        """Every registered handler, by queue class and consumer group."""
        return dict(self._handlers)

    def unregister(self, model: type[Any], group: str | None = None) -> None:
        """Forget ``model``'s handler (of ``group``; tests that register their own)."""
        self._handlers.pop((model, group), None)
