"""``dbqueue stats``: a table of every queue's counts."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

import sqlalchemy as sa

from dbqueue.commandline import render_table, spilled_text, stats_json
from dbqueue.errors import QueueTableMissing
from dbqueue.message import format_age
from dbqueue_sa.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    MISSING_HINT,
    Subcommand,
    engine_for,
    import_modules,
    url_of,
)
from dbqueue_sa.discovery import FoundQueue, declared, discover
from dbqueue_sa.mixins import queue_classes


def _stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "modules",
        nargs="*",
        metavar="MODULE",
        help="modules declaring the queue classes to report on (default: every queue found "
        "in the database)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def queue_stats(connection: sa.Connection, queue: FoundQueue) -> dict[str, Any] | None:
    """The front layer's ``stats()`` of ``queue``; None when its tables do not exist."""
    try:
        with connection.begin():
            return queue.on(connection).stats()
    except QueueTableMissing:
        return None


def _stats_row(queue: FoundQueue, stats: dict[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"queue": queue.name, "layout": queue.layout}
    if stats is None:
        return {**row, "error": "its tables do not exist in this database"}
    return {**row, **stats_json(stats)}


def _format_seconds(seconds: float | None) -> str:
    return format_age(None if seconds is None else dt.timedelta(seconds=seconds))


STATS_COLUMNS = (
    "queue", "layout", "ready", "scheduled", "leased", "expired", "done", "failed", "spilled",
    "oldest ready", "capacity", "occupancy",
)  # fmt: skip


def _text_row(row: dict[str, Any]) -> list[str]:
    if "error" in row:
        return [row["queue"], row["layout"], *["?"] * (len(STATS_COLUMNS) - 2)]
    counts = [f"{row[k]:,}" for k in ("ready", "scheduled", "leased", "expired", "done")]
    occupancy = row["occupancy"]
    return [
        row["queue"],
        row["layout"],
        *counts,
        f"{row['failed']:,}",
        spilled_text(row),
        _format_seconds(row["oldest_ready_age"]),
        "-" if row["capacity"] is None else f"{row['capacity']:,}",
        "-" if occupancy is None else f"{occupancy:.1%}",
    ]


def stats_of_queues(args: argparse.Namespace) -> list[tuple[FoundQueue, dict[str, Any] | None]]:
    """Each queue the command names (those its ``modules`` declare, or every queue in the
    database) with its stats (None: its tables are missing), read on one connection."""
    url = url_of(args)
    if args.modules:
        import_modules(args.modules, args.verbosity)
    engine = engine_for(url)
    try:
        with engine.connect() as connection:
            queues = declared(queue_classes()) if args.modules else discover(connection)
            return [(q, queue_stats(connection, q)) for q in queues]
    finally:
        engine.dispose()


def _run_stats(args: argparse.Namespace) -> int:
    rows = [_stats_row(q, stats) for q, stats in stats_of_queues(args)]
    if args.json:
        print(json.dumps({"queues": rows}, indent=2))
    elif not rows:
        print("no queues found" + ("" if args.modules else " in this database"))
    else:
        print(render_table(STATS_COLUMNS, [_text_row(r) for r in rows]))
    missing = [r["queue"] for r in rows if "error" in r]
    if missing:
        print(
            f"dbqueue stats: the tables of {', '.join(missing)} do not exist in this "
            f"database; {MISSING_HINT}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_OK


SUBCOMMAND = Subcommand(
    "stats",
    "counts per state of every queue",
    "A table of every queue in the database (or of those the MODULEs declare): items per "
    "state, the age of the oldest ready item, a ring's capacity and occupancy.",
    _stats_arguments,
    _run_stats,
)
