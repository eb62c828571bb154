"""Queue classes for the SQLAlchemy tests: the twins of ``tests.django.testapp`` (``Job``, a
payload column of every supported kind; ``Tick``, a small ring). ``KeptJob``, Job's twin
that keeps done items, is in tests.sqlalchemy.kept."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue import Backoff
from dbqueue_sa import JSONB, QueueMixin, RingQueueMixin


class Base(DeclarativeBase):
    """The tests' declarative base; ``Base.metadata`` holds every table below."""


class JobColumns:
    """The conformance suite's payload columns (twin of JOB_FIELDS in tests/conformance/spec.py
    and of testapp.JobFields), shared by Job and tests.sqlalchemy.kept.KeptJob."""

    name: Mapped[str] = mapped_column(sa.String(50))
    n: Mapped[int] = mapped_column(sa.Integer(), default=0)
    doc: Mapped[Any | None] = mapped_column(JSONB)
    at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime(timezone=True))
    amount: Mapped[decimal.Decimal | None] = mapped_column(sa.Numeric(8, 2))
    uid: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid())
    blob: Mapped[bytes | None] = mapped_column(sa.LargeBinary())
    flag: Mapped[bool] = mapped_column(sa.Boolean(), default=False)
    small: Mapped[int | None] = mapped_column(sa.SmallInteger(), info={"min_value": 0})


class Job(JobColumns, QueueMixin, Base):
    """The conformance suite's queue (twin of tests/conformance/spec.py and testapp.Job)."""

    __tablename__ = "sa_job"
    __queue_options__ = {"max_attempts": 3, "lease": dt.timedelta(seconds=30)}


class Tick(RingQueueMixin, Base):
    """A small ring: full after 8 pushes, and a push into a full ring gives up quickly."""

    __tablename__ = "sa_tick"
    __queue_options__ = {
        "capacity": 8,
        "push_timeout": dt.timedelta(milliseconds=50),
        "max_attempts": 2,
        "lease": dt.timedelta(seconds=5),
        "backoff": Backoff(base=dt.timedelta(0), cap=dt.timedelta(0)),
    }

    symbol: Mapped[str] = mapped_column(sa.String(12))
    price: Mapped[decimal.Decimal] = mapped_column(sa.Numeric(12, 4))
    volume: Mapped[int] = mapped_column(sa.Integer(), default=0)
    note: Mapped[str | None] = mapped_column(sa.Text())
