"""The example shop's async view under a real ASGI server: ``uvicorn shopsite.asgi:application``
in a process of its own, on a PostgreSQL database of the test's own, fed concurrent HTTP
requests. Every order placed must have exactly one confirmation and one order event (pushed
in its transaction by the sync block the view runs through ``sync_to_async``), and every
request one page view (pushed by ``apush`` on its own); no request leaves its connection
open."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from dbqueue.ring import SlotState
from tests.example.conftest import EXAMPLE, manage
from tests.processes import PATIENCE, start_process, wait_for

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]

ORDERS = 40
#: Refused by the form (400): no order, no message, but a page view.
INVALID = 4
#: Requests in flight at once, each on a thread (and a connection) of the server's own.
CONCURRENCY = 8
RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@pytest.fixture
def shop_url(demo_pg_url: str) -> str:
    """The test's database, migrated by ``manage.py migrate``."""
    result = manage(demo_pg_url, "migrate", "--no-input")
    assert result.returncode == 0, result.stdout + result.stderr
    return demo_pg_url


@pytest.fixture
def server(shop_url: str, tmp_path: Path) -> Iterator[str]:
    """``uvicorn shopsite.asgi:application`` on a free port; its base URL. Stopped with
    SIGTERM, as a process manager stops it: it must exit cleanly."""
    env = {**os.environ, "DATABASE_URL": shop_url}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the tests' own; asgi.py sets the shop's
    log = tmp_path / "uvicorn.log"
    command = [sys.executable, "-m", "uvicorn", "shopsite.asgi:application"]
    command += ["--app-dir", str(EXAMPLE), "--host", "127.0.0.1", "--port", "0"]
    process = start_process(command, env, log)
    try:
        wait_for(lambda: RUNNING.search(log.read_text()) is not None, "uvicorn listens", log)
        running = RUNNING.search(log.read_text())
        assert running is not None
        yield f"http://127.0.0.1:{running[1]}"
    finally:
        stop(process, log)


def stop(process: subprocess.Popen[bytes], log: Path) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=PATIENCE)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    output = log.read_text()
    # uvicorn shuts down gracefully, then re-raises the signal, so its exit reports it.
    assert code in (0, -signal.SIGTERM), output
    assert "Finished server process" in output, output
    assert "Traceback" not in output, output


def server_connections(conn: psycopg.Connection, mine: int) -> int:
    """Connections to this database other than ``mine``."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s",
        (mine,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def post_order(client: httpx.Client, email: str) -> httpx.Response:
    return client.post("/orders/async/", data={"email": email, "total": "12.50"})


def test_every_order_has_exactly_one_confirmation(server: str, shop_url: str) -> None:
    emails = [f"customer{i}@example.com" for i in range(ORDERS)]
    emails += [f"not-an-email-{i}" for i in range(INVALID)]
    with (
        httpx.Client(base_url=server, timeout=PATIENCE) as client,
        ThreadPoolExecutor(CONCURRENCY) as pool,
    ):
        responses = dict(
            zip(emails, pool.map(lambda e: post_order(client, e), emails), strict=True)
        )

    placed: dict[int, tuple[str, int]] = {}  # order id -> (e-mail, confirmation's message id)
    for email, response in responses.items():
        if "@" in email:
            assert response.status_code == 201, response.text
            body = response.json()
            placed[body["order"]] = (email, body["message"])
        else:
            assert response.status_code == 400, response.text
            assert "email" in response.json()["errors"]
    assert len(placed) == ORDERS

    with psycopg.connect(shop_url, autocommit=True) as conn:
        # Each request's thread closes its connection as the request ends: once all have,
        # this one is the only connection to the database.
        mine = conn.info.backend_pid
        wait_for(
            lambda: server_connections(conn, mine) == 0, "the requests' connections are closed"
        )
        orders = dict(conn.execute("SELECT id, email FROM shop_order").fetchall())
        confirmations = conn.execute(
            "SELECT order_id, email, id FROM shop_orderconfirmation"
        ).fetchall()
        events = conn.execute(
            "SELECT order_id FROM shop_orderevent WHERE state <> %s", (int(SlotState.EMPTY),)
        ).fetchall()
        views = conn.execute("SELECT path, count(*) FROM shop_pageview GROUP BY path").fetchall()

    assert orders == {order: email for order, (email, _) in placed.items()}
    # Exactly one confirmation per order, the one each response named, and nothing else.
    assert sorted(confirmations) == sorted((o, e, m) for o, (e, m) in placed.items())
    assert sorted(order for (order,) in events) == sorted(placed)
    assert views == [("/orders/async/", ORDERS + INVALID)]
