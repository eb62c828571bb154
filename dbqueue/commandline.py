"""Pieces every front end's command line shares (``manage.py runqueueworker``, the
``dbqueue`` command): argument types, the archive job's arguments, how queue stats are shown
and where dbqueue's logs go."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from dbqueue.health import MAX_AGE
from dbqueue.message import CancelOutcome
from dbqueue.worker.loop import SUMMARY_EVERY

#: Rows per delete transaction of the archive job (see dbqueue.spark.archive).
ARCHIVE_BATCH_SIZE = 1000
#: Where the archive commands run Spark unless told otherwise: every core of this machine.
DEFAULT_MASTER = "local[*]"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(?:\d+[smhdw])+")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")


def positive_int(value: str) -> int:
    """An argparse type: an int of at least 1."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def positive_float(value: str) -> float:
    """An argparse type: a finite number above 0 (seconds)."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return x


def non_negative_float(value: str) -> float:
    """An argparse type: a finite number, 0 or more (seconds; 0 usually turns a thing off)."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 <= x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number, got {value}")
    return x


def port(value: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {n}")
    return n


def worker_ops_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker options every worker command shares: its summary line, health file and
    metrics port."""
    parser.add_argument(
        "--summary-every",
        type=non_negative_float,
        default=SUMMARY_EVERY,
        metavar="SECONDS",
        help=f"log a summary at INFO every SECONDS: handled, failed, rate, oldest ready item "
        f"(default {SUMMARY_EVERY:.0f}; 0: never). Each batch is logged at DEBUG",
    )
    parser.add_argument(
        "--health-file",
        default=None,
        metavar="PATH",
        help="touch PATH every few seconds while the worker runs, for a liveness probe to "
        "check its age",
    )
    parser.add_argument(
        "--metrics-port",
        type=port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on PORT while the worker runs (needs the metrics "
        "extra: pip install 'dbqueue[metrics]')",
    )


def health_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both fronts' health commands share: ``--max-age`` and ``--json``."""
    parser.add_argument(
        "--max-age",
        type=positive_float,
        default=MAX_AGE.total_seconds(),
        metavar="SECONDS",
        help=f"the oldest ready item may have waited this long (default "
        f"{MAX_AGE.total_seconds():.0f})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")


def duration(value: str) -> timedelta:
    """An argparse type: a positive duration, whole numbers each followed by a unit, ``s``,
    ``m``, ``h``, ``d`` or ``w`` (``90s``, ``30m``, ``12h``, ``7d``, ``2w``; ``1d12h`` adds up)."""
    text = value.strip().lower()
    if not _DURATION.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a duration: write a whole number followed by s, m, h, d or w "
            f"(seconds, minutes, hours, days, weeks), e.g. 90s, 30m, 12h, 7d, 2w"
        )
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(text))
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"the duration must be more than 0, got {value!r}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"the duration {value!r} is too long") from None


def archive_arguments(parser: argparse.ArgumentParser) -> None:
    """The archive job's options, the same in ``dbqueue archive`` and ``manage.py
    archivequeue`` (the queues and the database are each front end's own)."""
    parser.add_argument(
        "--older-than",
        required=True,
        type=duration,
        metavar="DURATION",
        help="archive done and failed items that finished longer ago than this, by the "
        "database's clock: 90s, 30m, 12h, 7d, 2w",
    )
    parser.add_argument(
        "--to",
        required=True,
        metavar="PATH",
        help="the archive folder: a local path or any URI Spark writes to (hdfs://, s3a://...)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=ARCHIVE_BATCH_SIZE,
        metavar="N",
        help=f"rows deleted per transaction (default {ARCHIVE_BATCH_SIZE:,})",
    )
    parser.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        help=f"the Spark master (default {DEFAULT_MASTER}: every core of this machine)",
    )


def stats_json(stats: Mapping[str, Any]) -> dict[str, Any]:
    """A queue's ``stats()`` as JSON values: the same keys for a split queue and a ring (a split
    queue's ``capacity`` and ``occupancy`` are null), ``oldest_ready_age`` in seconds."""
    age = stats["oldest_ready_age"]
    return {
        "capacity": None,
        "occupancy": None,
        **stats,
        "oldest_ready_age": None if age is None else age.total_seconds(),
    }


def spilled_text(row: Mapping[str, Any]) -> str:
    """A stats table's ``spilled`` cell: a ring's spilled messages (counted in ready too), "-"
    for a split queue, which has none."""
    spilled = row.get("spilled")
    return "-" if spilled is None else f"{spilled:,}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 2) -> str:
    """Columns padded to their widest cell; the first ``left`` (names) left-aligned, the rest
    (numbers) right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join(line(r) for r in [headers, *rows])


def log_to_stderr(level: int | str) -> None:
    """Send the ``dbqueue`` logs at ``level`` and above to stderr, with the thread's name
    (a worker's threads each log their batches). Calling it again only changes the level, and
    so does a ``dbqueue`` logger that already has handlers (Django's ``LOGGING`` set them):
    its lines are not printed twice."""
    logger = logging.getLogger("dbqueue")
    logger.setLevel(level)
    if not logger.handlers:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s")
        )
        stream._dbqueue_stderr = True  # type: ignore[attr-defined]
        logger.addHandler(stream)


#: What each outcome of a cancel means, after the item's id in the commands' output.
CANCEL_OUTCOMES = {
    CancelOutcome.CANCELLED: "cancelled: it will never run",
    CancelOutcome.REQUESTED: "leased: cancellation requested (recorded when its worker settles it)",
    CancelOutcome.ALREADY: "already cancelled, or its cancellation requested",
    CancelOutcome.FINISHED: "already finished (done or failed): left as it was",
    CancelOutcome.MISSING: "no such item",
}


def cancel_outcome_line(item_id: int, outcome: CancelOutcome) -> str:
    """The line both fronts' cancel commands print for one item."""
    return f"{item_id}: {CANCEL_OUTCOMES[outcome]}"
