"""The core worker over a database URL (``dbqueue_sa.worker``), in process, in burst mode:
instances of the mapped classes in handlers, per-item and batch handlers, failures recorded
with their traceback, max_attempts, the shared core queue, wake-ups, missing tables; and how a
URL becomes the worker's connections."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.errors import InvalidArgument, QueueTableMissing, UnsupportedDatabase
from dbqueue.message import State
from dbqueue.worker_queue import ExecutorQueue
from dbqueue_sa.handlers import Handler, handlers
from dbqueue_sa.worker import build_worker, database_url, libpq_conninfo
from tests.sqlalchemy.handlers_app import RECEIVED, Chore, ChoreBase
from tests.sqlalchemy.models import Job, Tick

pytestmark = pytest.mark.sqlalchemy


@pytest.fixture(autouse=True)
def received() -> Iterator[list[str]]:
    RECEIVED.clear()
    yield RECEIVED
    RECEIVED.clear()


@pytest.fixture
def chores(engine: sa.Engine) -> Iterator[sa.Engine]:
    """The engine, with Chore's tables too."""
    ChoreBase.metadata.create_all(engine)
    yield engine
    ChoreBase.metadata.drop_all(engine)


def push(engine: sa.Engine, model: Any, rows: list[dict[str, Any]]) -> list[int]:
    with Session(engine) as session, session.begin():
        ids: list[int] = model.queue.push_many(session, rows)
    return ids


def ticks(*symbols: str) -> list[dict[str, Any]]:
    return [{"symbol": s, "price": Decimal("1.5")} for s in symbols]


def run(url: str, *found: Handler, **options: Any) -> Any:
    return build_worker(found, url=url, burst=True, **options).run(handle_signals=False)


def test_a_burst_runs_a_per_item_handler_on_every_job(
    engine: sa.Engine, url: str, received: list[str]
) -> None:
    push(engine, Job, [{"name": f"j{i}"} for i in range(25)])
    stats = run(url, handlers()[(Job, None)])
    assert (stats.handled, stats.failed, stats.batches) == (25, 0, 3)  # batch_size=10
    assert sorted(received) == sorted(f"j{i}" for i in range(25))
    with Session(engine) as session:
        assert Job.queue.stats(session)["ready"] == 0
        assert session.scalar(sa.select(sa.func.count()).select_from(Job)) == 0  # acked


def test_handlers_get_instances_of_the_mapped_class(engine: sa.Engine, url: str) -> None:
    (job_id,) = push(engine, Job, [{"name": "x", "n": 7, "doc": {"k": [1]}}])
    seen: list[Job] = []
    run(url, Handler(Job, seen.append, batch=False, batch_size=5))
    (job,) = seen
    assert isinstance(job, Job)
    assert (job.id, job.name, job.n, job.doc, job.attempts) == (job_id, "x", 7, {"k": [1]}, 1)
    assert sa.inspect(job).detached


def test_a_batch_handler_on_a_ring(engine: sa.Engine, url: str, received: list[str]) -> None:
    push(engine, Tick, ticks("A", "B", "C", "D", "E", "F"))
    stats = run(url, handlers()[(Tick, None)])
    assert (stats.handled, stats.failed, stats.batches) == (6, 0, 2)  # batch_size=4
    assert received == ["A", "B", "C", "D", "E", "F"]  # a ring delivers in push order


def test_a_failing_handler_fails_its_item_with_the_traceback(
    engine: sa.Engine, url: str, received: list[str]
) -> None:
    push(engine, Job, [{"name": "ok"}, {"name": "boom"}])
    stats = run(url, handlers()[(Job, None)])
    # Job's back-off keeps the failed item out of the rest of the burst.
    assert (stats.handled, stats.retried, stats.failed) == (1, 1, 0)  # items, not attempts
    assert received == ["ok"]
    with Session(engine) as session:
        ((job, state, attempts, *_),) = session.execute(Job.queue.items()).all()
    assert (job.name, State(state), attempts) == ("boom", State.READY, 1)
    assert job.last_error.startswith("Traceback (most recent call last)")
    assert f"ValueError: boom #{job.id}" in job.last_error


def test_max_attempts_then_failed(chores: sa.Engine, url: str) -> None:
    push(chores, Chore, [{"task": "dishes"}])
    # No back-off: the same burst takes the chore through both of its attempts.
    stats = run(url, handlers()[(Chore, None)])
    assert (stats.handled, stats.retried, stats.failed) == (0, 1, 1)
    with Session(chores) as session:
        ((chore, attempts, _),) = session.execute(Chore.queue.failed()).all()
    assert (chore.task, attempts) == ("dishes", 2)
    assert "RuntimeError: cannot do dishes (attempt 2)" in chore.last_error


def test_a_failing_batch_on_a_ring_reaches_the_failed_table(engine: sa.Engine, url: str) -> None:
    push(engine, Tick, ticks("A", "BOOM", "C"))
    # No back-off: a failed attempt leaves the ring, due at once; the burst's next pop finds
    # the ring empty and pushes it again, so one burst takes the batch through both attempts.
    attempts = Tick.__queue_spec__.options.max_attempts
    stats = run(url, handlers()[(Tick, None)])
    assert (stats.retried, stats.failed) == (3 * (attempts - 1), 3)  # the whole batch, each time
    with Session(engine) as session:
        failed = session.execute(Tick.queue.failed()).all()
    assert sorted(r.symbol for r in failed) == ["A", "BOOM", "C"]
    assert {r.attempts for r in failed} == {2}
    assert all("ValueError: boom in a batch of 3" in r.last_error for r in failed)


def test_max_messages_concurrency_and_batch_size(engine: sa.Engine, url: str) -> None:
    push(engine, Job, [{"name": f"j{i}"} for i in range(30)])
    worker = build_worker(
        [handlers()[(Job, None)]], url=url, concurrency=2, batch_size=3, max_messages=7
    )
    stats = worker.run(handle_signals=False)
    assert stats.handled == 7
    with Session(engine) as session:
        assert Job.queue.stats(session)["ready"] == 23


def test_the_worker_shares_the_core_queue_of_the_class(engine: sa.Engine, url: str) -> None:
    worker = build_worker([handlers()[(Tick, None)]], url=url, burst=True)
    (consumer,) = worker.consumers
    assert isinstance(consumer.queue, ExecutorQueue)
    with Session(engine) as session:
        # One core per class and database: a ring's pending pop claims are the process's.
        assert consumer.queue.queue is Tick.queue.core(session)


def test_wake_ups_where_the_database_notifies(backend: str, engine: sa.Engine, url: str) -> None:
    # Not a burst, which never waits for a push and so opens no listener.
    worker = build_worker([handlers()[(Job, None)], handlers()[(Tick, None)]], url=url)
    channels = [c.queue.channel for c in worker.consumers]
    if backend == "postgresql":
        assert channels == ["dbqueue_sa_job", "dbqueue_sa_tick"]
        assert len(worker.listeners) == 1  # one database: one listening connection
    else:
        assert channels == [None, None]
        assert worker.listeners == []


def test_a_missing_split_table_stops_the_worker(engine: sa.Engine, url: str) -> None:
    worker = build_worker([handlers()[(Chore, None)]], url=url, burst=True)  # never created
    with pytest.raises(QueueTableMissing, match="sa_chore"):
        worker.run(handle_signals=False)


def test_a_missing_ring_table_is_found_before_the_worker_starts(url: str) -> None:
    with pytest.raises(QueueTableMissing, match="sa_tick"):
        build_worker([handlers()[(Tick, None)]], url=url)  # no engine fixture: no tables


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@h/db", "postgresql+psycopg://u:***@h/db"),
        ("postgresql+asyncpg://u@h:6543/db", "postgresql+psycopg://u@h:6543/db"),
        ("sqlite+aiosqlite:///q.db", "sqlite+pysqlite:///q.db"),
        ("sqlite:////tmp/q.db", "sqlite+pysqlite:////tmp/q.db"),
    ],
)
def test_urls_get_the_drivers_dbqueue_runs_on(given: str, expected: str) -> None:
    assert database_url(given).render_as_string(hide_password=True) == expected


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ("not a url", InvalidArgument, "does not parse"),
        ("mysql://u@h/db", UnsupportedDatabase, "names 'mysql'"),
        ("sqlite://", InvalidArgument, "in-memory SQLite"),
        ("sqlite:///:memory:", InvalidArgument, "in-memory SQLite"),
    ],
)
def test_urls_the_worker_cannot_use(given: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        database_url(given)


def test_the_libpq_parameters_of_a_url() -> None:
    url = database_url("postgresql://me:s%40cret@/db?host=/run/pg&port=5433&sslmode=disable")
    params = dict(p.split("=", 1) for p in libpq_conninfo(url).split())
    assert params == {
        "dbname": "db",
        "user": "me",
        "password": "s@cret",
        "host": "/run/pg",
        "port": "5433",
        "sslmode": "disable",
    }


def test_a_lease_is_the_queue_option(engine: sa.Engine, url: str) -> None:
    worker = build_worker([handlers()[(Job, None)]], url=url)
    assert worker.consumers[0].queue.lease == dt.timedelta(seconds=30)
