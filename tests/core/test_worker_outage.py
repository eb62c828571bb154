"""A worker with items in hand when its database goes away (a proxy in front of PostgreSQL,
killed): the first SIGTERM ends it at once, whatever its threads are doing, and a worker that
keeps waiting says each repeating failure at most once per ``quiet_for``."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest

from dbqueue import WorkerGaveUp
from dbqueue.message import Message, State
from dbqueue.worker import Consumer, Worker
from dbqueue.worker.state import Outages
from tests.core.cutbed import PATIENCE, Cut, cut_queue, join_worker_threads, run_in_thread

pytestmark = pytest.mark.postgresql


class Watch(logging.Handler):
    """Keeps the records of the ``dbqueue`` loggers, and wakes whoever waits for one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def wait_for(self, what: str, condition: Callable[[logging.LogRecord], bool]) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: any(map(condition, self.records)), PATIENCE):
                raise AssertionError(f"timed out waiting for {what}")

    def messages(self, level: int = logging.WARNING) -> list[str]:
        return [r.getMessage() for r in list(self.records) if r.levelno >= level]


@pytest.fixture
def watch() -> Iterator[Watch]:
    handler = Watch()
    logger = logging.getLogger("dbqueue")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def cut(pg_dsn: str, table_name: str) -> Iterator[Cut]:
    with cut_queue(pg_dsn, table_name, lease=timedelta(seconds=1.5)) as setup:
        yield setup


def is_failure(record: logging.LogRecord) -> bool:
    """A line saying that a queue's operation failed: the worker knows its database is away."""
    return (
        re.search(r"queue \S+: (upkeep|rescue|lease extension) failed \(", record.getMessage())
        is not None
    )


# -- the first SIGTERM during an outage ---------------------------------------------------------


@pytest.mark.parametrize("moment", ["handler-runs", "reconnecting", "outage-after-the-signal"])
def test_the_first_sigterm_during_an_outage_ends_the_worker(
    cut: Cut, watch: Watch, moment: str
) -> None:
    """A service's worker (no ``reconnect_for``: it would wait for its database forever) is
    sent SIGTERM while its handler is still at an item (``handler-runs``), while it retries
    the ack of what it handled (``reconnecting``), or before the database goes away under
    the item it finishes (``outage-after-the-signal``). It exits at once in each case, with
    WorkerGaveUp (what it holds is left to the leases), said once."""
    cut.push(6)
    started, release = threading.Event(), threading.Event()

    def handle(m: Message) -> None:
        started.set()
        if m.payload["n"] == 0:
            release.wait(PATIENCE)

    def sigterm() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    def drive() -> None:
        started.wait(PATIENCE)
        if moment == "outage-after-the-signal":
            sigterm()
            watch.wait_for("the signal", lambda r: "SIGTERM: finishing" in r.getMessage())
            cut.proxy.kill()
            release.set()
            return
        cut.proxy.kill()
        if moment == "reconnecting":
            release.set()
            watch.wait_for("a retry", lambda r: "ack and pop failed" in r.getMessage())
        else:
            watch.wait_for("a failure", is_failure)
        sigterm()

    worker = Worker([Consumer(cut.binding, handle)])
    driver = threading.Thread(target=drive, daemon=True)
    # Hang guard: a worker still running after PATIENCE is stopped the hard way, and fails.
    hung = threading.Timer(PATIENCE, lambda: (release.set(), worker._abandoned.set()))
    driver.start()
    hung.start()
    try:
        with pytest.raises(WorkerGaveUp) as raised:
            worker.run()  # in the main thread: it handles the signal
    finally:
        timed_out = not hung.is_alive()
        hung.cancel()
        release.set()
        driver.join(PATIENCE)
        join_worker_threads()
    assert not timed_out, "the worker did not end on SIGTERM"
    if moment == "outage-after-the-signal":
        assert "stopping, and the database is unreachable (ack failed)" in str(raised.value)
    else:
        assert "SIGTERM while the database is unreachable" in str(raised.value)
    assert "the items in hand are left to their leases" in str(raised.value)
    said = [m for m in watch.messages(logging.ERROR) if str(raised.value) in m]
    assert len(said) == 1, watch.messages()
    assert cut.states() == Counter({State.LEASED: 6})  # their leases bring them back


# -- a worker that keeps waiting ----------------------------------------------------------------


def test_a_waiting_worker_says_each_failure_once_per_quiet_for(cut: Cut, watch: Watch) -> None:
    """Without ``reconnect_for`` the worker waits for its database as long as it takes; its
    lease thread fails four times a second, the upkeep round ten times a second, the
    rescue every second. Each of these causes is logged at most once per ``quiet_for``
    (shortened here from 30 s), the next line saying how many were left out."""
    quiet_for = 0.5
    cut.push(6)
    started, release = threading.Event(), threading.Event()

    def handle(m: Message) -> None:
        started.set()
        if m.payload["n"] == 0:
            release.wait(PATIENCE)

    worker = Worker([Consumer(cut.binding, handle)], quiet_for=quiet_for)
    thread, raised = run_in_thread(worker)
    try:
        assert started.wait(PATIENCE)
        cut.proxy.kill()
        cut_at = len(watch.records)

        def compaction_said(times: int) -> Callable[[logging.LogRecord], bool]:
            def enough(_: logging.LogRecord) -> bool:
                lines = [r for r in watch.records if "upkeep failed" in r.getMessage()]
                return len(lines) >= times

            return enough

        watch.wait_for("three upkeep lines", compaction_said(3))
        assert thread.is_alive() and not raised  # still waiting for its database
        during = list(watch.records[cut_at:])
    finally:
        worker.stop(release_unstarted=True)  # (the database is away: it ends at once)
        release.set()
        thread.join(PATIENCE)
        join_worker_threads()
    assert [type(e) for e in raised] == [WorkerGaveUp]
    failures = [r for r in during if r.levelno >= logging.WARNING]
    # Every line that can repeat during an outage goes through the worker's throttle.
    unthrottled = [r.getMessage() for r in failures if not hasattr(r, "dbqueue_cause")]
    assert unthrottled == []
    by_cause: defaultdict[object, list[logging.LogRecord]] = defaultdict(list)
    for record in failures:
        by_cause[record.dbqueue_cause].append(record)  # type: ignore[attr-defined]
    whats = {str(cause[0]).rsplit(": ", 1)[-1] for cause in by_cause}  # type: ignore[index]
    assert {"upkeep", "lease extension"} <= whats, whats
    for cause, records in by_cause.items():
        times = [r.created for r in records]
        gaps = [later - earlier for earlier, later in pairwise(times)]
        # Unthrottled, the upkeep's lines would come 0.1 s apart. (The records' times are
        # taken after the throttle's, on another clock, by threads a busy machine may hold
        # up: half of quiet_for as slack.)
        assert all(gap >= quiet_for / 2 for gap in gaps), (cause, gaps)
    compaction = next(rs for c, rs in by_cause.items() if "upkeep" in str(c))
    assert all(r.dbqueue_left_out > 0 for r in compaction[1:])  # type: ignore[attr-defined]
    assert compaction[-1].getMessage().endswith(" more since)")


def test_a_statement_sent_before_an_outage_began_does_not_end_it() -> None:
    """An outage ends when the database answers a statement sent after it began: one sent
    before (a lease extension, an ack, in flight as the connection broke) answers for a
    moment already past, and a SIGTERM right after must still find the worker in the outage."""
    outages = Outages()
    queue: Any = SimpleNamespace(name="q", database="db")
    sent = time.monotonic()
    outages.failed(queue, OSError("connection refused"))
    outages.reached(queue, sent)
    assert outages.longest() is not None
    outages.reached(queue, time.monotonic())
    assert outages.longest() is None
