"""What ``dbqueue worker`` does with the shop's queue::

    dbqueue worker --url "$DATABASE_URL" examples.flask_shop.handlers

The worker runs outside Flask's request cycle: a handler opens a plain SQLAlchemy session on
``DATABASE_URL`` for its own writes. Delivery is at least once, so it is safe to run twice.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue_sa import handler
from examples.flask_shop.models import OrderConfirmation, SentEmail

engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///flask_shop.sqlite3"))


@handler(OrderConfirmation)
def send_confirmation(job: OrderConfirmation) -> None:
    """Record the confirmation as sent (a real shop hands it to its mail service here)."""
    with Session(engine) as session, session.begin():
        if session.get(SentEmail, job.order_id) is None:  # not sent by an earlier delivery
            session.add(SentEmail(order_id=job.order_id, email=job.email))
