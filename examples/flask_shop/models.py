"""The shop's tables on Flask-SQLAlchemy's ``db``: orders and sent e-mails (ordinary models)
and the split queue ``OrderConfirmation``, whose message is pushed in the order's own
transaction (``db.session``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import sqlalchemy as sa
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue_sa import QueueMixin


class Base(DeclarativeBase):
    """``db.Model``'s base: its metadata holds every table, the queue's meta table included."""


db = SQLAlchemy(model_class=Base)


class Order(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "flask_order"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(sa.Text())
    total: Mapped[Decimal] = mapped_column(sa.Numeric(10, 2))
    placed_at: Mapped[dt.datetime] = mapped_column(
        sa.DateTime(timezone=True), server_default=sa.func.now()
    )


class SentEmail(db.Model):  # type: ignore[name-defined,misc]
    """The confirmations sent, one per order: a redelivered message finds its row here."""

    __tablename__ = "flask_sent_email"

    order_id: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=False)
    email: Mapped[str] = mapped_column(sa.Text())


class OrderConfirmation(QueueMixin, db.Model):  # type: ignore[name-defined,misc]
    """One message per order: the confirmation e-mail to send."""

    __tablename__ = "flask_order_confirmation"
    __queue_options__ = {"max_attempts": 5}

    order_id: Mapped[int] = mapped_column(sa.BigInteger())
    email: Mapped[str] = mapped_column(sa.String(254))
