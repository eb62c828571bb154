"""``manage.py cancelqueueitem``: cancel items of a split queue by id (``Model.queue.cancel``)
and print what happened to each."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dbqueue.commandline import cancel_outcome_line
from dbqueue.errors import DBQueueError
from dbqueue_django.management.labels import (
    add_group_option,
    database_alias,
    group_queue,
    queue_model,
)


class Command(BaseCommand):
    help = (
        "Cancel items of a queue (app_label.Model) by id: a ready or scheduled item never "
        "runs; a leased one's handler is asked to stop, and its ack records it cancelled."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", metavar="app_label.Model")
        parser.add_argument("ids", metavar="ID", nargs="+", help="the items' ids")
        parser.add_argument(
            "--database", default=None, help="database alias (default: the router's choice)"
        )
        add_group_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        model = queue_model(options["queue"])
        alias = database_alias(options["database"])
        ids = [item_id(text) for text in options["ids"]]
        queue = group_queue(model, alias, options["group"])
        try:
            outcomes = queue.cancel(ids)
        except DBQueueError as exc:
            raise CommandError(str(exc)) from exc
        for number, outcome in outcomes.items():
            self.stdout.write(cancel_outcome_line(number, outcome))


def item_id(text: str) -> int:
    """An id from the command line, or a one-line CommandError."""
    try:
        number = int(text)
    except ValueError:
        raise CommandError(f"not an item id: {text!r} (ids are integers)") from None
    if number < 1:
        raise CommandError(f"not an item id: {text!r} (ids are positive)")
    return number
