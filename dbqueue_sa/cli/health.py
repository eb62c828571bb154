"""``dbqueue health``: exit 0 if every queue's oldest ready item is young enough (and the
worker's health file fresh, if named), 1 with a line per problem otherwise, 2 for bad usage.

The SQLAlchemy front keeps no heartbeat rows: the worker's liveness is its health file
(``dbqueue worker --health-file PATH``), checked on the host or in the container that runs
it."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from dbqueue.commandline import health_arguments, positive_float
from dbqueue.health import (
    MAX_FILE_AGE,
    UNHEALTHY,
    QueueHealth,
    health_file_problem,
    health_json,
    problems,
)
from dbqueue_sa.cli.common import EXIT_OK, Subcommand
from dbqueue_sa.cli.stats import stats_of_queues

MISSING = "its tables do not exist in this database"


def _health_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "modules",
        nargs="*",
        metavar="MODULE",
        help="modules declaring the queue classes to check (default: every queue found in "
        "the database)",
    )
    health_arguments(parser)
    parser.add_argument(
        "--health-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="the file a worker touches (dbqueue worker --health-file): it must exist and be "
        "recent",
    )
    parser.add_argument(
        "--max-heartbeat-age",
        type=positive_float,
        default=MAX_FILE_AGE.total_seconds(),
        metavar="SECONDS",
        help=f"how old the health file may be (default {MAX_FILE_AGE.total_seconds():.0f}; "
        f"the worker touches it every 5 s)",
    )


def _run_health(args: argparse.Namespace) -> int:
    checked = [
        QueueHealth(q.name, error=MISSING)
        if stats is None
        else QueueHealth(q.name, stats["oldest_ready_age"])
        for q, stats in stats_of_queues(args)
    ]
    lines = problems(checked, dt.timedelta(seconds=args.max_age))
    if args.health_file is not None:
        stale = health_file_problem(args.health_file, dt.timedelta(seconds=args.max_heartbeat_age))
        lines += [f"worker: {stale}"] if stale else []
    if not checked:
        lines.append("no queues found" + ("" if args.modules else " in this database"))
    if args.json:
        print(json.dumps(health_json(checked, lines), indent=2))
    elif not lines:
        print(f"healthy: {', '.join(q.name for q in checked)}")
    else:
        print("\n".join(f"unhealthy: {line}" for line in lines))
    return UNHEALTHY if lines else EXIT_OK


SUBCOMMAND = Subcommand(
    "health",
    "exit 0 if the queues' backlogs (and a worker's health file) are within bounds",
    "Exit 0 if every queue's oldest ready item waited less than --max-age (and, with "
    "--health-file, the worker's health file was touched within --max-heartbeat-age); "
    "else print a line per problem and exit 1. For supervisors and probes.",
    _health_arguments,
    _run_health,
)
