"""A worker meant to end (``burst``) gives up on a database that stays unreachable, after a
bounded, configurable time: a cron job or a CI step never hangs. A service's worker keeps
trying, unless told otherwise."""

from __future__ import annotations

import psycopg
import pytest

from dbqueue import Field, FieldKind, QueueSpec, SplitQueue, WorkerGaveUp, get_dialect
from dbqueue.drivers import executor_for
from dbqueue.errors import InvalidArgument
from dbqueue.executor import Executor
from dbqueue.message import Message
from dbqueue.worker import BURST_RECONNECT_FOR, Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

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
