"""Periodic schedules over Django: the schedule table made by ``migrate``, a tick raced for by
worker threads on their own connections (PostgreSQL and SQLite) pushed once, and
``manage.py queueschedules``."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from dbqueue.scheduler import Scheduler
from dbqueue.schedules import periodic, periodic_schedule, schedules_of
from dbqueue.worker import Consumer
from dbqueue.worker.scheduling import schedule_chores
from dbqueue_django import handler
from dbqueue_django.handlers import handlers, unregister
from dbqueue_django.schedule_rows import QueueSchedule
from dbqueue_django.spec import options_of
from dbqueue_django.worker import DjangoWorkerQueue
from tests.django.testapp.models import Job

pytestmark = [
    pytest.mark.django,
    pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
]

T0 = dt.datetime(2026, 11, 27, 12, 0, 30, tzinfo=dt.UTC)


@pytest.fixture
def schedule_name() -> Iterator[str]:
    """The name of a schedule on Job's handler, registered for the test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    unregister(Job)

    @periodic("*/5 * * * *", tz="Europe/Paris", name=name, payload={"name": "tick"})
    @handler(Job)
    def nightly(job: Job) -> None: ...

    yield name
    unregister(Job)


@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_worker_threads_racing_for_a_tick_push_it_once(schedule_name: str, alias: str) -> None:
    (schedule,) = schedules_of(handlers()[(Job, None)].func)
    clock = {"now": T0}
    Scheduler(
        [(schedule, DjangoWorkerQueue(Job.queue.using(alias)))], clock=lambda: clock["now"]
    ).run()
    clock["now"] = T0 + dt.timedelta(minutes=5)
    start = threading.Barrier(4)
    pushed: list[str | None] = []

    def race() -> None:
        try:
            scheduler = Scheduler(
                [(schedule, DjangoWorkerQueue(Job.queue.using(alias)))], clock=lambda: clock["now"]
            )
            start.wait()
            pushed.append(scheduler.run())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(p is not None for p in pushed) == 1
    assert list(Job.objects.using(alias).values_list("name", flat=True)) == ["tick"]
    row = QueueSchedule.objects.using(alias).get(name=schedule_name)
    assert row.last_tick == dt.datetime(2026, 11, 27, 12, 5, tzinfo=dt.UTC)


def queueschedules(*args: str) -> str:
    out = io.StringIO()
    call_command("queueschedules", *args, stdout=out)
    return out.getvalue()


def test_queueschedules_lists_last_and_next_run(schedule_name: str) -> None:
    assert "never" in queueschedules()
    QueueSchedule.objects.create(
        name=schedule_name,
        queue="testapp.Job@default",
        expression="*/5 * * * *",
        timezone="Europe/Paris",
        since=T0,
        last_tick=T0.replace(second=0),
    )
    table = queueschedules()
    header, *lines = table.splitlines()
    assert header.split() == ["name", "queue", "expression", "zone", "last", "run", "next", "run"]
    (line,) = [line for line in lines if line.startswith(schedule_name)]
    assert "testapp.Job" in line and "*/5 * * * *" in line and "Europe/Paris" in line
    assert "2026-11-27T13:00:00+01:00" in line  # the last tick, in the schedule's zone
    (listed,) = [
        s for s in json.loads(queueschedules("--json"))["schedules"] if s["name"] == schedule_name
    ]
    assert listed["last_run"] == "2026-11-27T13:00:00+01:00"
    assert listed["zone"] == "Europe/Paris" and listed["database"] == "default"
    assert dt.datetime.fromisoformat(listed["next_run"]) > dt.datetime.now(dt.UTC)


def test_queueschedules_lists_the_schedules_of_the_queue_too(
    schedule_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    of_queue = f"{schedule_name}-queue"
    declared = {k: v for k, v in vars(Job.QueueOptions).items() if not k.startswith("_")}
    schedule = [periodic_schedule("0 3 * * *", tz="Europe/Paris", name=of_queue)]
    monkeypatch.setattr(
        Job, "QueueOptions", type("QueueOptions", (), declared | {"schedule": schedule})
    )
    assert options_of(Job).schedule == tuple(schedule)
    monkeypatch.delitem(Job.queue.__dict__, "spec", raising=False)  # the spec cached without it
    listed = {s["name"]: s for s in json.loads(queueschedules("--json"))["schedules"]}
    assert listed[schedule_name]["queue"] == listed[of_queue]["queue"] == "testapp.Job"
    assert listed[of_queue]["expression"] == "0 3 * * *" and listed[of_queue]["last_run"] is None


@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_the_worker_pushes_the_ticks_of_the_queue_whatever_its_handler(
    schedule_name: str, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    of_queue = f"{schedule_name}-queue"
    declared = {k: v for k, v in vars(Job.QueueOptions).items() if not k.startswith("_")}
    schedule = [periodic_schedule("*/5 * * * *", name=of_queue, payload={"name": "of queue"})]
    monkeypatch.setattr(
        Job, "QueueOptions", type("QueueOptions", (), declared | {"schedule": schedule})
    )
    queue = Job.queue.using(alias)
    monkeypatch.delitem(Job.queue.__dict__, "spec", raising=False)
    clock = {"now": T0}
    worker_queue = DjangoWorkerQueue(queue)
    # A queue served twice by a worker (a second handler without a schedule) is scheduled once.
    consumers = [
        Consumer(worker_queue, handlers()[(Job, None)].func),
        Consumer(worker_queue, print),
    ]
    (chore,) = schedule_chores(consumers, lambda: clock["now"])
    chore.run()  # declares both schedules at T0
    clock["now"] = T0 + dt.timedelta(minutes=5)
    assert chore.run() is not None
    chore.disconnect()
    names = sorted(Job.objects.using(alias).values_list("name", flat=True))
    assert names == ["of queue", "tick"]  # the queue's, and the handler's
    assert QueueSchedule.objects.using(alias).get(name=of_queue).queue == f"testapp.Job@{alias}"


def test_queueschedules_refuses_an_unknown_database() -> None:
    with pytest.raises(CommandError, match="no database alias 'nowhere'"):
        queueschedules("--database", "nowhere")
