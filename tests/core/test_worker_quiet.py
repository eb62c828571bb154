"""The worker's log throttle: a repeating failure is logged at most once per ``every``
seconds per cause, and the next line says how many were left out."""

from __future__ import annotations

import logging
import sqlite3
import threading

import psycopg
import pytest
import sqlalchemy.exc
from psycopg import errors as pg

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.errors import QueueUnavailable
from dbqueue.executor import Executor
from dbqueue.scheduler import Scheduler
from dbqueue.schedules import Schedule
from dbqueue.worker.quiet import MAX_CAUSES, QUIET_FOR, Throttle, cause_of
from dbqueue.worker_queue import ExecutorQueue

LOGGER = "dbqueue.worker"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_a_cause_is_logged_once_per_interval_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    quiet = Throttle(30, clock=clock)
    cause = ("queue q: ack", "psycopg.OperationalError")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert quiet.warning(cause, "queue %s: ack failed (%s)", "q", "refused")
        for _ in range(12):
            clock.now += 2
            assert not quiet.warning(cause, "queue %s: ack failed (%s)", "q", "refused")
        clock.now += 6  # 30 s after the first line
        assert quiet.warning(cause, "queue %s: ack failed (%s)", "q", "refused again")
        clock.now += 31
        assert quiet.warning(cause, "queue %s: ack failed (%s)", "q", "once more")
    assert lines(caplog) == [
        "queue q: ack failed (refused)",
        "queue q: ack failed (refused again) (12 more since)",
        "queue q: ack failed (once more)",
    ]
    assert {r.levelno for r in caplog.records} == {logging.WARNING}
    assert [(r.dbqueue_cause, r.dbqueue_left_out) for r in caplog.records] == [
        (cause, 0),
        (cause, 12),
        (cause, 0),
    ]


def test_causes_are_counted_apart(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    quiet = Throttle(30, clock=clock)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for _ in range(3):
            quiet.warning(("a", "E"), "a failed")
            quiet.error(("b", "E"), "b failed")
            quiet.debug(("a", "F"), "a failed otherwise")
            clock.now += 1
        clock.now += 30
        quiet.warning(("a", "E"), "a failed")
    assert lines(caplog) == [
        "a failed",
        "b failed",
        "a failed otherwise",
        "a failed (2 more since)",
    ]
    assert [r.levelno for r in caplog.records] == [
        logging.WARNING,
        logging.ERROR,
        logging.DEBUG,
        logging.WARNING,
    ]


def test_zero_logs_every_line_and_another_logger_can_be_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet = Throttle(0, clock=Clock())
    other = logging.getLogger("dbqueue.wakeup")
    with caplog.at_level(logging.WARNING, logger="dbqueue"):
        assert quiet.warning("x", "one")
        assert quiet.warning("x", "two", logger=other)
    assert lines(caplog) == ["one", "two"]
    assert [r.name for r in caplog.records] == [LOGGER, "dbqueue.wakeup"]


def test_a_traceback_goes_with_the_line(caplog: pytest.LogCaptureFixture) -> None:
    quiet = Throttle(clock=Clock())
    assert quiet.every == QUIET_FOR
    error = ValueError("refused")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        quiet.error("x", "refused", exc_info=error)
    (record,) = caplog.records
    assert record.exc_info is not None and record.exc_info[1] is error


@pytest.mark.parametrize("bad", [-1, True, "30", float("nan")])
def test_the_interval_is_seconds(bad: object) -> None:
    with pytest.raises(ValueError, match="every must be seconds"):
        Throttle(bad)  # type: ignore[arg-type]


def test_old_causes_are_forgotten_past_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    quiet = Throttle(30, clock=clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for i in range(MAX_CAUSES):
            quiet.warning(i, "cause %d", i)
        quiet.warning(0, "cause 0 again")  # left out: counted
        clock.now += 30
        quiet.warning("new", "a new cause")
    assert len(quiet._causes) == 2  # the new one, and cause 0 with its count
    assert lines(caplog)[-1] == "a new cause"


def test_threads_share_one_throttle(caplog: pytest.LogCaptureFixture) -> None:
    quiet = Throttle(3600)
    barrier = threading.Barrier(8)

    def repeat() -> None:
        barrier.wait()
        for _ in range(100):
            quiet.warning("outage", "the database is away")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        threads = [threading.Thread(target=repeat) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert lines(caplog) == ["the database is away"]
    assert quiet._causes["outage"][1] == 799


def test_the_cause_of_an_error_is_its_kind_not_its_text() -> None:
    refused = psycopg.OperationalError("connection to server at 127.0.0.1, port 40001 failed")
    again = psycopg.OperationalError("connection to server at 127.0.0.1, port 40002 failed")
    assert cause_of("queue q: pop", refused) == cause_of("queue q: pop", again)
    assert cause_of("queue q: pop", refused) == ("queue q: pop", "psycopg.OperationalError")
    assert cause_of("queue q: pop", refused) != cause_of("queue q: ack", refused)
    deadlock = pg.DeadlockDetected("deadlock detected")
    assert cause_of("x", deadlock) == ("x", "psycopg.errors.DeadlockDetected 40P01")
    assert cause_of("x", sqlite3.OperationalError("locked")) == ("x", "sqlite3.OperationalError")


def test_the_cause_of_a_wrapped_error_is_the_driver_s() -> None:
    """A connection lost during a statement (a front wraps it in QueueUnavailable, Django and
    SQLAlchemy in their own classes) and refused at the next attempt is one cause."""
    refused = psycopg.OperationalError("connection refused")
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    unavailable = QueueUnavailable("q", "ack", None, lost)
    unavailable.__cause__ = lost
    wrapped_by_sqlalchemy = sqlalchemy.exc.OperationalError("UPDATE", {}, lost)
    causes = {cause_of("ack", e) for e in (refused, unavailable, wrapped_by_sqlalchemy)}
    assert causes == {("ack", "psycopg.OperationalError")}


def test_a_line_names_the_caller_s_place(caplog: pytest.LogCaptureFixture) -> None:
    quiet = Throttle(clock=Clock())
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        quiet.warning("a", "a")
        quiet.log("b", logging.INFO, "b")
    assert {(r.filename, r.funcName) for r in caplog.records} == {
        ("test_worker_quiet.py", "test_a_line_names_the_caller_s_place")
    }


def test_failure_takes_the_cause_from_what_failed_and_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    quiet = Throttle(30, clock=clock)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for port in range(40001, 40004):
            refused = psycopg.OperationalError(f"connection to port {port} refused")
            quiet.failure("queue q: pop", refused, "pop failed (%s)", refused)
            quiet.failure("queue q: next_due", refused, "next_due failed", level=logging.DEBUG)
        clock.now += 30
        quiet.failure("queue q: pop", ValueError("x"), "pop failed (%s)", "x", level=logging.ERROR)
    assert lines(caplog) == [
        "pop failed (connection to port 40001 refused)",
        "next_due failed",
        "pop failed (x)",  # another kind of error: another cause, none left out
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.DEBUG, logging.ERROR]


def test_a_worker_s_schedules_say_a_failing_push_once_in_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The scheduler looks ten times a second; a schedule whose tick cannot be pushed (the
    database is away) is said once per interval through the worker's throttle."""
    spec = QueueSpec("nowhere", (Field("n", FieldKind.INTEGER),))
    dialect = get_dialect("postgresql")

    def unreachable() -> Executor:  # nothing listens on port 1: refused at once
        return executor_for(dialect, psycopg.connect("host=127.0.0.1 port=1 user=x"))

    schedule = Schedule.declare("* * * * *", name="every-minute", payload={"n": 1})
    clock = Clock()
    scheduler = Scheduler(
        [(schedule, ExecutorQueue(SplitQueue(spec, dialect), unreachable))],
        quiet=Throttle(30, clock=clock),
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(5):
            assert scheduler.run() is None
        clock.now += 30
        scheduler.run()
    assert [m.split(" (connection")[0] for m in lines(caplog)] == [
        "schedule every-minute: could not push its tick",
        "schedule every-minute: could not push its tick",
    ]
    assert lines(caplog)[-1].endswith("; trying again (4 more since)")
