"""Health checks for supervisors and probes (``manage.py queuehealth``, ``dbqueue health``):
is a worker alive, and is every queue's backlog within bounds? Each front gathers what it
knows of a queue into a :class:`QueueHealth`; :func:`problems` says what is wrong, a line per
problem, and the command exits 0 when there is none, 1 otherwise."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbqueue.message import format_age

#: Exit status of a health command: healthy, unhealthy (bad usage exits 2, as argparse does).
HEALTHY, UNHEALTHY = 0, 1
#: How old a queue's oldest ready item may be unless told otherwise: five minutes.
MAX_AGE = dt.timedelta(minutes=5)
#: How old a worker's health file may be unless told otherwise (it is touched every 5 s).
MAX_FILE_AGE = dt.timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """What a health check found of one queue."""

    #: How the command names the queue.
    name: str
    #: The age of its oldest ready item (None: none ready).
    oldest_ready_age: dt.timedelta | None = None
    #: Whether a running worker serving it sent a heartbeat recently; None where the front
    #: has no heartbeats to read.
    worker_alive: bool | None = None
    #: When a running worker serving it was last heard of (None: never), for the message.
    last_heartbeat: dt.datetime | None = None
    #: Why nothing could be read (its tables missing, the database unreachable); None if all
    #: went well.
    error: str | None = None


def problems(queues: Sequence[QueueHealth], max_age: dt.timedelta) -> list[str]:
    """A line per problem of ``queues``: an error, no worker alive, a backlog older than
    ``max_age``; none when all is well."""
    found: list[str] = []
    for q in queues:
        if q.error is not None:
            found.append(f"{q.name}: {q.error}")
            continue
        if q.worker_alive is False:
            last = "never" if q.last_heartbeat is None else f"last at {q.last_heartbeat:%F %T} UTC"
            found.append(f"{q.name}: no running worker sent a recent heartbeat ({last})")
        age = q.oldest_ready_age
        if age is not None and age > max_age:
            found.append(
                f"{q.name}: the oldest ready item has waited {format_age(age)}, more than "
                f"{format_age(max_age)}"
            )
    return found


def health_file_problem(path: Path, max_age: dt.timedelta) -> str | None:
    """What is wrong with a worker's health file (``Worker(health_file=...)``): missing, or
    not touched within ``max_age`` (the worker touches it every few seconds); None if fresh."""
    try:
        touched = path.stat().st_mtime
    except OSError as exc:
        return f"the worker's health file {path} cannot be read ({exc.strerror})"
    age = dt.timedelta(seconds=max(time.time() - touched, 0))
    if age > max_age:
        return (
            f"the worker's health file {path} was last touched {format_age(age)} ago, more "
            f"than {format_age(max_age)}"
        )
    return None


def health_json(queues: Sequence[QueueHealth], found: Sequence[str]) -> dict[str, Any]:
    """The health report as JSON values: ``healthy``, ``problems`` and a row per queue (ages
    in seconds, times in ISO 8601)."""
    rows = []
    for q in queues:
        age, last = q.oldest_ready_age, q.last_heartbeat
        rows.append(
            {
                "queue": q.name,
                "oldest_ready_age": None if age is None else age.total_seconds(),
                "worker_alive": q.worker_alive,
                "last_heartbeat": None if last is None else last.isoformat(),
                "error": q.error,
            }
        )
    return {"healthy": not found, "problems": list(found), "queues": rows}
