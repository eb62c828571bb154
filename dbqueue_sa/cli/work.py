"""``dbqueue worker``: run the handlers the application's modules register."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dbqueue.commandline import positive_float, positive_int, worker_ops_arguments
from dbqueue.metrics import require_prometheus
from dbqueue_sa.cli.common import (
    EXIT_OK,
    CommandError,
    Subcommand,
    import_modules,
    url_of,
)
from dbqueue_sa.handlers import Handler, handlers
from dbqueue_sa.mixins import queue_classes
from dbqueue_sa.worker import build_worker


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "modules",
        nargs="+",
        metavar="MODULE",
        help="modules to import: they define the queue classes and their @handler functions",
    )
    parser.add_argument(
        "--queue",
        action="append",
        metavar="TABLE",
        help="run only this queue, by table name (repeat for more; default: every queue with "
        "a handler)",
    )
    parser.add_argument(
        "--group",
        action="append",
        metavar="NAME",
        help="run only the handlers of this consumer group (repeat for more; default: every "
        "handler of the selected queues)",
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker threads (default 1)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="items per pop (default: each handler's batch_size, 100 unless set)",
    )
    parser.add_argument(
        "--burst", action="store_true", help="exit once no item is due (cron jobs, tests)"
    )
    parser.add_argument(
        "--max-messages",
        type=positive_int,
        default=None,
        metavar="N",
        help="exit after this many items",
    )
    parser.add_argument(
        "--reconnect-for",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="give up (exit 1) once the database stayed unreachable this long (default: 60 "
        "with --burst, else never)",
    )
    worker_ops_arguments(parser)


def _select(tables: Sequence[str] | None) -> list[Handler]:
    registered = sorted(handlers().values(), key=lambda h: h.model.__queue_spec__.table)
    if not registered:
        raise CommandError(
            "the modules register no handler: decorate a function with "
            "@dbqueue_sa.handler(YourQueueClass) in one of them"
        )
    if not tables:
        return registered
    by_table: dict[str, list[Handler]] = {}
    for h in registered:
        by_table.setdefault(h.model.__queue_spec__.table, []).append(h)
    classes = {cls.__queue_spec__.table: cls for cls in queue_classes()}
    selected = []
    for table in dict.fromkeys(tables):
        if table in by_table:
            selected.extend(by_table[table])
        elif table in classes:
            raise CommandError(
                f"queue {table!r} has no handler: decorate a function with "
                f"@dbqueue_sa.handler({classes[table].__name__})"
            )
        else:
            raise CommandError(
                f"unknown queue {table!r}: the modules declare no queue class with that table "
                f"(queues with a handler: {', '.join(by_table)})"
            )
    return selected


def _select_groups(selected: list[Handler], groups: Sequence[str] | None) -> list[Handler]:
    """The handlers of ``selected`` whose consumer group is one of ``groups`` (all of them
    without ``--group``); CommandError for a group no selected queue has."""
    if not groups:
        return selected
    known = {g for h in selected for g in h.model.__queue_spec__.options.groups}
    unknown = [g for g in dict.fromkeys(groups) if g not in known]
    if unknown:
        raise CommandError(
            f"unknown consumer group {', '.join(map(repr, unknown))}: no selected queue has it "
            f"(their groups: {', '.join(sorted(known)) or 'none'})"
        )
    return [h for h in selected if h.group in groups]


def _run_worker(args: argparse.Namespace) -> int:
    if args.metrics_port is not None:
        require_prometheus()  # before connecting to anything
    url = url_of(args)
    import_modules(args.modules, args.verbosity)
    worker = build_worker(
        _select_groups(_select(args.queue), args.group),
        url=url,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        burst=args.burst,
        max_messages=args.max_messages,
        reconnect_for=args.reconnect_for,
        summary_every=args.summary_every,
        health_file=args.health_file,
        metrics_port=args.metrics_port,
    )
    # Signals: the first SIGTERM or SIGINT finishes the batches in hand, a second exits now.
    stats = worker.run()
    print(stats.summary())
    return EXIT_OK


SUBCOMMAND = Subcommand(
    "worker",
    "process queue items with their @handler functions",
    "Import the MODULEs, then run the handlers they register until stopped. SIGTERM or "
    "Ctrl-C finishes the batches in hand and exits 0; a second one exits at once (leases "
    "bring the unfinished items back), and so does the first one, with status 1, while the "
    "database is unreachable.",
    _worker_arguments,
    _run_worker,
)
