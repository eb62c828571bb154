"""``dbqueue retry`` and ``dbqueue purge``: batches in transactions of their own, with progress."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from dbqueue.commandline import positive_int
from dbqueue.front import FrontQueue
from dbqueue.message import StateSelector
from dbqueue.progress import Progress
from dbqueue_sa.cli.common import (
    DEFAULT_BATCH,
    EXIT_ERROR,
    EXIT_OK,
    Subcommand,
    engine_for,
    find_queue,
    url_of,
)
from dbqueue_sa.discovery import count_items, in_batches
from dbqueue_sa.tables import core_dialect_of


def _batch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        required=True,
        metavar="TABLE",
        help="the queue, by its table name (a consumer group: TABLE[GROUP])",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"items per transaction (default {DEFAULT_BATCH:,})",
    )


def _retry_arguments(parser: argparse.ArgumentParser) -> None:
    _batch_arguments(parser)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--id",
        dest="ids",
        type=int,
        action="extend",
        nargs="+",
        metavar="ID",
        help="the failed items to retry (ring queues: message numbers)",
    )
    which.add_argument("--all", action="store_true", help="retry every failed item")


def _run_retry(args: argparse.Namespace) -> int:
    engine = engine_for(url_of(args))
    try:
        with engine.connect() as connection:
            queue = find_queue(connection, args.queue)
            core = queue.core(connection)
            if args.ids:
                wanted = len(set(args.ids))
                with connection.begin():
                    retried = queue.on(connection).retry(args.ids)
            else:
                spans = count_items(connection, [queue.failed_items()])
                wanted = sum(s.total for s in spans)
                if not wanted:
                    print(f"no failed items in {queue.name}: nothing to retry")
                    return EXIT_OK
                progress = Progress("retried", wanted, sys.stderr, enabled=args.verbosity > 0)
                retried = in_batches(
                    connection, core, spans, FrontQueue.retry, progress.add, args.batch_size
                )
                progress.finish()
    finally:
        engine.dispose()
    print(f"retried {retried:,} of {wanted:,} item(s) of {queue.name}")
    if retried < wanted:
        why = "were not failed items" + (" or found no free slot" if queue.ring else "")
        print(f"{wanted - retried:,} item(s) {why}: they were left as they were", file=sys.stderr)
    return EXIT_OK


PURGE_STATES = (*(s.value for s in StateSelector), "all")


def _purge_arguments(parser: argparse.ArgumentParser) -> None:
    _batch_arguments(parser)
    parser.add_argument(
        "--state",
        required=True,
        choices=PURGE_STATES,
        help="which items to delete: ready ones are due now, scheduled ones due later (ring "
        "queues: ready and leased are full and leased slots and the side table's, scheduled "
        "and failed the side table's; they have no done items)",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _confirm(question: str) -> bool:
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()  # "" at the end of input: no
    if not sys.stdin.isatty():  # the answer was not echoed: end the question's line
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _run_purge(args: argparse.Namespace) -> int:
    state = None if args.state == "all" else StateSelector.parse(args.state)
    what = "" if state is None else f"{args.state} "
    engine = engine_for(url_of(args))
    try:
        with engine.connect() as connection:
            queue = find_queue(connection, args.queue)
            now = core_dialect_of(connection.dialect).time_param(dt.datetime.now(dt.UTC))
            spans = count_items(connection, queue.in_state(state, now))
            total = sum(s.total for s in spans)
            if not total:
                print(f"no {what}items in {queue.name}: nothing to purge")
                return EXIT_OK
            question = f"Delete {total:,} {what}item(s) of queue {queue.name!r}?"
            if not args.yes and not _confirm(question):
                print("aborted: nothing was deleted", file=sys.stderr)
                return EXIT_ERROR
            core = queue.core(connection)
            progress = Progress("purged", total, sys.stderr, enabled=args.verbosity > 0)
            purged = in_batches(
                connection, core, spans, FrontQueue.delete, progress.add, args.batch_size
            )
            progress.finish()
    finally:
        engine.dispose()
    print(f"purged {purged:,} {what}item(s) of {queue.name}")
    return EXIT_OK


RETRY = Subcommand(
    "retry",
    "put failed items back in their queue",
    "Failed items back to ready with their attempts reset (a ring queue pushes them again "
    "at its tail while it has free slots). --all works in batches and shows its progress.",
    _retry_arguments,
    _run_retry,
)

PURGE = Subcommand(
    "purge",
    "delete the items of a queue in one state",
    "Delete every item of a queue in one state, in batches, showing the progress; asks "
    "for confirmation unless --yes.",
    _purge_arguments,
    _run_purge,
)
