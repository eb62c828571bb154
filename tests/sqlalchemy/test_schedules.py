"""Periodic schedules over SQLAlchemy: the schedule table from ``schedule_table(metadata)``,
a tick raced for by worker threads pushed once (PostgreSQL and SQLite), and
``dbqueue schedules``."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.scheduler import Scheduler, ScheduleTarget
from dbqueue.schedules import schedules_of
from dbqueue_sa import build_worker
from dbqueue_sa.handlers import handlers
from tests.sqlalchemy.cli_support import dbqueue
from tests.sqlalchemy.every_second_app import EVERY_SECOND, BeatBase
from tests.sqlalchemy.schedules_app import NIGHTLY, SCHEDULES, Report, ReportBase, build_report

MODULE = "tests.sqlalchemy.schedules_app"
#: 03:00 in Paris on 2026-11-27 (CET, UTC+1), and a little after.
TICK = dt.datetime(2026, 11, 27, 2, 0, tzinfo=dt.UTC)


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    ReportBase.metadata.drop_all(engine)
    ReportBase.metadata.create_all(engine)
    yield engine
    ReportBase.metadata.drop_all(engine)
    engine.dispose()


def test_worker_threads_racing_for_a_tick_push_it_once(engine: sa.Engine, url: str) -> None:
    worker = build_worker([handlers()[(Report, None)]], url=url)
    target: ScheduleTarget = worker.consumers[0].queue  # type: ignore[assignment]
    (schedule,) = schedules_of(build_report)
    now = {"at": TICK - dt.timedelta(hours=12)}
    Scheduler([(schedule, target)], clock=lambda: now["at"]).run()  # declared the evening before
    now["at"] = TICK + dt.timedelta(seconds=20)
    start = threading.Barrier(4)
    pushed: list[str | None] = []

    def race() -> None:
        scheduler = Scheduler([(schedule, target)], clock=lambda: now["at"])
        start.wait()
        pushed.append(scheduler.run())
        scheduler.disconnect()

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(p is not None for p in pushed) == 1
    with Session(engine) as session, session.begin():
        assert [r.kind for r in Report.queue.pop_batch(session, 10)] == ["nightly"]
    with engine.connect() as connection:
        last = connection.scalar(sa.select(SCHEDULES.c.last_tick))
    assert last == TICK


def test_the_schedules_command_lists_last_and_next_run(engine: sa.Engine, url: str) -> None:
    done = dbqueue("schedules", "--url", url, MODULE)
    assert done.returncode == 0, done.stderr
    header, line = done.stdout.splitlines()
    assert header.split() == ["name", "queue", "expression", "zone", "last", "run", "next", "run"]
    assert line.split()[:2] == [NIGHTLY, "sa_report"]
    assert "0 3 * * *" in line and "Europe/Paris" in line and "never" in line
    with engine.begin() as connection:
        connection.execute(
            SCHEDULES.insert().values(
                name=NIGHTLY,
                queue="sa_report",
                expression="0 3 * * *",
                timezone="Europe/Paris",
                since=TICK - dt.timedelta(days=2),
                last_tick=TICK,
            )
        )
    done = dbqueue("schedules", "--url", url, MODULE, "--json")
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)["schedules"]
    assert listed["last_run"] == "2026-11-27T03:00:00+01:00"
    assert listed["next_run"].endswith("T03:00:00+01:00") or listed["next_run"].endswith(
        "T03:00:00+02:00"
    )


def test_the_schedules_command_says_when_the_table_is_missing(url: str) -> None:
    engine = sa.create_engine(url)
    SCHEDULES.drop(engine, checkfirst=True)  # left by another test of this database
    engine.dispose()
    done = dbqueue("schedules", "--url", url, MODULE)
    assert done.returncode == 1
    assert "the schedule table (dbqueue_schedule) could not be read" in done.stderr


def test_the_schedules_command_lists_the_schedules_of_the_queues_too(url: str) -> None:
    engine = sa.create_engine(url)
    BeatBase.metadata.create_all(engine)
    try:
        done = dbqueue("schedules", "--url", url, "tests.sqlalchemy.every_second_app", "--json")
    finally:
        BeatBase.metadata.drop_all(engine)
        engine.dispose()
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)["schedules"]
    assert listed["name"] == EVERY_SECOND and listed["queue"] == "sa_beat"
    assert listed["expression"] == "* * * * * *" and listed["last_run"] is None
