"""The handlers of the grouped queue ``Order`` (one per consumer group), which a ``dbqueue
worker`` subprocess imports: each appends ``<group> <order_id>`` to the file named by the
environment variable ``FANOUT_LOG`` (tests.sqlalchemy.handled_log)."""

from __future__ import annotations

from dbqueue_sa.handlers import handler
from tests.sqlalchemy.fanout_jobs import Order
from tests.sqlalchemy.handled_log import record


@handler(Order, group="email")
def send_email(order: Order) -> None:
    """The email group's handler."""
    record("email", order.order_id)


@handler(Order, group="search")
def index_order(order: Order) -> None:
    """The search group's handler."""
    record("search", order.order_id)
