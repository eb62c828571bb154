"""OpenTelemetry spans (the ``otel`` extra): a PRODUCER span per push, a CONSUMER span per
handled item with the message id, an error status when the handler raised; nothing without
the package."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from dbqueue import QueueOptions
from dbqueue.front import ExecutorFront
from dbqueue.worker import Consumer, Worker
from tests.core.test_worker import DATABASES, NO_WAIT, Setup, make_setup

#: One provider per process: OpenTelemetry lets the global one be set once.
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    setup = make_setup(
        request, request.param, table_name, QueueOptions(max_attempts=1, backoff=NO_WAIT)
    )
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def fail_odd(message: object) -> None:
    if message.payload["n"] % 2:  # type: ignore[attr-defined]
        raise ValueError("odd")


def test_a_push_and_each_handled_item_are_spans(db: Setup, spans: InMemorySpanExporter) -> None:
    front: ExecutorFront[object] = ExecutorFront(db.queue, db.ex)
    first = front.push(n=0)
    others = front.push_many([{"n": 1}, {"n": 2}])
    Worker([Consumer(db.binding(), fail_odd)], burst=True).run(handle_signals=False)
    table = db.queue.spec.table
    finished = spans.get_finished_spans()
    pushes = [s for s in finished if s.kind == SpanKind.PRODUCER]
    assert [s.name for s in pushes] == [f"send {table}"] * 2
    assert pushes[0].attributes is not None and pushes[1].attributes is not None
    assert pushes[0].attributes["messaging.message.id"] == str(first)
    assert pushes[0].attributes["messaging.destination.name"] == table
    assert pushes[1].attributes["messaging.batch.message_count"] == 2
    assert list(pushes[1].attributes["dbqueue.message_ids"]) == [str(i) for i in others]  # type: ignore[arg-type]
    handled = {
        s.attributes["messaging.message.id"]: s  # type: ignore[index]
        for s in finished
        if s.kind == SpanKind.CONSUMER
    }
    assert set(handled) == {str(first), *(str(i) for i in others)}
    assert handled[str(first)].name == f"process {table}"
    assert handled[str(first)].status.status_code == StatusCode.UNSET
    failed = handled[str(others[0])]  # n=1: odd
    assert failed.status.status_code == StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]


def test_without_the_package_there_are_no_spans(db: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    import dbqueue.tracing

    monkeypatch.setattr(dbqueue.tracing, "trace", None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with dbqueue.tracing.push_span("q") as span:
        span.ids([1])
        span.failed(ValueError("ignored"))
    front: ExecutorFront[object] = ExecutorFront(db.queue, db.ex)
    front.push(n=1)
    Worker([Consumer(db.binding(), fail_odd)], burst=True).run(handle_signals=False)
