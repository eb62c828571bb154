"""``manage.py runqueueworker``: run the handlers of queue models until stopped."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import autoreload

from dbqueue.commandline import (
    log_to_stderr,
    positive_float,
    positive_int,
    worker_ops_arguments,
)
from dbqueue.errors import DBQueueError
from dbqueue.worker import Worker
from dbqueue_django.handlers import Handler, autodiscover, handlers
from dbqueue_django.management.labels import database_alias, queue_model
from dbqueue_django.worker import build_worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: The exit status with which Django's autoreloader asks for a restart.
RELOAD_EXIT = 3


def select_groups(selected: list[Handler], groups: list[str]) -> list[Handler]:
    """The handlers of ``selected`` that serve one of ``groups`` (``--group``), or a
    CommandError for a group none of the selected queues has a handler for."""
    served = {h.group for h in selected}
    missing = [g for g in dict.fromkeys(groups) if g not in served]
    if missing:
        known = sorted(g for g in served if g is not None)
        raise CommandError(
            f"no selected queue has a handler for the consumer group(s) {', '.join(missing)}"
            + (f"; their groups: {', '.join(known)}" if known else "; they have no groups")
        )
    return [h for h in selected if h.group in groups]


class Command(BaseCommand):
    help = (
        "Process queue items with their @handler functions. Name queues as app_label.Model; "
        "with none named, every queue that has a handler. SIGTERM or Ctrl-C finishes the "
        "batches in hand and exits; a second one exits at once, and so does the first one, "
        "with status 1, while the database is unreachable."
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
            "--group",
            action="append",
            default=None,
            metavar="NAME",
            help="only the handlers of this consumer group of the queues (repeatable; default: "
            "every group's)",
        )
        worker_ops_arguments(parser)
        parser.add_argument(
            "--log-level",
            default="INFO",
            choices=LOG_LEVELS,
            type=str.upper,
            help="level of the dbqueue logs on stderr (default INFO)",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="restart the worker when a source file changes, as runserver does "
            "(development only)",
        )

    def handle(self, *labels: str, **options: Any) -> None:
        log_to_stderr(options["log_level"])
        database_alias(options["database"])
        if options["reload"] and (options["burst"] or options["max_messages"]):
            raise CommandError(
                "--reload restarts a worker that runs until it is stopped: it does not go with "
                "--burst or --max-messages"
            )
        if not options["reload"]:
            self._run(self._worker(options))
            return
        if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) != "true":
            # The reloader's first process: check the options before it starts a child. Ctrl-C
            # reaches the child too (one process group); left alone, this process would kill it
            # a quarter of a second later (subprocess.run), before its worker stopped cleanly.
            self._worker(options)
            signal.signal(signal.SIGINT, lambda signum, frame: None)
        self._run_reloading(options)

    def _worker(self, options: dict[str, Any]) -> Worker:
        """The worker the options ask for, or a CommandError saying what is wrong."""
        autodiscover()
        selected = self._select(options["queues"])
        if options["group"]:
            selected = select_groups(selected, options["group"])
        try:
            return build_worker(
                selected,
                database=options["database"],
                concurrency=options["concurrency"],
                batch_size=options["batch_size"],
                burst=options["burst"],
                max_messages=options["max_messages"],
                reconnect_for=options["reconnect_for"],
                summary_every=options["summary_every"],
                health_file=options["health_file"],
                metrics_port=options["metrics_port"],
            )
        except DBQueueError as exc:  # a database dbqueue does not support, a bad declaration
            raise CommandError(str(exc)) from exc

    def _run(self, worker: Worker, *, handle_signals: bool = True) -> None:
        try:
            stats = worker.run(handle_signals=handle_signals)
        except DBQueueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(stats.summary())

    def _run_reloading(self, options: dict[str, Any]) -> None:
        """Run under Django's autoreloader, as runserver does: the first process starts this
        command again as a child, and again each time the child exits with RELOAD_EXIT. In
        the child the worker runs in the reloader's thread while this one watches the source
        files; a change, Ctrl-C or SIGTERM ends it (a change with RELOAD_EXIT), after the
        worker finished the items it started and released the rest."""
        serving: list[tuple[threading.Thread, Worker]] = []

        def serve() -> None:
            try:
                worker = self._worker(options)  # the handlers as the code is now
                serving.append((threading.current_thread(), worker))
                self._run(worker, handle_signals=False)  # signals go to the watching thread
            except CommandError as exc:
                self.stderr.write(f"Error: {exc}\nWaiting for a source file to change.")

        try:
            autoreload.run_with_reloader(serve)
        except SystemExit as exc:
            if exc.code == RELOAD_EXIT:
                self.stderr.write("A source file changed: restarting the worker.")
            raise
        finally:
            for thread, worker in serving:
                worker.stop(release_unstarted=True)
                thread.join()

    def _select(self, labels: list[str]) -> list[Handler]:
        registered = handlers()
        if not labels:
            if not registered:
                raise CommandError(
                    "no queue has a handler: decorate a function with "
                    "@dbqueue_django.handler(YourQueueModel) in a handlers.py module of an "
                    "installed app"
                )
            return sorted(registered.values(), key=lambda h: (h.model._meta.label, h.group or ""))
        selected = []
        for label in dict.fromkeys(labels):
            model = queue_model(label)
            found = [h for (m, _), h in registered.items() if m is model]
            if not found:
                raise CommandError(
                    f"{label!r} has no handler: decorate a function with "
                    f"@dbqueue_django.handler({model.__name__}) in a handlers.py module"
                )
            selected.extend(found)
        return selected
