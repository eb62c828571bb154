"""Periodic schedules declared in code: ``@periodic("*/5 * * * *", tz="Europe/Paris")`` stacked
on a handler makes the workers push a message into that handler's queue at every tick.

A schedule is a cron expression (five fields, or six with seconds; read by croniter) in an
explicit time zone (an IANA name, UTC by default): ticks are that zone's wall-clock times, so
``0 9 * * *`` in ``Europe/Paris`` is 09:00 in Paris summer and winter alike, and croniter
decides what a tick inside a DST change means (a tick in the skipped hour runs at the first
time after it; in the repeated hour, each matching instant runs).

Which worker pushes a tick is decided in the database (:mod:`dbqueue.scheduler`): exactly one
push per tick, whatever the number of workers. The decorator only declares::

    @periodic("0 3 * * *", tz="Europe/Paris", payload={"kind": "nightly"})
    @handler(Report)
    def build_report(job): ...

``payload`` is the message's fields (a mapping), or a callable that takes the tick (an aware
datetime in the schedule's zone) and returns them. A schedule's ``name`` identifies it in the
schedule table: by default the handler's ``module.qualname``, so a handler with two schedules
names at least one of them.

A schedule can also be declared on the queue, whatever handler serves it: the queue option
``schedule`` is a list of :func:`periodic_schedule` (pushed by every worker serving the
queue, exactly once per tick like the handlers' schedules)::

    class QueueOptions:
        schedule = [periodic_schedule("*/5 * * * *", name="sweep", payload={"kind": "sweep"})]
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dbqueue.errors import InvalidSpec
from dbqueue.handlers import function_name

#: The attribute of a handler function that holds its schedules.
SCHEDULES_ATTRIBUTE = "__dbqueue_schedules__"
#: The longest schedule name, expression and zone name (the schedule table's columns).
MAX_NAME = 200
MAX_EXPRESSION = 200
MAX_ZONE = 64

#: A message's fields, or what makes them from the tick.
Payload = Mapping[str, Any] | Callable[[dt.datetime], Mapping[str, Any]]


def _croniter() -> Any:
    try:
        from croniter import croniter
    except ImportError:  # pragma: no cover - the extra is part of every supported install
        raise InvalidSpec(
            "periodic schedules need croniter: pip install 'dbqueue[schedules]'"
        ) from None
    return croniter


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic schedule: when (``expression`` in ``zone``), what (``payload``), and the
    ``name`` its row in the schedule table has."""

    name: str
    expression: str
    zone: ZoneInfo
    payload: Payload = field(default_factory=dict)

    @classmethod
    def declare(
        cls, expression: str, *, tz: str = "UTC", name: str, payload: Payload | None = None
    ) -> Schedule:
        """A validated schedule; raises :class:`~dbqueue.errors.InvalidSpec` for a bad
        expression, zone, name or payload."""
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise InvalidSpec(f"a schedule's name must be 1 to {MAX_NAME} characters, got {name!r}")
        if not isinstance(expression, str) or len(expression) > MAX_EXPRESSION:
            raise InvalidSpec(f"schedule {name!r}: the expression must be a cron string")
        expression = " ".join(expression.split())
        croniter = _croniter()
        if not croniter.is_valid(expression):
            raise InvalidSpec(
                f"schedule {name!r}: {expression!r} is not a cron expression (five fields, "
                f"minute hour day-of-month month day-of-week, or six with seconds last)"
            )
        if not isinstance(tz, str) or not tz or len(tz) > MAX_ZONE:
            raise InvalidSpec(f"schedule {name!r}: tz must be an IANA zone name, got {tz!r}")
        try:
            zone = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidSpec(
                f"schedule {name!r}: unknown time zone {tz!r} (an IANA name such as "
                f"'UTC' or 'Europe/Paris')"
            ) from None
        payload = {} if payload is None else payload
        if not (isinstance(payload, Mapping) or callable(payload)):
            raise InvalidSpec(
                f"schedule {name!r}: payload must be a mapping of fields, or a callable taking "
                f"the tick; got {type(payload).__name__}"
            )
        return cls(name, expression, zone, payload)

    @property
    def tz(self) -> str:
        """The zone's IANA name."""
        return self.zone.key

    def latest_tick(self, now: dt.datetime) -> dt.datetime:
        """The last tick at or before ``now`` (aware), in UTC."""
        local = now.astimezone(self.zone)
        # croniter's get_prev is strictly before its start: start just past ``now``'s second
        # (ticks fall on whole seconds), so a tick at ``now`` itself counts.
        start = local.replace(microsecond=0) + dt.timedelta(seconds=1)
        tick = _croniter()(self.expression, start).get_prev(dt.datetime).astimezone(dt.UTC)
        # Within an hour repeated in autumn croniter's step back can land on the first of
        # two instants of one wall-clock time; its steps forward tell them apart.
        while (following := self.next_tick(tick)) <= now:
            tick = following
        return tick  # type: ignore[no-any-return]

    def next_tick(self, now: dt.datetime) -> dt.datetime:
        """The first tick after ``now`` (aware), in UTC."""
        tick: dt.datetime = _croniter()(self.expression, now.astimezone(self.zone)).get_next(
            dt.datetime
        )
        return tick.astimezone(dt.UTC)

    def payload_for(self, tick: dt.datetime) -> dict[str, Any]:
        """The fields of the message of ``tick``."""
        made = self.payload(tick.astimezone(self.zone)) if callable(self.payload) else self.payload
        if not isinstance(made, Mapping):
            raise InvalidSpec(
                f"schedule {self.name!r}: its payload callable returned "
                f"{type(made).__name__}, not a mapping of fields"
            )
        return dict(made)


def periodic[F: Callable[..., object]](
    expression: str, *, tz: str = "UTC", payload: Payload | None = None, name: str | None = None
) -> Callable[[F], F]:
    """Have the workers push a message into the decorated handler's queue at every tick of
    ``expression`` (cron) in zone ``tz`` (default UTC); see :mod:`dbqueue.schedules`.

    Stack it on a handler (above or below ``@handler``). ``payload``: the message's fields, or
    a callable taking the tick (aware, in ``tz``); ``name``: the schedule's stable name
    (default: the handler's ``module.qualname``). Raises
    :class:`~dbqueue.errors.InvalidSpec` for a bad expression or zone, and for a second
    schedule of the same name on one handler.
    """

    # Validated at once, so a bad declaration fails where it is written.
    declared = Schedule.declare(expression, tz=tz, name=name or "periodic", payload=payload)

    def declare(func: F) -> F:
        schedule = declared if name else replace(declared, name=function_name(func)[:MAX_NAME])
        existing: tuple[Schedule, ...] = getattr(func, SCHEDULES_ATTRIBUTE, ())
        if any(s.name == schedule.name for s in existing):
            raise InvalidSpec(
                f"{function_name(func)} already has a schedule named {schedule.name!r}; "
                f"give each of its schedules a name=..."
            )
        setattr(func, SCHEDULES_ATTRIBUTE, (*existing, schedule))
        return func

    return declare


def periodic_schedule(
    expression: str, *, name: str, tz: str = "UTC", payload: Payload | None = None
) -> Schedule:
    """A schedule for a queue's ``schedule`` option (Django's ``class QueueOptions``,
    SQLAlchemy's ``__queue_options__``): a message pushed into the queue at every tick of
    ``expression`` (cron) in zone ``tz`` (default UTC). ``name`` is required: it is the
    schedule's row in the schedule table, unique among all schedules. ``payload``: the
    message's fields, or a callable taking the tick (aware, in ``tz``). Raises
    :class:`~dbqueue.errors.InvalidSpec` for a bad expression, zone, name or payload.
    """
    return Schedule.declare(expression, tz=tz, name=name, payload=payload)


def queue_schedules(value: object) -> tuple[Schedule, ...]:
    """The queue option ``schedule`` as a tuple; InvalidSpec unless it is a list or tuple of
    :func:`periodic_schedule` with distinct names."""
    if isinstance(value, Schedule) or not isinstance(value, list | tuple):
        raise InvalidSpec(
            f"schedule must be a list of periodic_schedule(...) (dbqueue.schedules), got {value!r}"
        )
    seen: set[str] = set()
    for item in value:
        if not isinstance(item, Schedule):
            raise InvalidSpec(
                f"schedule must be a list of periodic_schedule(...) (dbqueue.schedules); "
                f"got an item {item!r}"
            )
        if item.name in seen:
            raise InvalidSpec(
                f"schedule: two schedules are named {item.name!r}; give each a distinct name"
            )
        seen.add(item.name)
    return tuple(value)


def schedules_of(func: Callable[..., object]) -> tuple[Schedule, ...]:
    """The schedules declared on a handler function (in declaration order)."""
    found: tuple[Schedule, ...] = getattr(func, SCHEDULES_ATTRIBUTE, ())
    return tuple(reversed(found))
