"""A queue with consumer groups (fan-out) for the SQLAlchemy tests, on a base of its own: a
module apart from tests.sqlalchemy.models, so the tests that declare or create every queue of
that module are unchanged by it."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue import Backoff
from dbqueue_sa import QueueMixin

#: The consumer groups of ``Order``.
GROUPS = ("email", "search")


class FanoutBase(DeclarativeBase):
    """The grouped queue's own base and MetaData."""


class OrderColumns:
    """Order's payload, shared with the migration tests' versions of it declared otherwise."""

    order_id: Mapped[int] = mapped_column(sa.Integer())
    note: Mapped[str] = mapped_column(sa.Text(), default="")


class Order(OrderColumns, QueueMixin, FanoutBase):
    """Each order is delivered once to the email group and once to the search group."""

    __tablename__ = "sa_order"
    __queue_options__ = {
        "groups": GROUPS,
        "max_attempts": 2,
        "backoff": Backoff(base=dt.timedelta(0), cap=dt.timedelta(0)),
    }
