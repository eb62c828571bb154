"""The workers' side of periodic schedules (:mod:`dbqueue.schedules`): exactly one push per
tick, whatever the number of workers, decided in the database.

Every schedule has a row in the schedule table (:data:`~dbqueue.schema.SCHEDULE_TABLE`) of its
queue's database, upserted by each worker as it starts. A tick is pushed by the worker whose
conditional update moves the row's ``last_tick`` forward to it (``... WHERE last_tick IS NULL
OR last_tick < :tick``), in the same transaction as the push: a worker that loses the race
updates nothing and pushes nothing, and a push that fails takes its claim back with it. No
worker reads the row first and writes after.

A worker looks at the latest tick at or before now, never at the ticks between: one that was
down (or a deployment without workers for a while) pushes the latest missed tick once, not one
message per missed tick. A schedule declared for the first time (or given a new expression or
zone) starts at that moment: no tick before it is caught up.

Between ticks a worker touches no table: it knows each schedule's next tick and checks its
clock every :data:`CHECK_EVERY` seconds (on the maintenance thread, as a
:class:`~dbqueue.worker.Chore`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from dbqueue.dialects.base import Dialect
from dbqueue.errors import InvalidSpec
from dbqueue.executor import Executor
from dbqueue.schedules import Schedule
from dbqueue.schema import SCHEDULE_TABLE
from dbqueue.sql import load

if TYPE_CHECKING:  # (the worker package imports this module)
    from dbqueue.worker.quiet import Throttle

log = logging.getLogger("dbqueue.worker")

#: Seconds between two looks at the clock for due ticks (no query unless one is due): well
#: under a second, so a schedule with seconds is not skipped by a look that lands just late.
CHECK_EVERY = 0.1

#: The current time, aware: what the worker asks for the time (tests inject their own).
Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ScheduleRow(NamedTuple):
    """A row of the schedule table."""

    name: str
    queue: str
    expression: str
    timezone: str
    since: dt.datetime
    last_tick: dt.datetime | None
    next_tick: dt.datetime | None


class ScheduleTarget(Protocol):
    """A queue as the scheduler pushes into it, on the calling thread's own connection
    (:class:`~dbqueue.worker_queue.FrontWorkerQueue` provides it)."""

    @property
    def name(self) -> str:
        """How logs and the schedule table name the queue."""

    def on_connection[T](self, work: Callable[[Executor], T]) -> T:
        """``work(ex)`` with an executor over the thread's connection (autocommit)."""

    def push_if_claimed(
        self, claim: Callable[[Executor], bool], payload: Callable[[], Mapping[str, Any]]
    ) -> int | None:
        """In one transaction: ``claim(ex)``, and if it returned True, push ``payload()``
        (made only then); the pushed id, or None when the claim did not take."""

    def disconnect(self) -> None:
        """Close this thread's connection (after a database error)."""


def _statements(dialect: Dialect) -> dict[str, str]:
    table = dialect.quote(SCHEDULE_TABLE)
    return {
        name: parts[0].format(table=table) for name, parts in load(dialect.name, "schedule").items()
    }


class ScheduleStore:
    """The schedule table's statements on one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._sql = _statements(dialect)

    def _time(self, value: dt.datetime | None) -> Any:
        return self.dialect.time_param(value)

    def declare(self, ex: Executor, schedule: Schedule, queue: str, now: dt.datetime) -> None:
        """Upsert ``schedule``'s row (its queue, expression and zone as declared now)."""
        ex.execute(
            self._sql["schedule_declare"],
            {
                "name": schedule.name,
                "queue": queue,
                "expression": schedule.expression,
                "timezone": schedule.tz,
                "now": self._time(now),
                "next_tick": self._time(schedule.next_tick(now)),
            },
        )

    def claim(
        self, ex: Executor, schedule: Schedule, tick: dt.datetime, next_tick: dt.datetime
    ) -> bool:
        """Move the row's ``last_tick`` forward to ``tick``; whether it moved (this caller
        owns the tick). Meant for a transaction that pushes the tick's message."""
        rows = ex.execute(
            self._sql["schedule_claim"],
            {"name": schedule.name, "tick": self._time(tick), "next_tick": self._time(next_tick)},
        )
        return bool(rows)

    def rows(self, ex: Executor) -> list[ScheduleRow]:
        """Every row of the table, by name."""
        found = []
        for name, queue, expression, zone, since, last, nxt in ex.execute(
            self._sql["schedule_rows"], {}
        ):
            since_at = self.dialect.time_result(since)
            assert since_at is not None
            found.append(
                ScheduleRow(
                    name,
                    queue,
                    expression,
                    zone,
                    since_at,
                    self.dialect.time_result(last),
                    self.dialect.time_result(nxt),
                )
            )
        return found


@dataclass(slots=True)
class _Entry:
    schedule: Schedule
    target: ScheduleTarget
    store: ScheduleStore | None = None
    #: When to look next (None: the row is not declared yet).
    due: dt.datetime | None = None


class Scheduler:
    """Pushes the ticks of ``schedules`` (each with the queue it pushes into) that are due by
    ``clock``: :meth:`run` is a worker chore. Raises InvalidSpec for two schedules of one
    name. A push that fails is tried again at the next look, a tenth of a second later: with
    ``quiet`` (a worker's :class:`~dbqueue.worker.quiet.Throttle`) its failure is logged at
    most once in a while while it repeats, otherwise at each look."""

    def __init__(
        self,
        schedules: Iterable[tuple[Schedule, ScheduleTarget]],
        *,
        clock: Clock = utc_now,
        quiet: Throttle | None = None,
    ) -> None:
        self._quiet = quiet
        self._entries: list[_Entry] = []
        seen: dict[str, Schedule] = {}
        for schedule, target in schedules:
            if schedule.name in seen:
                raise InvalidSpec(
                    f"two schedules are named {schedule.name!r}; a schedule's name must be "
                    f"unique (give one of them name=...)"
                )
            seen[schedule.name] = schedule
            self._entries.append(_Entry(schedule, target))
        self._clock = clock

    @property
    def schedules(self) -> list[Schedule]:
        return [e.schedule for e in self._entries]

    def run(self) -> str | None:
        """Declare the schedules not declared yet, and push each one's latest tick if it is
        due and no other worker pushed it; what was pushed, for the log (None: nothing)."""
        now = self._clock()
        pushed = []
        for entry in self._entries:
            if entry.due is not None and now < entry.due:
                continue
            try:
                tick = self._run_one(entry, now)
            except Exception as exc:
                # Tried again at the next look (the row stays where it was: a failed push
                # takes its claim back).
                msg = "schedule %s: could not push its tick (%s); trying again"
                name = entry.schedule.name
                if self._quiet is None:
                    log.warning(msg, name, exc)
                else:
                    self._quiet.failure(f"schedule {name}", exc, msg, name, exc, logger=log)
                entry.target.disconnect()
                continue
            if tick is not None:
                pushed.append(f"{entry.schedule.name} -> {entry.target.name} ({tick.isoformat()})")
        return f"pushed the tick of {', '.join(pushed)}" if pushed else None

    def _run_one(self, entry: _Entry, now: dt.datetime) -> dt.datetime | None:
        """The tick pushed, or None."""
        schedule, target = entry.schedule, entry.target
        if entry.store is None:
            entry.store = ScheduleStore(target.on_connection(lambda ex: ex.dialect))
        store = entry.store
        if entry.due is None:
            target.on_connection(lambda ex: store.declare(ex, schedule, target.name, now))
        tick = schedule.latest_tick(now)
        next_tick = schedule.next_tick(now)
        pushed = target.push_if_claimed(
            lambda ex: store.claim(ex, schedule, tick, next_tick),
            lambda: schedule.payload_for(tick),
        )
        entry.due = next_tick
        return tick if pushed is not None else None

    def disconnect(self) -> None:
        for entry in self._entries:
            entry.target.disconnect()


def schedule_rows(ex: Executor) -> list[ScheduleRow]:
    """The schedule table's rows (what the list commands show)."""
    return ScheduleStore(ex.dialect).rows(ex)
