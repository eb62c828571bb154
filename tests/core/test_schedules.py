"""Declaring periodic schedules (dbqueue.schedules): validation at declaration, and tick
times in the schedule's zone, across DST changes, and the queue option ``schedule`` (no
database)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from zoneinfo import ZoneInfo

import pytest

from dbqueue.errors import InvalidSpec
from dbqueue.schedules import Schedule, periodic, periodic_schedule, schedules_of
from dbqueue.spec import QueueOptions, options_from

PARIS = ZoneInfo("Europe/Paris")
UTC = dt.UTC


def at(*args: int, tz: dt.tzinfo = UTC) -> dt.datetime:
    return dt.datetime(*args, tzinfo=tz)  # type: ignore[misc]


def paris(expression: str) -> Schedule:
    return Schedule.declare(expression, tz="Europe/Paris", name="s")


def test_the_latest_tick_counts_a_tick_at_now_itself() -> None:
    every_five = Schedule.declare("*/5 * * * *", name="s")
    assert every_five.latest_tick(at(2026, 1, 1, 12, 5)) == at(2026, 1, 1, 12, 5)
    assert every_five.latest_tick(at(2026, 1, 1, 12, 9, 59)) == at(2026, 1, 1, 12, 5)
    assert every_five.next_tick(at(2026, 1, 1, 12, 5)) == at(2026, 1, 1, 12, 10)


def test_ticks_are_wall_clock_times_of_the_zone_summer_and_winter() -> None:
    nine = paris("0 9 * * *")
    assert nine.next_tick(at(2026, 1, 10)) == at(2026, 1, 10, 8)  # CET, UTC+1
    assert nine.next_tick(at(2026, 7, 10)) == at(2026, 7, 10, 7)  # CEST, UTC+2


def test_a_tick_in_the_hour_skipped_in_spring_runs_once_after_it() -> None:
    # 2026-03-29: Paris goes from 02:00 to 03:00; 02:30 does not exist that day.
    half_past_two = paris("30 2 * * *")
    tick = half_past_two.next_tick(at(2026, 3, 28, 12))
    assert tick.astimezone(PARIS) == at(2026, 3, 29, 3, 0, tz=PARIS)
    following = half_past_two.next_tick(tick)
    assert following.astimezone(PARIS) == at(2026, 3, 30, 2, 30, tz=PARIS)


def test_the_hour_repeated_in_autumn_ticks_at_both_instants() -> None:
    # 2026-10-25: Paris goes from 03:00 back to 02:00; 02:30 happens twice, an hour apart.
    hourly = paris("30 * * * *")
    ticks, now = [], at(2026, 10, 24, 23, 45)
    for _ in range(4):
        now = hourly.next_tick(now)
        ticks.append(now)
    assert ticks == [at(2026, 10, 25, h, 30) for h in (0, 1, 2, 3)]
    assert [t.astimezone(PARIS).hour for t in ticks] == [2, 2, 3, 4]
    # The latest tick of an instant inside the repeated hour is the right one of the two.
    assert hourly.latest_tick(at(2026, 10, 25, 1, 40)) == at(2026, 10, 25, 1, 30)


def test_a_payload_callable_gets_the_tick_in_the_schedule_zone() -> None:
    schedule = Schedule.declare(
        "0 9 * * *", tz="Europe/Paris", name="s", payload=lambda tick: {"day": tick.isoformat()}
    )
    assert schedule.payload_for(at(2026, 7, 10, 7)) == {"day": "2026-07-10T09:00:00+02:00"}


@pytest.mark.parametrize(
    ("expression", "tz", "says"),
    [
        ("61 * * * *", "UTC", "is not a cron expression"),
        ("every five minutes", "UTC", "is not a cron expression"),
        ("* * *", "UTC", "is not a cron expression"),
        ("*/5 * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("*/5 * * * *", "../etc/passwd", "unknown time zone"),
        ("*/5 * * * *", "", "tz must be an IANA zone name"),
    ],
)
def test_a_bad_expression_or_zone_is_refused_at_declaration(
    expression: str, tz: str, says: str
) -> None:
    with pytest.raises(InvalidSpec, match=says):

        @periodic(expression, tz=tz)
        def job(item: object) -> None: ...


def test_a_payload_that_is_neither_fields_nor_callable_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="payload must be a mapping"):
        periodic("* * * * *", payload=[1, 2])  # type: ignore[arg-type]


def test_stacked_schedules_are_kept_in_order_and_named() -> None:
    @periodic("0 * * * *", name="hourly")
    @periodic("*/5 * * * *")
    def job(item: object) -> None: ...

    first, second = schedules_of(job)
    assert first.name == "hourly" and first.tz == "UTC"
    assert second.name == f"{__name__}.{job.__qualname__}"


def test_two_schedules_of_one_name_on_a_handler_are_refused() -> None:
    with pytest.raises(InvalidSpec, match="already has a schedule named"):

        @periodic("0 * * * *")
        @periodic("*/5 * * * *")
        def job(item: object) -> None: ...


def test_a_queue_option_schedule_is_kept_as_a_tuple_in_order() -> None:
    sweep = periodic_schedule("*/5 * * * *", name="sweep", payload={"kind": "sweep"})
    nightly = periodic_schedule("0 3 * * *", name="nightly", tz="Europe/Paris")
    options = QueueOptions(schedule=[sweep, nightly])  # type: ignore[arg-type]
    assert options.schedule == (sweep, nightly)
    assert nightly.zone == PARIS and nightly.payload == {}


@pytest.mark.parametrize(
    ("declare", "says"),
    [
        (lambda: periodic_schedule("61 * * * *", name="s"), "is not a cron expression"),
        (lambda: periodic_schedule("* * * * *", name="s", tz="Mars/Base"), "unknown time zone"),
        (lambda: periodic_schedule("* * * * *", name="s", payload=3), "payload must be a mapping"),
        (lambda: periodic_schedule("* * * * *", name=""), "name must be 1 to 200 characters"),
    ],
)
def test_a_bad_queue_schedule_is_refused_where_it_is_written(
    declare: Callable[[], object], says: str
) -> None:
    with pytest.raises(InvalidSpec, match=says):
        declare()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ([periodic_schedule("* * * * *", name="s")] * 2, "two schedules are named 's'"),
        (periodic_schedule("* * * * *", name="s"), "must be a list of"),
        (["* * * * *"], "got an item '\\* \\* \\* \\* \\*'"),
        ("* * * * *", "must be a list of"),
    ],
)
def test_a_queue_option_schedule_that_is_not_a_list_of_distinct_schedules_is_refused(
    value: object, says: str
) -> None:
    with pytest.raises(InvalidSpec, match=says) as refused:
        options_from(
            {"schedule": value}, label="app.Job.QueueOptions", ring=False, aware_datetimes=True,
            ring_hint="",
        )  # fmt: skip
    assert str(refused.value).startswith("app.Job.QueueOptions: schedule must be") or str(
        refused.value
    ).startswith("app.Job.QueueOptions: schedule: two schedules")
