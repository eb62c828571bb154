"""A worker meant to end (``burst``) gives up on a database that stays unreachable, after a
bounded, configurable time: a cron job or a CI step never hangs. A service's worker keeps
trying, unless told otherwise."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, WorkerGaveUp, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.errors import InvalidArgument
from dbqueue.executor import Executor
from dbqueue.message import Message, State
from dbqueue.worker import BURST_RECONNECT_FOR, Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue
from tests.core.cutbed import PATIENCE, Cut, cut_queue, join_worker_threads, run_in_thread

SPEC = QueueSpec("nowhere", (Field("n", FieldKind.INTEGER),))
DIALECT = get_dialect("postgresql")


def unreachable() -> Executor:
    """Nothing listens on port 1: every connection is refused at once."""
    return executor_for(DIALECT, psycopg.connect("host=127.0.0.1 port=1 user=x connect_timeout=2"))


def consumer() -> Consumer:
    def handle(m: Message) -> None:
        raise AssertionError("nothing can be popped")

    return Consumer(ExecutorQueue(SplitQueue(SPEC, DIALECT), unreachable), handle)


def test_a_burst_worker_gives_up_on_an_unreachable_database() -> None:
    worker = Worker([consumer()], burst=True, reconnect_for=0.5)
    with pytest.raises(WorkerGaveUp, match=r"queue nowhere: the database stayed unreachable for"):
        worker.run(handle_signals=False)
    assert worker.stats.database_errors >= 2  # it tried again before giving up


def test_how_long_a_worker_keeps_trying() -> None:
    assert Worker([consumer()], burst=True).reconnect_for == BURST_RECONNECT_FOR
    assert Worker([consumer()]).reconnect_for is None  # a service waits for its database
    assert Worker([consumer()], reconnect_for=30).reconnect_for == 30
    for bad in (0, -1, True, "5"):
        with pytest.raises(InvalidArgument, match="reconnect_for must be positive seconds"):
            Worker([consumer()], reconnect_for=bad)  # type: ignore[arg-type]


# -- items in hand when the database goes away ----------------------------------------------


@pytest.fixture
def cut(pg_dsn: str, table_name: str) -> Iterator[Cut]:
    with cut_queue(pg_dsn, table_name) as setup:
        yield setup


@pytest.mark.postgresql
@pytest.mark.parametrize("handler_ends", [True, False], ids=["acks-fail", "handler-runs-on"])
def test_a_burst_worker_with_items_in_hand_gives_up_once(
    cut: Cut, caplog: pytest.LogCaptureFixture, handler_ends: bool
) -> None:
    """The database goes away while the handler works on six items: the worker gives up once
    ``reconnect_for`` has passed, whether the handler ended meanwhile (its acks fail) or is
    still at it (abandoned: the process may exit), and logs it once. The items stay leased:
    their leases bring them back."""
    cut.push(6)
    started, release = threading.Event(), threading.Event()

    def handle(m: Message) -> None:
        started.set()
        if m.payload["n"] == 0:
            release.wait(PATIENCE)

    worker = Worker([Consumer(cut.binding, handle)], burst=True, reconnect_for=1.0)
    with caplog.at_level(logging.WARNING, logger="dbqueue"):
        thread, raised = run_in_thread(worker)
        try:
            assert started.wait(PATIENCE)
            cut.proxy.kill()
            cut_at = time.monotonic()
            if handler_ends:
                release.set()
            thread.join(PATIENCE)
            assert not thread.is_alive(), "the worker did not stop"
            gave_up_at = time.monotonic()
        finally:
            release.set()  # an abandoned handler ends now: it must not settle, nor log again
        join_worker_threads()
    assert [type(e) for e in raised] == [WorkerGaveUp], raised
    assert gave_up_at - cut_at >= 1.0  # it tried that long first
    lines = [r.getMessage() for r in caplog.records if "giving up" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "the database stayed unreachable for" in lines[0] and "reconnect_for=1)" in lines[0]
    assert cut.states() == Counter({State.LEASED: 6})  # neither acked nor failed
    assert worker.stats.handled == (6 if handler_ends else 1)  # item 0 ended after it gave up
