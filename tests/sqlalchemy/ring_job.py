"""``RingJob``, the conformance suite's ring, on a base of its own (as
tests.sqlalchemy.kept.KeptJob): a module apart from tests.sqlalchemy.models, so the ``dbqueue``
CLI tests that declare every queue of that module, and the Alembic tests that migrate every
table of its ``Base.metadata``, are unchanged by it."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import DeclarativeBase

from dbqueue_sa import RingQueueMixin
from tests.sqlalchemy.models import JobColumns


class RingBase(DeclarativeBase):
    """RingJob's own base and MetaData."""


class RingJob(JobColumns, RingQueueMixin, RingBase):
    """The conformance suite's ring (twin of RING_OPTIONS in tests/conformance/spec.py and of
    testapp.RingJob)."""

    __tablename__ = "sa_ring_job"
    __queue_options__ = {
        "capacity": 1024,
        "max_attempts": 3,
        "lease": dt.timedelta(seconds=30),
        "stranded_after": dt.timedelta(0),
        "push_timeout": dt.timedelta(seconds=60),
    }
