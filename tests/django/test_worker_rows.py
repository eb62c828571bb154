"""The workers' heartbeats as QueueWorker rows: written per worker and queue in the queue's
database, summed by queue over the workers seen lately, and forgotten a day after; and the
rows a real worker leaves."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models.functions import Now

from dbqueue.worker import QueueActivity, WorkerReport
from dbqueue.worker.heartbeat import ALIVE_WITHIN
from dbqueue_django.handlers import Handler, autodiscover, handlers
from dbqueue_django.worker import DjangoHeartbeat, build_worker
from dbqueue_django.worker_rows import (
    FORGET_AFTER,
    QueueThroughput,
    QueueWorker,
    live_throughput,
    record_beat,
)
from tests.django.testapp.handlers import RECEIVED
from tests.django.testapp.models import Ping, Tick

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]

STARTED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def report(worker_id: str, *, stopped: bool = False) -> WorkerReport:
    return WorkerReport(worker_id, "host", 42, STARTED, stopped, ())


def age(alias: str, worker_id: str, by: dt.timedelta) -> None:
    """Make a worker's last heartbeat ``by`` older."""
    QueueWorker.objects.using(alias).filter(worker_id=worker_id).update(seen_at=Now() - by)


def test_a_beat_writes_a_row_per_queue_and_then_updates_it(alias: str) -> None:
    record_beat(alias, report("w1"), [("testapp.Ping", 10, 1), ("testapp.Tick", 0, 0)])
    record_beat(alias, report("w1"), [("testapp.Ping", 12, 2), ("testapp.Tick", 3, 0)])
    rows = {r.queue: r for r in QueueWorker.objects.using(alias).all()}
    assert sorted(rows) == ["testapp.Ping", "testapp.Tick"]
    ping = rows["testapp.Ping"]
    assert (ping.worker_id, ping.hostname, ping.pid) == ("w1", "host", 42)
    assert (ping.handled, ping.failed, ping.started_at, ping.stopped_at) == (12, 2, STARTED, None)
    assert rows["testapp.Tick"].handled == 3
    record_beat(alias, report("w1", stopped=True), [("testapp.Ping", 12, 2)])
    assert QueueWorker.objects.using(alias).get(queue="testapp.Ping").stopped_at is not None


def test_throughput_sums_the_workers_seen_lately(alias: str) -> None:
    record_beat(alias, report("a"), [("testapp.Ping", 10, 1)])
    record_beat(alias, report("b"), [("testapp.Ping", 5, 0), ("testapp.Tick", 7, 2)])
    record_beat(alias, report("gone"), [("testapp.Ping", 1000, 0)])
    age(alias, "gone", ALIVE_WITHIN + dt.timedelta(seconds=1))  # killed: no beat since
    record_beat(alias, report("done", stopped=True), [("testapp.Ping", 3, 0)])
    assert live_throughput(alias) == {
        # "done" stopped a moment ago: what it handled counts, it serves no more.
        "testapp.Ping": QueueThroughput(handled=18, failed=1, workers=2),
        "testapp.Tick": QueueThroughput(handled=7, failed=2, workers=1),
    }


def test_a_beat_forgets_the_workers_gone_for_a_day(alias: str) -> None:
    record_beat(alias, report("old"), [("testapp.Ping", 1, 0)])
    record_beat(alias, report("recent"), [("testapp.Ping", 1, 0)])
    age(alias, "old", FORGET_AFTER + dt.timedelta(minutes=1))
    age(alias, "recent", FORGET_AFTER - dt.timedelta(minutes=1))
    record_beat(alias, report("new"), [("testapp.Ping", 1, 0)])
    kept = QueueWorker.objects.using(alias).values_list("worker_id", flat=True)
    assert sorted(kept) == ["new", "recent"]


@pytest.mark.both_databases
def test_the_heartbeat_writes_each_queue_into_its_own_database(alias: str) -> None:
    ping: Any = build_worker([handler(Ping)], database=alias).consumers[0].queue
    beat = WorkerReport("w", "host", 1, STARTED, False, (QueueActivity(ping, 4, 0),))
    DjangoHeartbeat().beat(beat)
    other = "sqlite" if alias == "default" else "default"
    assert list(QueueWorker.objects.using(alias).values_list("queue", "handled")) == [
        ("testapp.Ping", 4)
    ]
    assert not QueueWorker.objects.using(other).exists()


def handler(model: type[Any]) -> Handler:
    autodiscover()
    return handlers()[(model, None)]


@pytest.fixture
def received() -> Iterator[list[str]]:
    RECEIVED.clear()
    yield RECEIVED
    RECEIVED.clear()


@pytest.mark.both_databases
def test_a_worker_leaves_what_it_handled_per_queue(alias: str, received: list[str]) -> None:
    Ping.queue.using(alias).push_many([{"message": "ok"}] * 6 + [{"message": "boom"}])
    Tick.queue.using(alias).push_many([{"symbol": "A", "price": 1}, {"symbol": "B", "price": 2}])
    heartbeat = DjangoHeartbeat(every=0.0)  # at every turn of the maintenance loop
    worker = build_worker(
        [handler(Ping), handler(Tick)], database=alias, burst=True, heartbeat=heartbeat
    )
    worker.run(handle_signals=False)
    rows = {r.queue: r for r in QueueWorker.objects.using(alias).all()}
    assert {q: (r.handled, r.failed) for q, r in rows.items()} == {
        "testapp.Ping": (6 + 2, 1),  # each Tick handled pushed a Ping, handled in the burst
        "testapp.Tick": (2, 0),
    }
    assert all(r.stopped_at is not None for r in rows.values())
    assert len({r.worker_id for r in rows.values()}) == 1
    assert live_throughput(alias)["testapp.Ping"] == QueueThroughput(8, 1, 0)
