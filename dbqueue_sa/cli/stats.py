"""``dbqueue stats``: a table of every queue's counts."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from dbqueue.errors import QueueTableMissing
from dbqueue.message import QueueStats, format_age
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
from dbqueue_sa.executor import SAExecutor
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


def _queue_stats(connection: sa.Connection, queue: FoundQueue) -> QueueStats | None:
    try:
        with connection.begin():
            return queue.core(connection).stats(SAExecutor(connection))
    except QueueTableMissing:
        return None


def _stats_row(queue: FoundQueue, stats: QueueStats | None) -> dict[str, Any]:
    row: dict[str, Any] = {"queue": queue.name, "layout": queue.layout}
    if stats is None:
        return {**row, "error": "its tables do not exist in this database"}
    age = stats.oldest_ready_age
    return {
        **row,
        **stats.as_dict(),
        "oldest_ready_age": None if age is None else age.total_seconds(),
        "capacity": stats.capacity,
        "occupancy": stats.occupancy,
    }


def _format_seconds(seconds: float | None) -> str:
    return format_age(None if seconds is None else dt.timedelta(seconds=seconds))


STATS_COLUMNS = (
    "queue", "layout", "ready", "scheduled", "leased", "expired", "done", "failed",
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
        _format_seconds(row["oldest_ready_age"]),
        "-" if row["capacity"] is None else f"{row['capacity']:,}",
        "-" if occupancy is None else f"{occupancy:.1%}",
    ]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the first two left-aligned, the rest right."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join(line(r) for r in [headers, *rows])


def _run_stats(args: argparse.Namespace) -> int:
    url = url_of(args)
    if args.modules:
        import_modules(args.modules, args.verbosity)
    engine = engine_for(url)
    try:
        with engine.connect() as connection:
            queues = declared(queue_classes()) if args.modules else discover(connection)
            rows = [_stats_row(q, _queue_stats(connection, q)) for q in queues]
    finally:
        engine.dispose()
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
