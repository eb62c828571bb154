"""``dbqueue schedules``: the periodic schedules of the handlers in the named modules and of
their queues (the queue option ``schedule``), each with its queue, the last tick a worker
pushed and the next one."""

from __future__ import annotations

import argparse
import datetime as dt
import json

from sqlalchemy.exc import DBAPIError

from dbqueue.schedule_listing import schedule_json, schedule_table
from dbqueue.schedules import Schedule, schedules_of
from dbqueue_sa.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    CommandError,
    Subcommand,
    engine_for,
    import_modules,
    url_of,
)
from dbqueue_sa.handlers import handlers
from dbqueue_sa.schedules import last_ticks


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "modules",
        nargs="+",
        metavar="MODULE",
        help="modules declaring the handlers (what dbqueue worker is given)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _run(args: argparse.Namespace) -> int:
    url = url_of(args)
    import_modules(args.modules, args.verbosity)
    declared: list[tuple[Schedule, str]] = []
    for (model, _), registered in handlers().items():
        for schedule in (*schedules_of(registered.func), *model.__queue_spec__.options.schedule):
            # A queue's own schedules once, whatever the number of its groups' handlers (by
            # equality: a schedule holds a dict, so it cannot be a key).
            if (schedule, model.__queue_spec__.table) not in declared:
                declared.append((schedule, model.__queue_spec__.table))
    engine = engine_for(url)
    try:
        with engine.connect() as connection:
            try:
                ticks = last_ticks(connection)
            except DBAPIError as exc:
                raise CommandError(
                    "the schedule table (dbqueue_schedule) could not be read: "
                    f"{str(exc.orig or exc).strip().splitlines()[0]}; declare it with "
                    "dbqueue_sa.schedule_table(metadata) and create it (create_all, or an "
                    "Alembic migration)",
                    code=EXIT_ERROR,
                ) from exc
    finally:
        engine.dispose()
    now = dt.datetime.now(dt.UTC)
    listed = schedule_json(declared, ticks, now)
    if args.json:
        print(json.dumps({"at": now.isoformat(timespec="seconds"), "schedules": listed}, indent=2))
    elif not listed:
        print("no handler in these modules has a periodic schedule")
    else:
        print(schedule_table(listed))
    return EXIT_OK


SUBCOMMAND = Subcommand(
    "schedules",
    "the periodic schedules of the handlers, with their last and next run",
    "A table of the periodic schedules of the handlers the MODULEs declare (@periodic) and of "
    "their queues (the queue option schedule): name, queue, "
    "cron expression, time zone, the last tick a worker pushed and the next one.",
    _arguments,
    _run,
)
