"""``manage.py queueschedules``: the periodic schedules of the installed apps' handlers and of
the queues they serve (the queue option ``schedule``), each with its queue, the last tick a
worker pushed and the next one, as a table or JSON."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from dbqueue.schedule_listing import schedule_json, schedule_table
from dbqueue.schedules import Schedule, schedules_of
from dbqueue_django.handlers import autodiscover, handlers
from dbqueue_django.management.labels import database_alias
from dbqueue_django.schedule_rows import QueueSchedule


class Command(BaseCommand):
    help = (
        "List the periodic schedules of the installed apps' handlers (@periodic) and of their "
        "queues (QueueOptions.schedule): name, "
        "queue, cron expression, time zone, the last tick a worker pushed and the next one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database",
            default=None,
            help="database alias (default: each queue's, as the router chooses)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = database_alias(options["database"])
        autodiscover()
        declared: list[tuple[Schedule, str, str]] = []
        for (model, _), registered in handlers().items():
            queue = model.queue.using(alias) if alias else model.queue
            queue_declared = queue.spec.options.schedule
            for schedule in (*schedules_of(registered.func), *queue_declared):
                # A queue's own schedules once, whatever the number of its groups' handlers
                # (by equality: a schedule holds a dict, so it cannot be a key).
                if (schedule, model._meta.label, queue.alias) not in declared:
                    declared.append((schedule, model._meta.label, queue.alias))
        last_ticks: dict[str, dt.datetime | None] = {}
        for database in dict.fromkeys(d for _, _, d in declared):
            names = [s.name for s, _, d in declared if d == database]
            try:
                rows = QueueSchedule.objects.using(database).filter(name__in=names)
                last_ticks.update(rows.values_list("name", "last_tick"))
            except DatabaseError as exc:
                connections[database].close()
                raise CommandError(
                    f"the schedule table (dbqueue_django.QueueSchedule) could not be read in "
                    f"database {database!r} ({str(exc).strip().splitlines()[0]}); run manage.py "
                    f"migrate"
                ) from exc
        now = dt.datetime.now(dt.UTC)
        listed = schedule_json([(s, label) for s, label, _ in declared], last_ticks, now)
        for row, (_, _, database) in zip(listed, declared, strict=True):
            row["database"] = database
        if options["json"]:
            at = now.isoformat(timespec="seconds")
            self.stdout.write(json.dumps({"at": at, "schedules": listed}, indent=2))
        elif not listed:
            self.stdout.write("no handler has a periodic schedule")
        else:
            self.stdout.write(schedule_table(listed))
