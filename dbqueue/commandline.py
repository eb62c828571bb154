"""Pieces every front end's command line shares (``manage.py runqueueworker``, the
``dbqueue`` command): argument types, the archive job's arguments and where dbqueue's logs go."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from datetime import timedelta

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


def log_to_stderr(level: int | str) -> None:
    """Send the ``dbqueue`` logs at ``level`` and above to stderr, with the thread's name
    (a worker's threads each log their batches). Calling it again only changes the level."""
    logger = logging.getLogger("dbqueue")
    logger.setLevel(level)
    if not any(getattr(h, "_dbqueue_stderr", False) for h in logger.handlers):
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s")
        )
        stream._dbqueue_stderr = True  # type: ignore[attr-defined]
        logger.addHandler(stream)
