"""The worker over Django connections: model instances in handlers, ORM work in the worker's
threads, failures recorded, listeners on PostgreSQL only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections

from dbqueue.message import State
from dbqueue_django.handlers import Handler, autodiscover, handlers
from dbqueue_django.worker import DjangoWorkerQueue, build_worker
from tests.django.testapp.handlers import RECEIVED
from tests.django.testapp.models import Job, Ping

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]


@pytest.fixture
def ping_handler() -> Iterator[Handler]:
    autodiscover()
    RECEIVED.clear()
    yield handlers()[(Ping, None)]
    RECEIVED.clear()


def test_a_burst_runs_the_handler_on_every_item(alias: str, ping_handler: Handler) -> None:
    Ping.queue.using(alias).push_many([{"message": f"m{i}"} for i in range(25)])
    stats = build_worker([ping_handler], database=alias, burst=True).run(handle_signals=False)
    assert stats.handled == 25
    assert stats.batches == 3  # the handler's batch_size=10
    assert sorted(RECEIVED) == sorted(f"m{i}" for i in range(25))
    assert Ping.queue.using(alias).stats()["ready"] == 0


def test_failures_are_recorded_on_the_items(alias: str, ping_handler: Handler) -> None:
    Ping.queue.using(alias).push_many([{"message": "ok"}, {"message": "boom"}])
    # Default options: 5 attempts, and the back-off keeps the failed item out of the burst.
    stats = build_worker([ping_handler], database=alias, burst=True).run(handle_signals=False)
    assert (stats.handled, stats.failed, stats.retried) == (1, 0, 1)  # items, not attempts
    (item,) = Ping.queue.using(alias).items()
    assert item.state == State.READY  # type: ignore[attr-defined]
    assert item.attempts == 1  # type: ignore[attr-defined]
    assert "ValueError: boom" in (item.last_error or "")


def test_handlers_get_model_instances_and_can_use_the_orm(alias: str) -> None:
    queue = Job.queue.using(alias)
    queue.push(name="parent", n=2)

    def spawn(job: Job) -> None:
        assert isinstance(job, Job)
        assert job.attempts == 1  # type: ignore[attr-defined]
        # Work a handler does through the ORM, on the worker thread's own connection.
        queue.push_many([{"name": f"child of {job.name}", "n": 0}] * job.n)

    worker = build_worker([Handler(Job, spawn, False, 10)], database=alias, max_messages=3)
    stats = worker.run(handle_signals=False)
    assert stats.handled == 3
    assert queue.stats()["ready"] == 0


def test_the_batch_size_option_overrides_the_handlers(alias: str, ping_handler: Handler) -> None:
    Ping.queue.using(alias).push_many([{"message": str(i)} for i in range(9)])
    worker = build_worker([ping_handler], database=alias, batch_size=4, burst=True)
    assert worker.run(handle_signals=False).batches == 3


def test_a_listener_connection_only_on_postgresql(alias: str) -> None:
    binding = DjangoWorkerQueue(Ping.queue.using(alias))
    assert binding.name == f"testapp.Ping@{alias}"
    assert binding.database == alias
    conn = binding.connect_listener()
    if connections[alias].vendor == "postgresql":
        assert binding.channel == "dbqueue_testapp_ping"
        with conn:
            assert (
                conn.execute("SELECT current_database()").fetchone()[0]
                == (connections[alias].settings_dict["NAME"])
            )
    else:
        assert binding.channel is None
        assert conn is None
