"""``dbqueue archive``: move done and failed items older than a cut-off to Parquet with Spark,
then delete them in batches (:mod:`dbqueue.spark.archive`; needs the ``spark`` extra)."""

from __future__ import annotations

import argparse
import sys

import psycopg

from dbqueue.commandline import archive_arguments
from dbqueue.errors import InvalidArgument, InvalidSpec, QueueTableMissing, UnsupportedDatabase
from dbqueue_sa.cli.common import EXIT_ERROR, EXIT_OK, URL_ENV, CommandError, Subcommand


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        dest="queues",
        action="append",
        required=True,
        metavar="TABLE",
        help="a queue to archive, by table name (repeat for more; archived one after another)",
    )
    archive_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    if not args.url:
        raise CommandError(f"no database: pass --url URL or set {URL_ENV}")
    try:
        from pyspark.errors import PySparkException

        from dbqueue.spark.archive_command import run_archive
    except ImportError as exc:
        raise CommandError(
            f"dbqueue archive runs on Spark: install the spark extra (pip install "
            f"'dbqueue[spark]'); {exc}"
        ) from None
    try:
        run_archive(
            args.url,
            args.queues,
            older_than=args.older_than,
            to=args.to,
            batch_size=args.batch_size,
            master=args.master,
            progress=args.verbosity > 0,
            out=sys.stdout,
        )
    except (InvalidArgument, InvalidSpec, QueueTableMissing, UnsupportedDatabase) as exc:
        raise CommandError(str(exc)) from None  # the command line named something wrong
    except (psycopg.Error, PySparkException) as exc:
        raise CommandError(f"{type(exc).__name__}: {_first_line(exc)}", EXIT_ERROR) from None
    return EXIT_OK


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else repr(exc)


SUBCOMMAND = Subcommand(
    "archive",
    "move done and failed items older than a cut-off to Parquet (Spark)",
    "Write the done and failed items of each queue that finished before now - "
    "--older-than (the database's clock) to Parquet under --to, partitioned by queue and "
    "day, check the count, then delete them in batches of --batch-size. Re-run after a crash "
    "to finish the interrupted run. Needs the spark extra.",
    _arguments,
    _run,
)
