"""A queue whose own option ``schedule`` pushes a message every second, the tick in it, and a
handler without a schedule: what the process race test runs ``dbqueue worker`` on."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import DeclarativeBase, Mapped

from dbqueue.schedules import periodic_schedule
from dbqueue_sa import QueueMixin, handler, schedule_table

#: The schedule's name (the tests share the schedule table of a database with others).
EVERY_SECOND = "tests.sqlalchemy.every_second_app.beat"


class BeatBase(DeclarativeBase):
    """Beat's own MetaData: the test creates and drops it."""


def _tick_payload(tick: dt.datetime) -> dict[str, str]:
    return {"tick": tick.astimezone(dt.UTC).isoformat()}


class Beat(QueueMixin, BeatBase):
    __tablename__ = "sa_beat"
    # Handled messages are kept (done), so the test reads every tick pushed.
    __queue_options__ = {
        "keep_done": True,
        "schedule": [periodic_schedule("* * * * * *", name=EVERY_SECOND, payload=_tick_payload)],
    }
    tick: Mapped[str]


SCHEDULES = schedule_table(BeatBase.metadata)


@handler(Beat)
def handle_beat(beat: Beat) -> None: ...
