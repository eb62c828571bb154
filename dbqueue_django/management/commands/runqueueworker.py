"""``manage.py runqueueworker``: run the handlers of queue models until stopped."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dbqueue.commandline import log_to_stderr, positive_float, positive_int
from dbqueue.errors import DBQueueError
from dbqueue_django.handlers import Handler, autodiscover, handlers
from dbqueue_django.management.labels import queue_model
from dbqueue_django.worker import build_worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class Command(BaseCommand):
    help = (
        "Process queue items with their @handler functions. Name queues as app_label.Model; "
        "with none named, every queue that has a handler. SIGTERM or Ctrl-C finishes the "
        "batches in hand and exits; a second one exits at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*", metavar="app_label.Model")
        parser.add_argument(
            "--concurrency", type=positive_int, default=1, help="worker threads (default 1)"
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=None,
            help="items per pop (default: each handler's batch_size, 100 unless set)",
        )
        parser.add_argument(
            "--burst", action="store_true", help="exit once no item is due (cron, tests)"
        )
        parser.add_argument(
            "--max-messages", type=positive_int, default=None, help="exit after this many items"
        )
        parser.add_argument(
            "--reconnect-for",
            type=positive_float,
            default=None,
            metavar="SECONDS",
            help="give up (exit 1) once the database stayed unreachable this long (default: "
            "60 with --burst, else never)",
        )
        parser.add_argument(
            "--database", default=None, help="database alias (default: the router's choice)"
        )
        parser.add_argument(
            "--log-level",
            default="INFO",
            choices=LOG_LEVELS,
            type=str.upper,
            help="level of the dbqueue logs on stderr (default INFO)",
        )

    def handle(self, *labels: str, **options: Any) -> None:
        log_to_stderr(options["log_level"])
        autodiscover()
        selected = self._select(options["queues"])
        worker = build_worker(
            selected,
            database=options["database"],
            concurrency=options["concurrency"],
            batch_size=options["batch_size"],
            burst=options["burst"],
            max_messages=options["max_messages"],
            reconnect_for=options["reconnect_for"],
        )
        try:
            stats = worker.run()
        except DBQueueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(stats.summary())

    def _select(self, labels: list[str]) -> list[Handler]:
        registered = handlers()
        if not labels:
            if not registered:
                raise CommandError(
                    "no queue has a handler: decorate a function with "
                    "@dbqueue_django.handler(YourQueueModel) in a handlers.py module of an "
                    "installed app"
                )
            return sorted(registered.values(), key=lambda h: h.model._meta.label)
        selected = []
        for label in dict.fromkeys(labels):
            model = queue_model(label)
            found = registered.get(model)
            if found is None:
                raise CommandError(
                    f"{label!r} has no handler: decorate a function with "
                    f"@dbqueue_django.handler({model.__name__}) in a handlers.py module"
                )
            selected.append(found)
        return selected
