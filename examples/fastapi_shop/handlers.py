"""What ``dbqueue worker`` does with the shop's queues::

    dbqueue worker --url "$DATABASE_URL" examples.fastapi_shop.handlers

A handler gets detached instances of the queue class and opens its own session for its
database work (``db.SessionLocal``, on ``DATABASE_URL``: run the worker with the same URL).
Delivery is at least once, so each handler is safe to run twice on the same message.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from dbqueue_sa import handler
from examples.fastapi_shop.db import SessionLocal
from examples.fastapi_shop.models import OrderConfirmation, Price, PriceTick, SentEmail


@handler(OrderConfirmation)
def send_confirmation(job: OrderConfirmation) -> None:
    """Send one confirmation. A real shop hands the e-mail to its mail service here; the
    example records it in ``shop_sent_email``. An exception fails the message: the worker
    retries it with back-off, and after ``max_attempts`` it is failed for good."""
    with SessionLocal.begin() as session:
        if session.get(SentEmail, job.order_id) is None:  # not sent by an earlier delivery
            session.add(SentEmail(order_id=job.order_id, email=job.email))


@handler(PriceTick, batch=True, batch_size=256)
def record_prices(ticks: list[PriceTick]) -> None:
    """Keep the latest price of each symbol: one upsert for the whole batch. A tick that
    arrives late (delivered again after a worker died) does not overwrite a newer price."""
    latest: dict[str, PriceTick] = {}
    for tick in ticks:  # in push order: the last tick of a symbol wins
        latest[tick.symbol] = tick
    rows = [
        {"symbol": t.symbol, "price": t.price, "quoted_at": t.quoted_at} for t in latest.values()
    ]
    with SessionLocal.begin() as session:
        insert = _insert(session).values(rows)
        session.execute(
            insert.on_conflict_do_update(
                index_elements=[Price.symbol],
                set_={"price": insert.excluded.price, "quoted_at": insert.excluded.quoted_at},
                where=Price.quoted_at <= insert.excluded.quoted_at,
            )
        )


def _insert(session: Session) -> Any:
    """``INSERT ... ON CONFLICT``, which each dialect spells in its own module."""
    dialect = session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(Price)
