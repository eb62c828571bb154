"""``manage.py queuestats``: each queue's counts per state, the age of its oldest ready item
and its throughput over the last minute, as a table or JSON, once or every few seconds."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from dbqueue.commandline import positive_float, render_table, spilled_text, stats_json
from dbqueue.errors import DBQueueError, QueueTableMissing
from dbqueue.message import format_age
from dbqueue.worker.heartbeat import ALIVE_WITHIN
from dbqueue_django.management.labels import database_alias, named_queue_models
from dbqueue_django.models import BaseQueueModel
from dbqueue_django.spec import groups_of
from dbqueue_django.worker_rows import QueueThroughput, live_throughput

COLUMNS = (
    "queue", "database", "layout", "ready", "scheduled", "leased", "failed", "done",
    "spilled", "oldest ready", "handled/min", "workers",
)  # fmt: skip
#: Clears a terminal and puts the cursor top left: --watch redraws the table in place.
CLEAR = "\x1b[H\x1b[2J"
MISSING = "its tables do not exist in this database"
NO_HEARTBEATS = (
    "the workers' heartbeat table (dbqueue_django.QueueWorker) does not exist in database "
    "{alias!r}; run manage.py migrate"
)


def each_queue(
    models: list[type[BaseQueueModel]], alias: str | None
) -> list[tuple[type[BaseQueueModel], str, Any]]:
    """(model, label, queue) for each queue of ``models`` on ``alias`` (default: the
    router's): a model's queue, or for a queue with consumer groups each group's, labelled
    ``app.Model[group]`` as the workers' heartbeats name it."""
    out: list[tuple[type[BaseQueueModel], str, Any]] = []
    for model in models:
        queue: Any = model.queue.using(alias) if alias else model.queue
        groups = groups_of(model)
        if not groups:
            out.append((model, model._meta.label, queue))
        for group in groups:
            out.append((model, f"{model._meta.label}[{group}]", queue.group(group)))
    return out


class Command(BaseCommand):
    help = (
        "Show each queue's items per state (ready: due now, scheduled: due later), the age "
        "of its oldest ready item and its throughput: the items its workers handled over the "
        "last minute, from the heartbeats of the workers seen in the last "
        f"{ALIVE_WITHIN.seconds} s. Name queues as app_label.Model; with none named, every "
        "queue."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*", metavar="app_label.Model")
        parser.add_argument(
            "--database",
            default=None,
            help="database alias (default: each queue's, as the router chooses)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument(
            "--watch",
            type=positive_float,
            default=None,
            metavar="SECONDS",
            help="show the numbers again every SECONDS until Ctrl-C (a table redrawn in place; "
            "with --json, one JSON document a line)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        models = named_queue_models(options["queues"])
        alias = database_alias(options["database"])
        watch: float | None = options["watch"]
        if watch is None:
            try:
                rows = self._rows(models, alias)
            except DatabaseError as exc:
                raise CommandError(f"database error: {first_line(exc)}") from exc
            self._show(rows, options["json"], indent=2)
            failed = [f"{r['queue']} (database {r['database']!r})" for r in rows if "error" in r]
            if failed:
                errors = rows_error(rows)
                hint = "; run manage.py migrate" if MISSING in errors else ""
                raise CommandError(f"no stats for {', '.join(failed)}: {errors}{hint}")
            return
        try:
            while True:
                try:
                    rows = self._rows(models, alias)
                except DatabaseError as exc:  # the database went away: try again next time
                    self.stderr.write(f"database error: {first_line(exc)}")
                    for connection in connections.all(initialized_only=True):
                        connection.close()  # a broken connection must not serve the next try
                else:
                    if not options["json"] and self.stdout.isatty():
                        self.stdout.write(CLEAR, ending="")
                    self._show(rows, options["json"], indent=None)
                self.stdout.flush()
                time.sleep(watch)
        except KeyboardInterrupt:
            return

    def _rows(self, models: list[type[BaseQueueModel]], alias: str | None) -> list[dict[str, Any]]:
        """A row per queue: its stats and throughput, or the error that kept them from it."""
        throughputs: dict[str, dict[str, QueueThroughput] | None] = {}
        rows: list[dict[str, Any]] = []
        for model, label, queue in each_queue(models, alias):
            database = queue.alias
            row: dict[str, Any] = {
                "queue": label,
                "database": database,
                "layout": model.queue_layout,
            }
            try:
                stats = queue.stats()
            except QueueTableMissing:
                rows.append({**row, "error": MISSING})
                continue
            except DBQueueError as exc:  # a database dbqueue does not support, say
                rows.append({**row, "error": str(exc)})
                continue
            if database not in throughputs:
                throughputs[database] = self._throughput(database)
            live = throughputs[database]
            done = None if live is None else live.get(label, QueueThroughput(0, 0, 0))
            rows.append(
                {
                    **row,
                    **stats_json(stats),
                    "handled_last_minute": None if done is None else done.handled,
                    "failed_last_minute": None if done is None else done.failed,
                    "workers": None if done is None else done.workers,
                }
            )
        return rows

    def _throughput(self, alias: str) -> dict[str, QueueThroughput] | None:
        """The live workers' throughput per queue in ``alias``; None (and a note) where the
        heartbeat table is missing."""
        try:
            return live_throughput(alias)
        except DatabaseError:
            connections[alias].close()  # a broken connection must not serve the next query
            self.stderr.write(NO_HEARTBEATS.format(alias=alias))
            return None

    def _show(self, rows: list[dict[str, Any]], as_json: bool, indent: int | None) -> None:
        if as_json:
            at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            self.stdout.write(json.dumps({"at": at, "queues": rows}, indent=indent))
        elif not rows:
            self.stdout.write("no queue models are installed")
        else:
            self.stdout.write(render_table(COLUMNS, [text_row(r) for r in rows], left=3))


def text_row(row: dict[str, Any]) -> list[str]:
    """A row of the table: the counts with thousands separators, "-" for what is unknown."""
    head = [row["queue"], row["database"], row["layout"]]
    if "error" in row:
        return [*head, *["?"] * (len(COLUMNS) - len(head))]
    counts = [f"{row[k]:,}" for k in ("ready", "scheduled", "leased", "failed", "done")]
    age = row["oldest_ready_age"]
    live = [row[k] for k in ("handled_last_minute", "workers")]
    return [
        *head,
        *counts,
        spilled_text(row),
        format_age(None if age is None else dt.timedelta(seconds=age)),
        *("-" if n is None else f"{n:,}" for n in live),
    ]


def rows_error(rows: list[dict[str, Any]]) -> str:
    """The errors of the rows that have one, each said once."""
    return "; ".join(dict.fromkeys(r["error"] for r in rows if "error" in r))


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
