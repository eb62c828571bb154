"""The handlers the SQLAlchemy worker tests run, in process and in a ``dbqueue worker``
subprocess (which imports this module), and ``Chore``: a split queue that retries at once, so
a burst takes an item through every attempt."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbqueue import Backoff
from dbqueue_sa import QueueMixin
from dbqueue_sa.handlers import handler
from tests.sqlalchemy.models import Job, Tick

#: What the handlers saw, in order (list.append is atomic: worker threads share it).
RECEIVED: list[str] = []


class ChoreBase(DeclarativeBase):
    """Chore's own MetaData: the tests that need it create and drop it."""


class Chore(QueueMixin, ChoreBase):
    """Always fails (see :func:`attempt_chore`); two attempts, no back-off between them."""

    __tablename__ = "sa_chore"
    __queue_options__ = {
        "max_attempts": 2,
        "backoff": Backoff(base=dt.timedelta(0), cap=dt.timedelta(0), jitter=0),
    }

    task: Mapped[str] = mapped_column(sa.String(20))


@handler(Job, batch_size=10)
def record_job(job: Job) -> None:
    """Record the job's name; "boom" raises, so failures can be tested."""
    if job.name == "boom":
        raise ValueError(f"boom #{job.id}")
    RECEIVED.append(job.name)


@handler(Tick, batch=True, batch_size=4)
def record_ticks(ticks: list[Tick]) -> None:
    """Record a batch of ticks; a batch holding the symbol "BOOM" fails as a whole."""
    if any(t.symbol == "BOOM" for t in ticks):
        raise ValueError(f"boom in a batch of {len(ticks)}")
    RECEIVED.extend(t.symbol for t in ticks)


@handler(Chore)
def attempt_chore(chore: Chore) -> None:
    """Fail every attempt."""
    raise RuntimeError(f"cannot do {chore.task} (attempt {chore.attempts})")
