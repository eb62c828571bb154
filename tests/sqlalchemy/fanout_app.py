"""The handlers of the grouped queue ``Order`` (one per consumer group), which a ``dbqueue
worker`` subprocess imports: each appends ``<group> <order_id>`` to the file named by the
environment variable ``FANOUT_LOG``."""

from __future__ import annotations

import os

from dbqueue_sa.handlers import handler
from tests.sqlalchemy.fanout_jobs import Order

#: The environment variable naming the file the handlers append to.
LOG_VARIABLE = "FANOUT_LOG"


def _record(group: str, order: Order) -> None:
    with open(os.environ[LOG_VARIABLE], "a", encoding="utf-8") as log:
        log.write(f"{group} {order.order_id}\n")


@handler(Order, group="email")
def send_email(order: Order) -> None:
    """The email group's handler."""
    _record("email", order)


@handler(Order, group="search")
def index_order(order: Order) -> None:
    """The search group's handler."""
    _record("search", order)
