"""A ring with consumer groups (fan-out) for the SQLAlchemy tests, on a base of its own (as
tests.sqlalchemy.fanout_jobs), so the tests that declare or create every queue of another
module are unchanged by it."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue import Backoff
from dbqueue_sa import RingQueueMixin

#: The consumer groups of ``Tick``.
GROUPS = ("trading", "audit")


class RingFanoutBase(DeclarativeBase):
    """The grouped ring's own base and MetaData."""


class Tick(RingQueueMixin, RingFanoutBase):
    """Each tick is delivered once to the trading group and once to the audit group, through
    a ring of 4 slots."""

    __tablename__ = "sa_tick"
    __queue_options__ = {
        "capacity": 4,
        "groups": GROUPS,
        "max_attempts": 2,
        "when_full": "raise",
        "hole_timeout": dt.timedelta(0),
        "backoff": Backoff(base=dt.timedelta(0), cap=dt.timedelta(0)),
    }

    price: Mapped[int] = mapped_column(sa.Integer())
    venue: Mapped[str | None] = mapped_column(sa.Text())
