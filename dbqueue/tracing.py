"""OpenTelemetry spans of a push and of a handled item (the ``otel`` extra,
``opentelemetry-api``); without the package every function here does nothing.

A push is a span of kind PRODUCER, a handler call one of kind CONSUMER, both named after the
queue and carrying its name and the message id (the OpenTelemetry messaging conventions:
``messaging.system`` ``dbqueue``, ``messaging.destination.name``, ``messaging.message.id``).
No trace context is stored with a message (that would be a column in every queue table): a
handler's span is tied to its push's by the message id attribute, not by a parent or a link.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

trace: Any
try:
    from opentelemetry import trace
except ImportError:  # the extra is not installed: no spans
    trace = None

#: The instrumentation scope the spans are recorded under.
TRACER = "dbqueue"
#: A push of many messages names this many of their ids at most (a span attribute is kept in
#: memory until the span is exported).
MAX_IDS = 100


class Span:
    """What a traced block may add to its span: ids known only once the push ran, and the
    exception a handler raised (the worker catches it, so the span cannot see it go by)."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def ids(self, ids: Sequence[int]) -> None:
        """The id of the message pushed or handled, or of each of a batch's."""
        if self._span is None:
            return
        if len(ids) == 1:
            self._span.set_attribute("messaging.message.id", str(ids[0]))
        else:
            self._span.set_attribute("messaging.batch.message_count", len(ids))
            self._span.set_attribute("dbqueue.message_ids", [str(i) for i in ids[:MAX_IDS]])

    def failed(self, exc: BaseException) -> None:
        """Record the handler's exception and mark the span as an error."""
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        self._span.record_exception(exc)
        self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


@functools.cache
def _tracer() -> Any:
    # A proxy until the application sets its tracer provider, then that provider's tracer.
    return trace.get_tracer(TRACER)


@contextmanager
def _span(queue: str, operation: str, kind: str) -> Iterator[Span]:
    if trace is None:
        yield Span()
        return
    tracer = _tracer()
    attributes = {
        "messaging.system": "dbqueue",
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
    }
    with tracer.start_as_current_span(
        f"{operation} {queue}",
        kind=getattr(trace.SpanKind, kind),
        attributes=attributes,
        record_exception=True,
    ) as span:
        yield Span(span)


def push_span(queue: str) -> AbstractContextManager[Span]:
    """A PRODUCER span around a push of ``queue`` (``with push_span(q) as span: ...``)."""
    return _span(queue, "send", "PRODUCER")


def handle_span(queue: str) -> AbstractContextManager[Span]:
    """A CONSUMER span around a handler call for ``queue``."""
    return _span(queue, "process", "CONSUMER")
