"""``dbqueue cancel``: cancel items of a split queue by id, and print each one's outcome."""

from __future__ import annotations

import argparse

from dbqueue.commandline import cancel_outcome_line
from dbqueue_sa.cli.common import EXIT_OK, Subcommand, engine_for, find_queue, url_of


def _item_id(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an item id: {text!r} (ids are integers)") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"not an item id: {text!r} (ids are positive)")
    return number


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        required=True,
        metavar="TABLE",
        help="the queue, by its table name (a consumer group: TABLE[GROUP])",
    )
    parser.add_argument("ids", type=_item_id, nargs="+", metavar="ID", help="the items' ids")


def _run(args: argparse.Namespace) -> int:
    engine = engine_for(url_of(args))
    try:
        with engine.connect() as connection:
            queue = find_queue(connection, args.queue)
            with connection.begin():
                outcomes = queue.on(connection).cancel(args.ids)
    finally:
        engine.dispose()
    for number, outcome in outcomes.items():
        print(cancel_outcome_line(number, outcome))
    return EXIT_OK


SUBCOMMAND = Subcommand(
    "cancel",
    "cancel items of a queue by id",
    "Cancel items by id: a ready or scheduled item never runs; a leased one's handler is "
    "asked to stop (cancel_requested), and its ack records it cancelled. Ring queues have no "
    "cancellation.",
    _arguments,
    _run,
)
