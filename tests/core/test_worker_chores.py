"""The worker's chores (dbqueue.worker.Chore): done once when it starts, a burst too, then at
their interval; a failing one is logged and does not stop the worker."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from dbqueue import QueueOptions
from dbqueue.errors import InvalidArgument
from dbqueue.worker import Chore, Consumer, Worker
from tests.core.test_worker import DATABASES, Setup, make_setup, run_in_thread, wait_until


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, table_name: str) -> Iterator[Setup]:
    setup = make_setup(request, request.param, table_name, QueueOptions())
    yield setup
    setup.ex.close()  # type: ignore[attr-defined]


class Tally:
    """A chore's runs and disconnects, from the maintenance thread."""

    def __init__(self, result: str | None = None, error: Exception | None = None) -> None:
        self.result, self.error = result, error
        self.runs: list[str] = []
        self.disconnects = 0

    def chore(self, every: float = 3600) -> Chore:
        return Chore("tally", every, self.run, self.disconnect)

    def run(self) -> str | None:
        self.runs.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error
        return self.result

    def disconnect(self) -> None:
        self.disconnects += 1


def test_a_burst_does_each_chore_once_on_the_maintenance_thread(db: Setup) -> None:
    db.push(3)
    first, second = Tally(), Tally()
    worker = Worker(
        [Consumer(db.binding(), lambda m: None)],
        burst=True,
        chores=[first.chore(), second.chore()],
    )
    assert worker.run(handle_signals=False).handled == 3
    assert first.runs == second.runs == ["dbqueue-maintenance"]
    assert first.disconnects == second.disconnects == 1  # its connection, when the worker ends


def test_a_burst_with_nothing_to_do_still_does_its_chores(db: Setup) -> None:
    tally = Tally()
    Worker([Consumer(db.binding(), lambda m: None)], burst=True, chores=[tally.chore()]).run(
        handle_signals=False
    )
    assert len(tally.runs) == 1


def test_a_running_worker_does_its_chore_again_at_its_interval(
    db: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    tally = Tally(result="deleted 2 rows")
    worker = Worker([Consumer(db.binding(), lambda m: None)], chores=[tally.chore(every=0.05)])
    with caplog.at_level(logging.INFO, logger="dbqueue.worker"):
        finish = run_in_thread(worker)
        try:
            wait_until(lambda: len(tally.runs) >= 3)
        finally:
            finish()
    assert "tally: deleted 2 rows" in caplog.messages


def test_a_failing_chore_is_logged_and_the_worker_goes_on(
    db: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    db.push(2)
    tally = Tally(error=RuntimeError("the table is locked"))
    worker = Worker([Consumer(db.binding(), lambda m: None)], burst=True, chores=[tally.chore()])
    assert worker.run(handle_signals=False).handled == 2
    assert "tally failed (the table is locked); tried again in 3600 s" in caplog.messages
    assert tally.disconnects == 2  # after the failure, and when the worker ends


@pytest.mark.parametrize("every", [0, -1, True, "60"])
def test_a_chore_needs_a_positive_interval(every: object) -> None:
    with pytest.raises(InvalidArgument, match="a chore's every must be positive seconds"):
        Chore("x", every, lambda: None, lambda: None)  # type: ignore[arg-type]
