"""``manage.py purgequeue``: delete a queue's items in one state, optionally only the old
ones, after asking (``Model.queue.purge``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dbqueue.errors import DBQueueError
from dbqueue.message import StateSelector
from dbqueue_django.durations import duration_option
from dbqueue_django.management.labels import (
    add_group_option,
    database_alias,
    group_queue,
    queue_model,
)

#: What an item's age counts from, by state (see dbqueue.message.StateSelector).
AGED_BY = {
    StateSelector.READY: "pushed",
    StateSelector.SCHEDULED: "pushed",
    StateSelector.LEASED: "pushed",
    StateSelector.DONE: "done",
    StateSelector.FAILED: "failed",
    StateSelector.CANCELLED: "cancelled",
}


class Command(BaseCommand):
    help = (
        "Delete the items of a queue (app_label.Model) in one state: ready (due now), "
        "scheduled (due later), leased, failed, done or cancelled. With --older-than, only "
        "those pushed longer ago (done, failed and cancelled items: finished longer ago). "
        "Asks first unless --noinput."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", metavar="app_label.Model")
        parser.add_argument(
            "--state",
            required=True,
            choices=[s.value for s in StateSelector],
            help="which items to delete",
        )
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            default=None,
            help="only items pushed longer ago than this (done and failed items: finished "
            "longer ago), by the database's clock: 90s, 30m, 12h, 7d, 2w",
        )
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help="do not ask for confirmation",
        )
        parser.add_argument(
            "--database", default=None, help="database alias (default: the router's choice)"
        )
        add_group_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        model = queue_model(options["queue"])
        alias = database_alias(options["database"])
        state = StateSelector(options["state"])
        older_than = None
        if options["older_than"] is not None:
            older_than = duration_option(options["older_than"])
        queue = group_queue(model, alias, options["group"])
        group = options["group"]
        label = model._meta.label if group is None else f"{model._meta.label}[{group}]"
        what = describe(state, label, queue.alias, options["older_than"])
        try:
            count = queue.count(state, older_than=older_than)
            if not count:
                self.stdout.write(f"No {what}: nothing to purge.")
                return
            question = f"You are about to delete {count:,} {what}."
            if options["interactive"] and not confirm(question):
                self.stdout.write("Purge cancelled: nothing was deleted.")
                return
            deleted = queue.purge(state, older_than=older_than)
        except DBQueueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Deleted {deleted:,} {what}.")


def describe(state: StateSelector, label: str, alias: str, older_than: str | None) -> str:
    """``failed items of shop.Job (database 'default') failed more than 7d ago``."""
    age = "" if older_than is None else f" {AGED_BY[state]} more than {older_than.strip()} ago"
    return f"{state} items of {label} (database {alias!r}){age}"


def confirm(question: str) -> bool:
    """Ask, as Django's own commands do; the end of input is a no."""
    try:
        answer = input(f"{question}\nType 'yes' to continue, or 'no' to cancel: ")
    except EOFError:
        return False
    return answer.strip().lower() == "yes"
