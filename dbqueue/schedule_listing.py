"""What the schedule commands show (Django's ``manage.py queueschedules``, the SQLAlchemy
CLI's ``dbqueue schedules``): each declared schedule with its last tick pushed, from the
schedule table, and its next tick, from its expression."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from dbqueue.commandline import render_table
from dbqueue.schedules import Schedule

COLUMNS = ("name", "queue", "expression", "zone", "last run", "next run")


def schedule_json(
    declared: Iterable[tuple[Schedule, str]],
    last_ticks: Mapping[str, dt.datetime | None],
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """A dict per declared schedule (with the queue it pushes into): its name, queue,
    expression, zone, ``last_run`` (the last tick pushed, by ``last_ticks``: the schedule
    table's, by name; None if none was) and ``next_run`` (times in ISO 8601, in the
    schedule's zone)."""
    listed = []
    for schedule, queue in declared:
        last = last_ticks.get(schedule.name)
        listed.append(
            {
                "name": schedule.name,
                "queue": queue,
                "expression": schedule.expression,
                "zone": schedule.tz,
                "last_run": None if last is None else last.astimezone(schedule.zone).isoformat(),
                "next_run": schedule.next_tick(now).astimezone(schedule.zone).isoformat(),
            }
        )
    return listed


def schedule_table(listed: list[dict[str, Any]]) -> str:
    """The rows of :func:`schedule_json` as a text table ("never" for no last run)."""
    cells = [
        [
            r["name"],
            r["queue"],
            r["expression"],
            r["zone"],
            r["last_run"] or "never",
            r["next_run"],
        ]
        for r in listed
    ]
    return render_table(COLUMNS, cells, left=len(COLUMNS))
