"""``manage.py queuehealth``: exit 0 if a worker is alive for every queue and no queue's
backlog is too old, 1 with a line per problem otherwise (2: bad usage). For supervisors and
Kubernetes probes; see docs/howto/workers.md."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from dbqueue.commandline import health_arguments, positive_float
from dbqueue.errors import DBQueueError, QueueTableMissing
from dbqueue.health import UNHEALTHY, QueueHealth, health_json, problems
from dbqueue.worker.heartbeat import ALIVE_WITHIN
from dbqueue_django.handlers import autodiscover, handlers
from dbqueue_django.management.commands.queuestats import each_queue, first_line
from dbqueue_django.management.labels import database_alias, queue_model
from dbqueue_django.worker import handler_queue, queue_label
from dbqueue_django.worker_rows import LastBeat, last_beats

NO_HEARTBEATS = (
    "the workers' heartbeats (dbqueue_django.QueueWorker) could not be read ({error}); if the "
    "table is missing, run manage.py migrate"
)


class Command(BaseCommand):
    help = (
        "Exit 0 if every queue has a running worker whose heartbeat is recent and an oldest "
        "ready item younger than --max-age; else print a line per problem and exit 1 (2: bad "
        "usage). Name queues as app_label.Model; with none named, every queue with a handler."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*", metavar="app_label.Model")
        health_arguments(parser)
        parser.add_argument(
            "--max-heartbeat-age",
            type=positive_float,
            default=ALIVE_WITHIN.total_seconds(),
            metavar="SECONDS",
            help=f"a worker is alive if its last heartbeat is this recent (default "
            f"{ALIVE_WITHIN.total_seconds():.0f}; workers beat every few seconds)",
        )
        parser.add_argument(
            "--database",
            default=None,
            help="database alias (default: each queue's, as the router chooses)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            alias = database_alias(options["database"])
            models = self._select(options["queues"], alias)
        except CommandError as exc:  # bad usage: 2, apart from the 1 of unhealthy
            raise CommandError(str(exc), returncode=2) from exc
        within = dt.timedelta(seconds=options["max_heartbeat_age"])
        beats: dict[str, dict[str, LastBeat] | str] = {}
        found_queues = []
        for _, label, queue in models:
            if queue.alias not in beats:
                beats[queue.alias] = self._beats(queue.alias, within)
            found_queues.append(self._check(label, queue, beats[queue.alias]))
        found = problems(found_queues, dt.timedelta(seconds=options["max_age"]))
        if options["json"]:
            self.stdout.write(json.dumps(health_json(found_queues, found), indent=2))
        elif not found:
            names = ", ".join(q.name for q in found_queues)
            self.stdout.write(f"healthy: {names}")
        for problem in found if not options["json"] else ():
            self.stdout.write(f"unhealthy: {problem}")
        if found:
            raise SystemExit(UNHEALTHY)

    @staticmethod
    def _select(labels: list[str], alias: str | None) -> list[tuple[Any, str, Any]]:
        """(model, label, queue) of each queue to check: those named (each group of a queue
        with consumer groups), or those with a handler (a group's: that group)."""
        if labels:
            return each_queue([queue_model(label) for label in dict.fromkeys(labels)], alias)
        autodiscover()
        selected = sorted((handler_queue(h, alias) for h in handlers().values()), key=queue_label)
        if not selected:
            raise CommandError(
                "no queue has a handler, so no worker to check: name the queues (app_label.Model)"
            )
        return [(q.model, queue_label(q), q) for q in selected]

    @staticmethod
    def _beats(alias: str, within: dt.timedelta) -> dict[str, LastBeat] | str:
        """The last heartbeats per queue in ``alias``, or why they could not be read."""
        try:
            return last_beats(alias, within)
        except DatabaseError as exc:
            connections[alias].close()  # a broken connection must not serve the next query
            return NO_HEARTBEATS.format(error=first_line(exc))

    @staticmethod
    def _check(label: str, queue: Any, beats: dict[str, LastBeat] | str) -> QueueHealth:
        """The health of ``queue`` (labelled ``label``: ``app.Model`` or ``app.Model[group]``),
        from its stats and the heartbeats ``beats`` of its database."""
        alias = queue.alias
        name = f"{label}@{alias}"
        if isinstance(beats, str):
            return QueueHealth(name, error=beats)
        try:
            age = queue.stats()["oldest_ready_age"]
        except QueueTableMissing:
            return QueueHealth(name, error="its tables do not exist in this database; run migrate")
        except (DBQueueError, DatabaseError) as exc:
            connections[alias].close()
            return QueueHealth(name, error=first_line(exc))
        beat = beats.get(label, LastBeat(False, None))
        return QueueHealth(name, age, beat.recent, beat.seen_at)
