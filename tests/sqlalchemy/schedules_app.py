"""A queue with a periodic schedule on its handler, and the schedule table in its MetaData:
what the SQLAlchemy schedule tests (and ``dbqueue schedules``, which imports this module) use."""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase, Mapped

from dbqueue.schedules import periodic
from dbqueue_sa import QueueMixin, handler, schedule_table


class ReportBase(DeclarativeBase):
    """Report's own MetaData: the tests that need it create and drop it."""


class Report(QueueMixin, ReportBase):
    __tablename__ = "sa_report"
    kind: Mapped[str]


SCHEDULES = schedule_table(ReportBase.metadata)
#: The schedule's name (the tests share the schedule table of a database with others).
NIGHTLY = "tests.sqlalchemy.schedules_app.nightly"


@periodic("0 3 * * *", tz="Europe/Paris", payload={"kind": "nightly"}, name=NIGHTLY)
@handler(Report)
def build_report(report: Report) -> None: ...
