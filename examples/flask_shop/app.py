"""The shop's Flask application: ``POST /orders`` stores the order and pushes its confirmation
on ``db.session`` (Flask-SQLAlchemy's scoped session), in one transaction; ``GET /queues``
shows the queue's counts.

Run it with ``flask --app "examples.flask_shop.app:create_app()" run``; ``DATABASE_URL``
names the database (default ``sqlite:///flask_shop.sqlite3``).
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from typing import Any

from flask import Flask, jsonify, request

from dbqueue import InvalidPayload
from examples.flask_shop.models import Order, OrderConfirmation, db


def create_app(url: str | None = None) -> Flask:
    """The application on ``url`` (default: ``DATABASE_URL``), its tables created."""
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url or os.environ.get(
        "DATABASE_URL", "sqlite:///flask_shop.sqlite3"
    )
    db.init_app(app)
    with app.app_context():
        db.create_all()  # a real project would run a migration (Flask-Migrate: Alembic)

    @app.post("/orders")
    def place_order() -> Any:
        """The order and its confirmation message commit together, or neither does."""
        data = request.get_json(force=True)
        try:
            total = Decimal(str(data["total"]))
        except (KeyError, InvalidOperation):
            return jsonify(error="total: a decimal number"), 422
        order = Order(email=str(data.get("email", "")), total=total)
        db.session.add(order)
        db.session.flush()  # INSERT now, for order.id
        try:
            message = OrderConfirmation.queue.push(db.session, order_id=order.id, email=order.email)
        except InvalidPayload as exc:
            db.session.rollback()  # the order goes too: no order without its message
            return jsonify(error=str(exc)), 422
        db.session.commit()
        return jsonify(order=order.id, message=message), 201

    @app.get("/queues")
    def queues() -> Any:
        stats = OrderConfirmation.queue.stats(db.session)
        return jsonify({k: v for k, v in stats.items() if k != "oldest_ready_age"})

    return app
