"""The shop's tables: orders, sent e-mails and prices (ordinary ORM tables), and two queues.

- ``OrderConfirmation``, a split queue: one message per order, pushed in the order's own
  transaction, handled by ``handlers.send_confirmation``.
- ``PriceTick``, a ring queue: a bounded table of preallocated slots for a steady stream of
  small messages, handled in batches by ``handlers.record_prices``.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue_sa import QueueMixin, RingQueueMixin


class Base(DeclarativeBase):
    """``Base.metadata`` holds every table, the queues' generated ones included."""


class Order(Base):
    __tablename__ = "shop_order"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(sa.Text())
    total: Mapped[Decimal] = mapped_column(sa.Numeric(10, 2))
    placed_at: Mapped[dt.datetime] = mapped_column(
        sa.DateTime(timezone=True), server_default=sa.func.now()
    )


class SentEmail(Base):
    """The confirmations sent, one per order: a redelivered message finds its row here."""

    __tablename__ = "shop_sent_email"

    order_id: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=False)
    email: Mapped[str] = mapped_column(sa.Text())


class Price(Base):
    """The latest price of each symbol, as the ticks report it."""

    __tablename__ = "shop_price"

    symbol: Mapped[str] = mapped_column(sa.String(12), primary_key=True)
    price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 4))
    quoted_at: Mapped[dt.datetime] = mapped_column(sa.DateTime(timezone=True))


class OrderConfirmation(QueueMixin, Base):
    """A split queue: this table holds the payload, ``shop_order_confirmation_meta`` (generated)
    the delivery state."""

    __tablename__ = "shop_order_confirmation"
    __queue_options__ = {"max_attempts": 5}

    order_id: Mapped[int] = mapped_column(sa.BigInteger())
    email: Mapped[str] = mapped_column(sa.String(254))  # a longer one is refused at push


class PriceTick(RingQueueMixin, Base):
    """A ring queue of 1,024 slots (failed ticks go to the generated ``shop_price_tick_failed``).
    A push into a full ring waits up to ``push_timeout`` for a free slot, then raises
    ``QueueFull``."""

    __tablename__ = "shop_price_tick"
    __queue_options__ = {"capacity": 1024, "push_timeout": dt.timedelta(seconds=2)}

    symbol: Mapped[str] = mapped_column(sa.String(12))
    price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 4))
    quoted_at: Mapped[dt.datetime] = mapped_column(sa.DateTime(timezone=True))
