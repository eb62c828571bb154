"""``dbqueue``: run and administer the queues of a SQLAlchemy application from the shell.

::

    dbqueue worker --url URL myapp.handlers [--concurrency 4] [--burst]
    dbqueue stats  --url URL [myapp.models] [--json]
    dbqueue health --url URL [myapp.models] [--max-age SECONDS] [--health-file PATH] [--json]
    dbqueue schedules --url URL myapp.handlers [--json]
    dbqueue retry  --url URL --queue TABLE (--id ID ... | --all)
    dbqueue purge  --url URL --queue TABLE --state {ready,scheduled,leased,done,failed,all} [--yes]
    dbqueue archive --url URL --queue TABLE [--queue ...] --older-than 7d --to PATH

``--url`` defaults to the ``DBQUEUE_URL`` environment variable (which keeps a password off the
command line and out of ``ps``). Exit status: 0 done, 1 the database said no (a missing table,
no connection), 2 the command line was wrong (a bad URL or module, an unknown queue).

Every subcommand is a :class:`~dbqueue_sa.cli.common.Subcommand` in a module of this package,
listed in :data:`SUBCOMMANDS`: a name, its help, a function adding its arguments and a function
running it; adding one is adding a module and an entry there.
"""

from __future__ import annotations

import argparse
import os
import sys

from sqlalchemy.exc import DBAPIError

from dbqueue.commandline import render_table
from dbqueue.errors import DBQueueError
from dbqueue.progress import Progress
from dbqueue_sa.cli.archive import SUBCOMMAND as ARCHIVE
from dbqueue_sa.cli.cancel import SUBCOMMAND as CANCEL
from dbqueue_sa.cli.common import (
    EXIT_ERROR,
    URL_ENV,
    CommandError,
    Subcommand,
    configure_logging,
)
from dbqueue_sa.cli.health import SUBCOMMAND as HEALTH
from dbqueue_sa.cli.maintenance import PURGE, RETRY
from dbqueue_sa.cli.schedules import SUBCOMMAND as SCHEDULES
from dbqueue_sa.cli.stats import SUBCOMMAND as STATS
from dbqueue_sa.cli.work import SUBCOMMAND as WORKER

__all__ = [
    "SUBCOMMANDS",
    "CommandError",
    "Progress",
    "Subcommand",
    "build_parser",
    "main",
    "render_table",
]

SUBCOMMANDS: tuple[Subcommand, ...] = (
    WORKER,
    STATS,
    HEALTH,
    SCHEDULES,
    RETRY,
    CANCEL,
    PURGE,
    ARCHIVE,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``dbqueue`` argument parser, a subparser per entry of :data:`SUBCOMMANDS`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get(URL_ENV),
        help=f"the SQLAlchemy database URL (default: ${URL_ENV}); any driver, the command "
        f"connects with psycopg 3 or sqlite3",
    )
    common.add_argument(
        "-v",
        "--verbosity",
        type=int,
        choices=range(4),
        default=1,
        help="0 warnings only, 1 normal (a worker's summary every minute), 2 and 3 debugging "
        "(each batch a worker handles)",
    )
    parser = argparse.ArgumentParser(
        prog="dbqueue",
        description="Run and administer the dbqueue queues of a SQLAlchemy application.",
        epilog="Exit status: 0 done, 1 a database error (a missing table, no connection), 2 a "
        "usage error (a bad URL or module, an unknown queue).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        child = sub.add_parser(
            command.name, parents=[common], help=command.help, description=command.description
        )
        command.arguments(child)
        child.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``dbqueue`` with ``argv`` (default: the process's); return the exit status."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbosity)
    prefix = f"dbqueue {args.command}: error:"
    try:
        return int(args.run(args))
    except CommandError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return exc.code
    except DBQueueError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return EXIT_ERROR
    except DBAPIError as exc:
        # The driver's message, first line: SQLAlchemy's adds the statement and a link.
        detail = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        print(f"{prefix} database error: {detail[0] if detail else exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 128 + 2
