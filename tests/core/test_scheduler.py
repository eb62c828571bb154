"""Periodic schedules on real databases (dbqueue.scheduler): one push per tick whatever the
number of workers racing for it, the latest missed tick caught up once after downtime, and
the worker's chore. Time is an injected clock: nothing waits for a real tick."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dbqueue import QueueOptions
from dbqueue.message import Message
from dbqueue.scheduler import Scheduler, schedule_rows
from dbqueue.schedules import Schedule, periodic, periodic_schedule
from dbqueue.schema import SCHEDULE_TABLE, schedule_statements
from dbqueue.worker import Consumer, Worker
from tests.core.test_worker import DATABASES, Setup, make_setup, run_in_thread, wait_until

T0 = dt.datetime(2026, 11, 27, 12, 0, 30, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    setup = make_setup(request, request.param, table_name, QueueOptions())
    for statement in schedule_statements(setup.queue.dialect):
        setup.ex.execute(statement, {})
    yield setup
    # Tests of this database that expect no schedule table come after.
    setup.ex.execute(f'DROP TABLE IF EXISTS "{SCHEDULE_TABLE}"', {})
    setup.ex.close()  # type: ignore[attr-defined]


def every_five(payload: Any = None) -> Schedule:
    """A schedule of a name of its own (tests share the schedule table of a database)."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    return Schedule.declare("*/5 * * * *", name=name, payload=payload or {"n": 1})


def messages(db: Setup) -> list[Message]:
    return db.queue.pop_batch(db.ex, 1000)


def scheduler(db: Setup, schedule: Schedule, clock: Clock) -> Scheduler:
    """A worker's scheduler: its own connections."""
    return Scheduler([(schedule, db.binding())], clock=clock)


def test_a_new_schedule_waits_for_its_first_tick(db: Setup) -> None:
    clock, schedule = Clock(), every_five()
    one = scheduler(db, schedule, clock)
    assert one.run() is None  # 12:00 was before the schedule existed
    clock.now = T0 + 4 * MINUTE  # 12:04:30
    assert one.run() is None
    clock.now = T0 + 5 * MINUTE  # 12:05:30
    assert one.run() is not None
    assert one.run() is None  # the same tick again: nothing
    assert [m.payload for m in messages(db)] == [{"n": 1}]
    (row,) = [r for r in schedule_rows(db.ex) if r.name == schedule.name]
    assert row.last_tick == dt.datetime(2026, 11, 27, 12, 5, tzinfo=dt.UTC)
    assert row.next_tick == dt.datetime(2026, 11, 27, 12, 10, tzinfo=dt.UTC)
    assert (row.expression, row.timezone, row.queue) == ("*/5 * * * *", "UTC", db.queue.spec.table)


def test_workers_racing_for_a_tick_push_it_once(db: Setup) -> None:
    schedule = every_five()
    clock = Clock()
    scheduler(db, schedule, clock).run()  # declared at 12:00:30
    workers = 6
    clocks = [Clock() for _ in range(workers)]
    schedulers = [scheduler(db, schedule, c) for c in clocks]
    for s in schedulers:
        s.run()  # each declares, and has its connection
    pushed: list[str | None] = []
    for minute in (5, 10, 15):  # three ticks, each raced for by every worker at once
        start = threading.Barrier(workers)
        for c in clocks:
            c.now = T0 + minute * MINUTE

        def race(s: Scheduler, start: threading.Barrier) -> None:
            start.wait()
            pushed.append(s.run())

        threads = [threading.Thread(target=race, args=(s, start)) for s in schedulers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sum(p is not None for p in pushed) == 3
    assert len(messages(db)) == 3
    for s in schedulers:
        s.disconnect()


def test_a_worker_back_after_downtime_pushes_the_latest_missed_tick_once(db: Setup) -> None:
    clock = Clock()
    schedule = every_five(payload=lambda tick: {"n": tick.minute})
    one = scheduler(db, schedule, clock)
    one.run()
    clock.now = T0 + 5 * MINUTE
    one.run()  # 12:05
    one.disconnect()
    # Down from 12:05:30 to 12:31:30: ticks 12:10 to 12:30 were missed.
    clock.now = T0 + 31 * MINUTE
    back = scheduler(db, schedule, clock)
    back.run()
    back.run()
    assert sorted(m.payload["n"] for m in messages(db)) == [5, 30]


def test_a_new_expression_starts_afresh(db: Setup) -> None:
    clock, schedule = Clock(), every_five()
    scheduler(db, schedule, clock).run()
    clock.now = T0 + 2 * 60 * MINUTE  # 14:00:30: the old schedule missed ticks since 12:00
    hourly = Schedule.declare("0 * * * *", name=schedule.name, payload={"n": 2})
    again = scheduler(db, hourly, clock)
    assert again.run() is None  # 14:00 was before the new expression was declared
    clock.now += 60 * MINUTE
    assert again.run() is not None  # 15:00
    assert [m.payload for m in messages(db)] == [{"n": 2}]


def test_a_push_that_fails_takes_its_claim_back(
    db: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    payloads = iter([{"n": "not a number"}, {"n": 7}])
    schedule = every_five(payload=lambda tick: next(payloads))
    one = scheduler(db, schedule, clock)
    one.run()
    clock.now = T0 + 5 * MINUTE
    assert one.run() is None
    assert "could not push its tick" in caplog.text
    assert one.run() is not None  # the same tick, pushed this time
    assert [m.payload for m in messages(db)] == [{"n": 7}]


def test_two_schedules_of_one_name_are_refused(db: Setup) -> None:
    schedule = every_five()
    with pytest.raises(Exception, match="two schedules are named"):
        Scheduler([(schedule, db.binding()), (schedule, db.binding())])


def test_the_worker_pushes_the_ticks_of_its_handlers(db: Setup) -> None:
    name = f"test-{uuid.uuid4().hex[:12]}"
    clock = Clock()
    handled: list[int] = []

    @periodic("*/5 * * * *", name=name, payload=lambda tick: {"n": tick.minute})
    def handle(message: Message) -> None:
        handled.append(message.payload["n"])

    Scheduler([(Schedule.declare("*/5 * * * *", name=name), db.binding())], clock=clock).run()
    clock.now = T0 + 5 * MINUTE
    worker = Worker([Consumer(db.binding(), handle)], clock=clock)
    finish = run_in_thread(worker)
    try:
        wait_until(lambda: handled == [5])
    finally:
        finish()


@pytest.fixture(params=DATABASES)
def scheduled_queue(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    """A queue with a schedule of its own (the option ``schedule``), every five minutes."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    every_five_of_queue = periodic_schedule(
        "*/5 * * * *", name=name, payload=lambda tick: {"n": tick.minute}
    )
    options = QueueOptions(schedule=(every_five_of_queue,))
    setup = make_setup(request, request.param, table_name, options)
    for statement in schedule_statements(setup.queue.dialect):
        setup.ex.execute(statement, {})
    yield setup
    setup.ex.execute(f'DROP TABLE IF EXISTS "{SCHEDULE_TABLE}"', {})
    setup.ex.close()  # type: ignore[attr-defined]


def test_the_worker_pushes_the_ticks_of_its_queue_whatever_its_handler(
    scheduled_queue: Setup,
) -> None:
    clock = Clock()
    handled: list[int] = []

    def handle(message: Message) -> None:  # no schedule of its own
        handled.append(message.payload["n"])

    (schedule,) = scheduled_queue.queue.spec.options.schedule
    Scheduler([(schedule, scheduled_queue.binding())], clock=clock).run()
    clock.now = T0 + 5 * MINUTE
    workers = [Worker([Consumer(scheduled_queue.binding(), handle)], clock=clock) for _ in range(3)]
    finishes = [run_in_thread(worker) for worker in workers]
    try:
        wait_until(lambda: handled == [5])
    finally:
        for finish in finishes:
            finish()
    assert handled == [5]
    (row,) = [r for r in schedule_rows(scheduled_queue.ex) if r.name == schedule.name]
    assert row.queue == scheduled_queue.queue.spec.table
    assert row.last_tick == T0.replace(second=0) + 5 * MINUTE
