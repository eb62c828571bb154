"""The worker loop on real databases: draining, failures and back-off, batch handlers, the
message budget, stopping, heartbeats, rescue, LISTEN/NOTIFY wake-ups and fatal errors."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from dbqueue import (
    Backoff,
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    SplitQueue,
    get_dialect,
)
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.drivers.sqlite import SqliteExecutor, connect
from dbqueue.errors import InvalidArgument, QueueTableMissing
from dbqueue.executor import Executor
from dbqueue.message import Message, State
from dbqueue.schema import create_statements
from dbqueue.upkeep import compaction
from dbqueue.wakeup import PollPolicy
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

NO_WAIT = Backoff(base=timedelta(0), cap=timedelta(0), jitter=0)
FIELDS = (Field("n", FieldKind.INTEGER),)
#: Seconds a test waits for something that normally takes milliseconds (a hang guard only).
PATIENCE = 30.0


class Setup:
    """A queue on one database: the worker's binding and an executor for the test itself."""

    def __init__(
        self, kind: str, queue: SplitQueue, connect: Callable[[], Executor], listen: Any = None
    ) -> None:
        self.kind = kind
        self.queue = queue
        self.connect = connect
        self.ex = connect()
        self.listen = listen

    def binding(self) -> ExecutorQueue:
        return ExecutorQueue(self.queue, self.connect, listen=self.listen)

    def push(self, count: int) -> list[int]:
        return self.queue.push_many(self.ex, [{"n": i} for i in range(count)])

    def states(self) -> Counter[State]:
        meta = self.queue.spec.meta_table
        rows = self.ex.execute(f'SELECT state FROM "{meta}"', {})
        return Counter(State(r[0]) for r in rows)

    def errors(self) -> list[str | None]:
        return [
            r[0] for r in self.ex.execute(f'SELECT last_error FROM "{self.queue.spec.table}"', {})
        ]


def make_setup(
    request: pytest.FixtureRequest,
    kind: str,
    table: str,
    options: QueueOptions,
    *,
    listen: bool = False,
    fields: tuple[Field, ...] = FIELDS,
) -> Setup:
    """A queue's tables on ``kind`` ("pg" or "sqlite"), with the fixtures of ``request``."""
    spec = QueueSpec(table, fields, options)
    if kind == "pg":
        dsn = request.getfixturevalue("pg_dsn")
        queue = SplitQueue(spec, get_dialect("postgresql"))

        def pg_connect() -> Executor:
            return PsycopgExecutor(psycopg.connect(dsn, autocommit=True))

        setup = Setup(kind, queue, pg_connect, (lambda: psycopg.connect(dsn)) if listen else None)
    else:
        path = request.getfixturevalue("sqlite_path")
        queue = SplitQueue(spec, get_dialect("sqlite"))
        setup = Setup(kind, queue, lambda: SqliteExecutor(connect(path)))
    for statement in create_statements(spec, queue.dialect):
        setup.ex.execute(statement, {})
    return setup


DATABASES = [
    pytest.param("pg", marks=pytest.mark.postgresql),
    pytest.param("sqlite", marks=pytest.mark.sqlite),
]


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    setup = make_setup(
        request, request.param, table_name, QueueOptions(max_attempts=3, backoff=NO_WAIT)
    )
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


def run_in_thread(worker: Worker) -> Callable[[], None]:
    """Start ``worker.run()`` in a thread; the returned function stops and joins it."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as exc:  # surfaced by the join below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()

    def finish() -> None:
        worker.stop()
        thread.join(PATIENCE)
        assert not thread.is_alive()
        if errors:
            raise errors[0]

    return finish


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- draining -----------------------------------------------------------------------------------


def test_a_burst_drains_every_item_once(db: Setup) -> None:
    ids = db.push(250)
    seen: list[int] = []
    worker = Worker(
        [Consumer(db.binding(), lambda m: seen.append(m.id), batch_size=40)], burst=True
    )
    stats = worker.run(handle_signals=False)
    assert sorted(seen) == sorted(ids)
    assert stats.handled == 250
    assert stats.batches == 7
    assert db.states() == Counter()  # acked items are gone


@pytest.mark.postgresql
@pytest.mark.parametrize("db", ["pg"], indirect=True)
def test_threads_share_the_work_exactly_once(db: Setup) -> None:
    ids = db.push(3000)
    seen: list[int] = []
    lock = threading.Lock()

    def handle(m: Message) -> None:
        with lock:
            seen.append(m.id)

    worker = Worker([Consumer(db.binding(), handle, batch_size=25)], concurrency=4, burst=True)
    worker.run(handle_signals=False)
    assert sorted(seen) == sorted(ids)


def test_a_batch_handler_gets_the_whole_batch(db: Setup) -> None:
    db.push(30)
    batches: list[list[int]] = []

    def handle(ms: list[Message]) -> None:
        batches.append([m.payload["n"] for m in ms])

    consumer = Consumer(db.binding(), handle, batch=True, batch_size=12)
    Worker([consumer], burst=True).run(handle_signals=False)
    assert [len(b) for b in batches] == [12, 12, 6]


def test_several_queues_are_served_by_one_worker(
    request: pytest.FixtureRequest, db: Setup, table_name: str
) -> None:
    other = make_setup(request, db.kind, table_name + "_b", QueueOptions())
    db.push(5)
    other.push(7)
    seen: Counter[str] = Counter()
    consumers = [
        Consumer(db.binding(), lambda m: seen.update(["a"])),
        Consumer(other.binding(), lambda m: seen.update(["b"])),
    ]
    Worker(consumers, burst=True).run(handle_signals=False)
    assert seen == Counter(a=5, b=7)


def test_a_keep_done_queue_keeps_what_the_worker_handled(
    request: pytest.FixtureRequest, db: Setup, table_name: str
) -> None:
    options = QueueOptions(keep_done=True, max_attempts=1, backoff=NO_WAIT)
    kept = make_setup(request, db.kind, table_name + "_k", options)
    kept.push(30)

    def handle(m: Message) -> None:
        if m.payload["n"] == 7:
            raise ValueError("seven")

    # ack_pop (PostgreSQL) or ack then pop (SQLite) between batches: both mark done.
    Worker([Consumer(kept.binding(), handle, batch_size=8)], burst=True).run(handle_signals=False)
    assert kept.states() == Counter({State.DONE: 29, State.FAILED: 1})


# -- failures -----------------------------------------------------------------------------------


def test_a_failing_item_is_retried_then_failed_with_its_traceback(db: Setup) -> None:
    db.push(3)
    calls: Counter[int] = Counter()

    def handle(m: Message) -> None:
        calls[m.payload["n"]] += 1
        if m.payload["n"] == 1:
            raise ValueError(f"cannot handle {m.payload['n']}")

    stats = Worker([Consumer(db.binding(), handle)], burst=True).run(handle_signals=False)
    assert calls == Counter({0: 1, 1: 3, 2: 1})  # max_attempts=3, no back-off delay
    assert (stats.handled, stats.retried, stats.failed) == (2, 2, 1)  # items, not attempts
    assert db.states() == Counter({State.FAILED: 1})
    (error,) = db.errors()
    assert error is not None
    assert "Traceback" in error
    assert "ValueError: cannot handle 1" in error


def test_each_failed_attempt_is_logged_with_its_traceback(
    db: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    db.push(1)

    def handle(m: Message) -> None:
        raise ValueError("no stock for this order")

    with caplog.at_level(logging.WARNING, logger="dbqueue.worker"):
        Worker([Consumer(db.binding(), handle)], burst=True).run(handle_signals=False)
    attempts = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert [r.levelno for r in attempts] == [logging.WARNING] * 2 + [logging.ERROR]
    for n, record in enumerate(attempts, 1):
        text = record.getMessage()
        assert f"{db.queue.spec.table}: item " in text and f"(attempt {n}/3)" in text
        assert "Traceback" in text and "ValueError: no stock for this order" in text
    assert "tried again" in attempts[0].getMessage()
    assert "failed for good" in attempts[-1].getMessage()


def test_a_failing_batch_handler_fails_the_batch(db: Setup) -> None:
    db.push(4)

    def handle(ms: list[Message]) -> None:
        raise RuntimeError("downstream is down")

    stats = Worker([Consumer(db.binding(), handle, batch=True)], burst=True).run(
        handle_signals=False
    )
    assert (stats.retried, stats.failed) == (8, 4)  # 4 items x 3 attempts
    assert db.states() == Counter({State.FAILED: 4})


def test_a_failed_item_waits_for_its_back_off(request: pytest.FixtureRequest, db: Setup) -> None:
    slow = make_setup(
        request,
        db.kind,
        db.queue.spec.table + "_slow",
        QueueOptions(backoff=Backoff(base=timedelta(hours=1), jitter=0)),
    )
    slow.push(1)

    def handle(m: Message) -> None:
        raise ValueError("later")

    stats = Worker([Consumer(slow.binding(), handle)], burst=True).run(handle_signals=False)
    assert (stats.retried, stats.failed) == (1, 0)  # the retry is an hour away: burst ends
    assert slow.states() == Counter({State.READY: 1})


# -- stopping -----------------------------------------------------------------------------------


def test_sigterm_finishes_the_started_item_and_releases_the_rest_of_the_batch(
    db: Setup,
) -> None:
    db.push(100)
    started = threading.Event()

    def handle(m: Message) -> None:
        started.set()
        time.sleep(0.3)

    def terminate() -> None:
        started.wait(PATIENCE)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate)
    killer.start()
    worker = Worker([Consumer(db.binding(), handle, batch_size=100)])
    stats = worker.run()  # in the main thread: it handles the signal
    killer.join()
    assert stats.handled >= 1 and (stats.failed, stats.retried) == (0, 0)
    # The rest of the batch of 100 is ready again at once, its attempt not counted.
    assert db.states() == Counter({State.READY: 100 - stats.handled})
    assert {m.attempts for m in db.queue.pop_batch(db.ex, 100)} == {1}


def test_max_messages_stops_after_exactly_that_many(db: Setup) -> None:
    db.push(100)
    stats = Worker(
        [Consumer(db.binding(), lambda m: None, batch_size=30)], concurrency=2, max_messages=45
    ).run(handle_signals=False)
    assert stats.handled == 45
    assert db.states() == Counter({State.READY: 55})  # nothing left leased


def test_stop_finishes_and_acks_the_batch_in_hand(db: Setup) -> None:
    db.push(50)
    worker: Worker
    seen: list[int] = []

    def handle(m: Message) -> None:
        seen.append(m.payload["n"])
        if len(seen) == 3:
            worker.stop()

    worker = Worker([Consumer(db.binding(), handle, batch_size=10)])
    stats = worker.run(handle_signals=False)
    assert stats.handled == 10  # the whole first batch, then no more pops
    assert db.states() == Counter({State.READY: 40})


# -- leases -------------------------------------------------------------------------------------


@pytest.mark.postgresql
@pytest.mark.parametrize("db", ["pg"], indirect=True)
def test_a_slow_batch_keeps_its_lease(request: pytest.FixtureRequest, db: Setup) -> None:
    short = make_setup(
        request, db.kind, db.queue.spec.table + "_short", QueueOptions(lease=timedelta(seconds=1))
    )
    short.push(1)
    calls: list[int] = []

    def handle(m: Message) -> None:
        calls.append(m.attempts)
        time.sleep(2.5)  # more than twice the lease: only the heartbeat keeps it

    stats = Worker([Consumer(short.binding(), handle)], concurrency=2, burst=True).run(
        handle_signals=False
    )
    assert calls == [1]  # the other thread never got it again
    assert stats.handled == 1
    assert stats.lost_leases == 0
    assert short.states() == Counter()


def test_expired_leases_of_a_dead_worker_are_rescued(db: Setup) -> None:
    db.push(2)
    db.queue.pop_batch(db.ex, 2, lease=timedelta(milliseconds=1))  # a worker that died
    time.sleep(0.05)
    seen: list[int] = []
    worker = Worker([Consumer(db.binding(), lambda m: seen.append(m.attempts))], max_messages=2)
    stats = worker.run(handle_signals=False)
    assert stats.handled == 2
    assert seen == [2, 2]  # their second delivery


# -- waking up ----------------------------------------------------------------------------------


@pytest.mark.postgresql
def test_an_idle_worker_wakes_up_on_notify(request: pytest.FixtureRequest, table_name: str) -> None:
    setup = make_setup(request, "pg", table_name, QueueOptions(), listen=True)
    seen = threading.Event()
    # Only a notification can wake it: the safety poll is far beyond the test's patience.
    poll = PollPolicy(first=0.001, busy_max=0.01, linger=0.05, safety=3600)
    worker = Worker([Consumer(setup.binding(), lambda m: seen.set())], poll=poll)
    finish = run_in_thread(worker)
    try:
        wait_until(lambda: worker.listening)
        time.sleep(0.3)  # past linger: the worker now only waits for the doorbell
        rings = worker.doorbell.rings
        setup.queue.push(setup.ex, {"n": 1})
        assert seen.wait(PATIENCE)
        assert worker.doorbell.rings > rings
    finally:
        finish()


@pytest.mark.postgresql
def test_a_rescue_wakes_an_idle_worker(request: pytest.FixtureRequest, table_name: str) -> None:
    """An item a rescue makes ready again comes with no push, so no notification: the
    worker's rescue thread rings its doorbell itself."""
    setup = make_setup(request, "pg", table_name, QueueOptions(), listen=True)
    seen = threading.Event()
    poll = PollPolicy(first=0.001, busy_max=0.01, linger=0.05, safety=3600)
    worker = Worker([Consumer(setup.binding(), lambda m: seen.set())], poll=poll, rescue_every=0.05)
    setup.queue.push(setup.ex, {"n": 1})
    setup.queue.pop_batch(setup.ex, 1, lease=timedelta(milliseconds=300))  # a dead worker
    finish = run_in_thread(worker)
    try:
        wait_until(lambda: worker.listening)
        assert seen.wait(PATIENCE)  # once the lease expired and the rescue made it ready
    finally:
        finish()


@pytest.mark.sqlite
def test_without_notifications_an_idle_worker_polls(sqlite_path: str, table_name: str) -> None:
    spec = QueueSpec(table_name, FIELDS)
    queue = SplitQueue(spec, get_dialect("sqlite"))
    ex = SqliteExecutor(connect(sqlite_path))
    for statement in create_statements(spec, queue.dialect):
        ex.execute(statement, {})
    seen = threading.Event()
    binding = ExecutorQueue(queue, lambda: SqliteExecutor(connect(sqlite_path)))
    assert binding.channel is None
    worker = Worker([Consumer(binding, lambda m: seen.set())], poll=PollPolicy(linger=0))
    assert not worker.listening
    finish = run_in_thread(worker)
    try:
        time.sleep(0.2)
        queue.push(ex, {"n": 1})
        assert seen.wait(PATIENCE)
    finally:
        finish()


@pytest.mark.sqlite
def test_a_worker_s_threads_never_lock_each_other_out_on_sqlite(
    request: pytest.FixtureRequest, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two worker threads and the maintenance thread (a rescue every 10 ms) open their
    connections together on a database still in rollback-journal mode, while a producer
    pushes: not one "database is locked" warning (the CLI test saw one run in eight)."""
    for round_ in range(3):
        setup = make_setup(request, "sqlite", f"{table_name}_{round_}", QueueOptions())
        setup.ex.execute("PRAGMA journal_mode=DELETE", {})  # as a fresh application's file
        with caplog.at_level("WARNING", logger="dbqueue"):
            handled = _work_while_pushing(setup)
        setup.ex.close()  # type: ignore[attr-defined]
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
        assert sorted(handled.values()) == [1] * 100


def _work_while_pushing(setup: Setup) -> Counter[int]:
    """Start a worker (2 threads, a rescue every 10 ms) on 50 items, push 50 more while it
    runs; how many times it handled each item."""
    setup.push(50)
    handled = Counter[int]()
    worker = Worker(
        [Consumer(setup.binding(), lambda m: handled.update([m.id]))],
        concurrency=2,
        rescue_every=0.01,
        poll=PollPolicy(linger=0.5),
    )
    finish = run_in_thread(worker)
    try:
        for _ in range(5):
            setup.push(10)
            time.sleep(0.02)
        wait_until(lambda: handled.total() == 100)
    finally:
        finish()
    return handled


# -- errors -------------------------------------------------------------------------------------


def test_a_missing_table_stops_the_worker_with_a_clear_error(db: Setup) -> None:
    gone = SplitQueue(QueueSpec("never_created", FIELDS), db.queue.dialect)
    worker = Worker([Consumer(ExecutorQueue(gone, db.connect), lambda m: None)], burst=True)
    with pytest.raises(QueueTableMissing, match="never_created"):
        worker.run(handle_signals=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"max_messages": 0}, "max_messages"),
    ],
)
def test_bad_worker_arguments_are_refused(db: Setup, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Worker([Consumer(db.binding(), lambda m: None)], **kwargs)


def test_a_worker_needs_a_consumer() -> None:
    with pytest.raises(InvalidArgument, match="at least one"):
        Worker([])


@pytest.mark.parametrize("size", [0, -1, True, 1.5])
def test_a_bad_batch_size_is_refused(db: Setup, size: Any) -> None:
    with pytest.raises(InvalidArgument, match="batch_size"):
        Consumer(db.binding(), lambda m: None, batch_size=size)


@pytest.mark.postgresql
def test_the_maintenance_thread_compacts_a_queue_a_long_transaction_grew(
    request: pytest.FixtureRequest,
    table_name: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compaction, "MIN_GROWTH", 256 * 1024)  # a small queue's growth
    setup = make_setup(request, "pg", table_name, QueueOptions())
    q, ex = setup.queue, setup.ex
    with psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True) as holder:
        # A REPEATABLE READ snapshot on another table: nothing the queue kills may be removed.
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class")
        for _ in range(40):
            setup.push(100)
            q.ack(ex, q.pop_batch(ex, 100))
    grown = compaction.size(q, ex)
    assert grown >= compaction.MIN_GROWTH
    setup.push(3)
    handled: list[int] = []
    worker = Worker([Consumer(setup.binding(), lambda m: handled.append(m.payload["n"]))])
    with caplog.at_level(logging.INFO, "dbqueue.worker"):
        finish = run_in_thread(worker)
        try:
            # The success line: a first try may find the queue's lock taken (by the worker's
            # own pop, on a busy machine) and log "could not be compacted", then try again.
            wait_until(lambda: ": compacted, " in caplog.text and len(handled) == 3)
        finally:
            finish()
    assert compaction.size(q, ex) < grown / 4
    assert sorted(handled) == [0, 1, 2]
