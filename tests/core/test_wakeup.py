"""The listener (dbqueue.wakeup): it rings on a notification, and stop() ends it while it
waits with nothing to wake it; a burst worker opens none."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from dbqueue import QueueOptions
from dbqueue.wakeup import Doorbell, Listener
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue
from tests.core.test_worker import PATIENCE, make_setup, wait_until

pytestmark = pytest.mark.postgresql

CHANNEL = "dbqueue_test_wakeup"


def backends(conn: psycopg.Connection[Any], application: str) -> list[int]:
    """The server processes of the connections named ``application``."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application]
    ).fetchall()
    return [int(r[0]) for r in rows]


def listening(pg_dsn: str, application: str) -> tuple[Listener, Doorbell]:
    """A started listener on CHANNEL, once it listens; its connection named ``application``."""
    doorbell = Doorbell()
    listener = Listener(
        lambda: psycopg.connect(pg_dsn, application_name=application), [CHANNEL], doorbell
    )
    listener.start()
    wait_until(lambda: listener.listening)
    return listener, doorbell


def test_a_notification_rings_and_stop_ends_an_idle_listener(
    pg_dsn: str, pg_conn: psycopg.Connection[Any]
) -> None:
    application = f"dbqueue-listener-{threading.get_ident()}"
    listener, doorbell = listening(pg_dsn, application)
    rings = doorbell.rings
    pg_conn.execute(f"NOTIFY {CHANNEL}")
    assert doorbell.wait(rings, PATIENCE)
    # Nothing arrives now, and its wait has no timeout: only stop() can end it.
    listener.stop(timeout=PATIENCE)
    assert not listener.listening
    # Closed: its server process ends (soon after, not at once).
    wait_until(lambda: backends(pg_conn, application) == [])


def test_a_burst_worker_opens_no_listener(request: pytest.FixtureRequest, table_name: str) -> None:
    """It ends when its queues are empty, so it would only wait for its listener to stop."""
    setup = make_setup(request, "pg", table_name, QueueOptions(), listen=True)
    opened: list[psycopg.Connection[Any]] = []

    def listen() -> psycopg.Connection[Any]:
        opened.append(setup.listen())
        return opened[-1]

    binding = ExecutorQueue(setup.queue, setup.connect, listen=listen)
    assert binding.channel is not None  # a worker that waits would listen
    setup.push(3)
    worker = Worker([Consumer(binding, lambda m: None)], burst=True)
    assert worker.listeners == []
    assert not worker.listening  # a burst that waits after a database error polls
    assert worker.run(handle_signals=False).handled == 3
    assert opened == []


def test_a_listener_whose_connection_is_killed_listens_again(
    pg_dsn: str, pg_conn: psycopg.Connection[Any]
) -> None:
    application = f"dbqueue-listener-killed-{threading.get_ident()}"
    listener, doorbell = listening(pg_dsn, application)
    try:
        (killed,) = backends(pg_conn, application)
        pg_conn.execute("SELECT pg_terminate_backend(%s)", [killed])
        # Its socket reads the end of the connection, and it connects again.
        wait_until(
            lambda: listener.listening and backends(pg_conn, application) not in ([], [killed])
        )
        rings = doorbell.rings
        pg_conn.execute(f"NOTIFY {CHANNEL}")
        assert doorbell.wait(rings, PATIENCE)
    finally:
        listener.stop(timeout=PATIENCE)
