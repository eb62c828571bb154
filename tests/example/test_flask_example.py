"""The Flask-SQLAlchemy example (``examples/flask_shop``) end to end, on PostgreSQL and SQLite:
views push on ``db.session`` (a scoped_session) through Flask's test client, and the worker
runs as ``dbqueue worker`` in a subprocess."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from examples.flask_shop.app import create_app
from examples.flask_shop.models import Order, OrderConfirmation, SentEmail, db
from tests.example.conftest import dbqueue_worker

pytestmark = pytest.mark.sqlalchemy

#: Passes the view, but not the queue's String(254): refused at push, after the order's INSERT.
TOO_LONG = "ann@" + "x" * 300 + ".example.com"


def test_an_order_and_its_message_commit_together_and_the_worker_sends_it(
    shop_url: str,
) -> None:
    app = create_app(shop_url)
    client = app.test_client()
    placed = client.post("/orders", json={"email": "ann@example.com", "total": "12.50"})
    assert placed.status_code == 201, placed.text
    refused = client.post("/orders", json={"email": TOO_LONG, "total": "1"})
    assert refused.status_code == 422 and "max 254" in refused.json["error"]
    assert client.get("/queues").json["ready"] == 1
    with app.app_context():
        orders = db.session.scalars(sa.select(Order)).all()
        assert [o.email for o in orders] == ["ann@example.com"]  # the refused one rolled back

    result = dbqueue_worker(shop_url, "examples.flask_shop.handlers")
    assert result.returncode == 0, result.stdout + result.stderr

    with app.app_context():
        sent = db.session.scalars(sa.select(SentEmail)).all()
        assert [(s.order_id, s.email) for s in sent] == [(placed.json["order"], "ann@example.com")]
        assert db.session.execute(OrderConfirmation.queue.items()).all() == []
        db.session.remove()
        db.engine.dispose()  # the database is dropped after the test
