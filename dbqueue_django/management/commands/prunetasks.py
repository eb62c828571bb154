"""``manage.py prunetasks``: delete the results of Django Tasks that finished long ago."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from dbqueue_django.durations import add_older_than_argument, duration_option
from dbqueue_django.task_results import FinishedTasks


class Command(BaseCommand):
    help = (
        "Delete the results of tasks (dbqueue's Tasks backend) that finished longer ago than "
        "--older-than, with the queue items of the failed ones, which can then no longer be "
        "retried. A task retried since is kept. The backend's result_retention option has the "
        "worker do this by itself."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_older_than_argument(
            parser, what="delete the results of tasks that finished longer ago than this"
        )
        parser.add_argument(
            "--backend",
            default=None,
            metavar="ALIAS",
            help="only the tasks of this TASKS backend alias (default: of every one)",
        )
        parser.add_argument(
            "--database",
            default=None,
            help="database alias (default: the router's choice for the task tables)",
        )
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help="delete without asking first",
        )

    def handle(self, **options: Any) -> None:
        older_than = duration_option(options["older_than"])
        database = options["database"]
        if database is not None and database not in connections:
            raise CommandError(f"--database: {database!r} is not a database alias of DATABASES")
        tasks = FinishedTasks.older_than(older_than, using=database, backend=options["backend"])
        before = f"{tasks.cutoff:%Y-%m-%d %H:%M:%S %Z}"
        found = tasks.count()
        if not found.results and not found.failed_tasks:
            self.stdout.write(f"No task finished before {before}.")
            return
        if options["interactive"]:
            answer = input(
                f"This deletes {found} that finished before {before} from the database "
                f"{tasks.using!r}. Type 'yes' to continue, or 'no' to cancel: "
            )
            if answer != "yes":
                self.stdout.write("Cancelled: nothing deleted.")
                return
        pruned = tasks.delete()
        self.stdout.write(f"Deleted {pruned} that finished before {before}.")
