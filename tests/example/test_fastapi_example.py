"""The FastAPI example (``examples/fastapi_shop``) end to end, on PostgreSQL and SQLite: real
HTTP handling through FastAPI's TestClient, real databases, and the worker started as
``dbqueue worker`` is, in a subprocess."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from examples.fastapi_shop import db
from examples.fastapi_shop.app import app
from examples.fastapi_shop.models import Order, OrderConfirmation, Price, PriceTick, SentEmail
from tests.example.conftest import dbqueue_worker

HANDLERS = "examples.fastapi_shop.handlers"
pytestmark = pytest.mark.sqlalchemy

#: Passes the request model's pattern, but not the queue's String(254): refused at push, after
#: the order's INSERT.
TOO_LONG = "ann@" + "x" * 300 + ".example.com"


@pytest.fixture
def shop(shop_url: str) -> Iterator[db.Database]:
    """The example pointed at the test database, its tables created."""
    previous = db.database.url
    database = db.use(shop_url)
    database.create_tables()
    yield database
    database.dispose()
    db.use(previous)


@pytest.fixture
def order_inserts(shop: db.Database) -> list[str]:
    """Every INSERT into shop_order the app runs, through either engine."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO SHOP_ORDER "):
            seen.append(statement)

    for engine in (shop.engine, shop.async_engine.sync_engine):
        sa.event.listen(engine, "after_cursor_execute", record)
    return seen


def place_orders(client: TestClient) -> list[tuple[int, int, str]]:
    """One order through each endpoint: (order id, message id, e-mail) of each."""
    placed = []
    for path, email in (("/orders", "ann@example.com"), ("/async/orders", "bob@example.com")):
        response = client.post(path, json={"email": email, "total": "12.50"})
        assert response.status_code == 201, response.text
        body = response.json()
        placed.append((body["order"], body["message"], email))
    return placed


def test_order_and_message_commit_together(shop: db.Database, order_inserts: list[str]) -> None:
    with TestClient(app) as client:
        placed = place_orders(client)
        inserts_before_failures = len(order_inserts)
        for path in ("/orders", "/async/orders"):
            # Refused by the request model: nothing runs.
            response = client.post(path, json={"email": "not-an-email", "total": "1"})
            assert response.status_code == 422, response.text
            # Refused by the queue, after the order's INSERT: the transaction rolls back.
            response = client.post(path, json={"email": TOO_LONG, "total": "1"})
            assert response.status_code == 422, response.text
            assert "max 254" in response.json()["detail"]
        stats = client.get("/queues").json()

    assert len(order_inserts) == inserts_before_failures + 2  # the two refused at push
    with db.SessionLocal() as session:
        orders = session.scalars(sa.select(Order).order_by(Order.id)).all()
        assert [(o.id, o.email) for o in orders] == [(p[0], p[2]) for p in placed]
        items = session.scalars(OrderConfirmation.queue.items("ready")).all()
        assert [(i.id, i.order_id, i.email) for i in items] == [(m, o, e) for o, m, e in placed]
    confirmations = stats["shop_order_confirmation"]
    assert (confirmations["ready"], confirmations["leased"], confirmations["failed"]) == (2, 0, 0)
    assert confirmations["oldest_ready_age"] >= 0


def test_worker_cli_runs_the_handlers(shop: db.Database) -> None:
    with TestClient(app) as client:
        placed = place_orders(client)
        ticks = [
            {"symbol": "ACME", "price": "10.5"},
            {"symbol": "INIT", "price": "3.25"},
            {"symbol": "ACME", "price": "11"},
        ]
        response = client.post("/prices", json=ticks)
        assert response.status_code == 201, response.text
        assert len(response.json()["ticks"]) == 3
        before = client.get("/queues").json()
    assert before["shop_price_tick"]["ready"] == 3

    result = run_worker(shop)
    assert result.returncode == 0, result.stdout + result.stderr

    with db.SessionLocal() as session:
        sent = session.scalars(sa.select(SentEmail).order_by(SentEmail.order_id)).all()
        assert [(s.order_id, s.email) for s in sent] == [(p[0], p[2]) for p in placed]
        prices = session.execute(sa.select(Price.symbol, Price.price).order_by(Price.symbol))
        assert [(symbol, float(price)) for symbol, price in prices] == [
            ("ACME", 11.0),
            ("INIT", 3.25),
        ]
        for model in (OrderConfirmation, PriceTick):
            assert session.execute(model.queue.items()).all() == []
            assert session.execute(model.queue.failed()).all() == []
    with TestClient(app) as client:
        after = client.get("/queues").json()
    for name in ("shop_order_confirmation", "shop_price_tick"):
        counts = after[name]
        assert (counts["ready"], counts["leased"], counts["failed"]) == (0, 0, 0), counts


def run_worker(shop: db.Database) -> subprocess.CompletedProcess[str]:
    """``dbqueue worker --burst`` on the shop's handlers, as the README runs it."""
    return dbqueue_worker(shop.url.render_as_string(hide_password=False), HANDLERS)
