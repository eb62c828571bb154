"""The worker's heartbeat: rolling counts of what it handled per queue over the last minute,
reported from its maintenance thread while it runs and once more when it stops; a heartbeat
that fails never stops the work."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from dbqueue import QueueOptions
from dbqueue.message import Message
from dbqueue.worker import Consumer, Worker, WorkerReport
from dbqueue.worker.heartbeat import WINDOW, Activity, RollingCount
from tests.core.test_worker import DATABASES, NO_WAIT, Setup, make_setup

#: Failed attempts are tried again at once, three times.
RETRY_AT_ONCE = QueueOptions(max_attempts=3, backoff=NO_WAIT)


@pytest.fixture(params=DATABASES)
def queue(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    """A queue on each database, whose failed attempts are tried again at once."""
    setup = make_setup(request, request.param, table_name, RETRY_AT_ONCE)
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


class Recorder:
    """A heartbeat that keeps every report, beating at every turn of the maintenance loop."""

    every = 0.0

    def __init__(self) -> None:
        self.reports: list[WorkerReport] = []

    def beat(self, report: WorkerReport) -> None:
        self.reports.append(report)


class Broken:
    every = 0.0

    def __init__(self) -> None:
        self.calls = 0

    def beat(self, report: WorkerReport) -> None:
        self.calls += 1
        raise RuntimeError("no table for it")


def test_a_rolling_count_forgets_what_is_older_than_the_window() -> None:
    count = RollingCount()
    count.add(3, now=1000.2)
    count.add(2, now=1000.9)  # the same second
    count.add(4, now=1030.0)
    assert count.total(now=1030.5) == 9
    assert count.total(now=1000.0 + WINDOW - 0.1) == 9
    assert count.total(now=1000.0 + WINDOW) == 4  # the first second is out of the window
    assert count.total(now=1030.0 + WINDOW) == 0


def test_activity_reports_each_queue_by_itself() -> None:
    first: Any = object()
    second: Any = object()
    activity = Activity()
    activity.add(first, 10, 1, now=50.0)
    activity.add(first, 5, 0, now=70.0)
    report = activity.report([first, second], now=100.0)
    assert [(a.queue, a.handled, a.failed) for a in report.queues] == [
        (first, 15, 1),
        (second, 0, 0),
    ]
    assert activity.report([first], now=115.0).queues[0].handled == 5
    assert not report.stopped
    assert report.pid == os.getpid()
    assert report.worker_id.startswith(f"{report.hostname}:{os.getpid()}:")
    assert Activity().worker_id != activity.worker_id  # one per run of a worker


def test_a_worker_reports_what_it_handled(queue: Setup) -> None:
    queue.push(5)

    def handle(m: Message) -> None:
        if m.payload["n"] == 3:
            raise ValueError("three")

    recorder = Recorder()
    binding = queue.binding()
    worker = Worker([Consumer(binding, handle)], burst=True, heartbeat=recorder)
    stats = worker.run(handle_signals=False)
    assert (stats.handled, stats.failed, stats.retried) == (4, 1, 2)
    *running, last = recorder.reports
    assert running, "no heartbeat while the worker ran"
    assert not any(r.stopped for r in running)
    assert last.stopped
    (activity,) = last.queues
    assert (activity.queue, activity.handled, activity.failed) == (binding, 4, 3)
    assert {r.worker_id for r in recorder.reports} == {last.worker_id}


def test_a_failing_heartbeat_never_stops_the_work(
    queue: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    queue.push(3)
    broken = Broken()
    worker = Worker([Consumer(queue.binding(), lambda m: None)], burst=True, heartbeat=broken)
    with caplog.at_level(logging.DEBUG, logger="dbqueue.worker"):
        assert worker.run(handle_signals=False).handled == 3
    assert broken.calls >= 2  # while running, and when stopping
    failures = [r for r in caplog.records if "heartbeat failed (no table for it)" in r.message]
    # Logged at WARNING once: a heartbeat that keeps failing does not fill the log.
    assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * (broken.calls - 1)
