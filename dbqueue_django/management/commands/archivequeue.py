"""``manage.py archivequeue``: the archive job (dbqueue.spark.archive) for queue models."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from dbqueue.commandline import archive_arguments
from dbqueue.conninfo import libpq_conninfo as conninfo_from_params
from dbqueue.errors import DBQueueError
from dbqueue_django.management.labels import database_alias, queue_model
from dbqueue_django.spec import spec_for_model


class Command(BaseCommand):
    help = (
        "Move the done and failed items of queue models that finished longer ago than "
        "--older-than to Parquet under --to (partitioned by queue and day) with Spark, then "
        "delete them in batches. Re-run after a crash to finish the interrupted run. Needs "
        "PostgreSQL and the spark extra."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="app_label.Model")
        parser.add_argument("--database", default="default", help="database alias (default)")
        archive_arguments(parser)

    def handle(self, *labels: str, **options: Any) -> None:
        tables = [spec_for_model(queue_model(label)).table for label in options["queues"]]
        info = libpq_conninfo(options["database"])
        try:
            from dbqueue.spark.archive_command import run_archive
        except ImportError as exc:
            raise CommandError(
                f"archivequeue runs on Spark: install the spark extra (pip install "
                f"'dbqueue[spark]'); {exc}"
            ) from None
        try:
            run_archive(
                info,
                tables,
                older_than=options["older_than"],
                to=options["to"],
                batch_size=options["batch_size"],
                master=options["master"],
                progress=options["verbosity"] > 0,
                out=self.stdout,
            )
        except DBQueueError as exc:
            raise CommandError(str(exc)) from exc


def libpq_conninfo(alias: str) -> str:
    """The libpq connection string of database ``alias``, from Django's own connection
    parameters (only the keywords libpq knows: Django adds psycopg-only ones)."""
    database_alias(alias)
    connection: BaseDatabaseWrapper = connections[alias]
    if connection.vendor != "postgresql":
        # The Spark source reads and writes with psycopg (COPY, SKIP LOCKED).
        raise CommandError(
            f"database {alias!r} is {connection.display_name}: the archive job runs on "
            f"PostgreSQL only"
        )
    return conninfo_from_params(connection.get_connection_params())
