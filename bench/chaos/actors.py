"""The chaos run's processes: ``python -m bench.chaos.actors <role> <layout> <log> ...``, with
the DSN in the environment (``DBQUEUE_BENCH_DSN``, off the command line).

Each writes what it saw to its own log, one line per event, flushed at once, so a SIGKILL
loses nothing already written:

* ``producer``: pushes messages ``<producer>:<n>`` one by one (autocommit). A push that
  returned logs ``+key``. On :class:`~dbqueue.QueueUnavailable` it waits, reconnects, and
  pushes the same key again if the message is known not stored, else logs ``?key`` (its
  outcome is unknown: it may or may not be in the queue) and goes on with the next key.
* ``worker``: a :class:`~dbqueue.worker.Worker` whose handler logs ``key`` per delivery.
* ``transactional``: pops in ``transactional`` mode and records each key in the table
  ``chaos_done`` in the same transaction: a delivery is recorded exactly when it is consumed.
  A transaction PostgreSQL refuses to serialize (the database's default isolation level is
  REPEATABLE READ for a while: :class:`~dbqueue.SnapshotTooOld`) is rolled back and run again,
  as an application at that level must; its log has a line ``!<error>`` for each.

Every role stops when the file ``<log>.stop`` exists (a worker: on SIGTERM too).
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import psycopg

from bench.env import child_dsn
from dbqueue import (
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    QueueUnavailable,
    SnapshotTooOld,
    get_dialect,
)
from dbqueue.drivers.psycopg import PsycopgExecutor
from dbqueue.ring import RingQueue
from dbqueue.split import SplitQueue
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

FIELDS = (Field("key", FieldKind.TEXT, max_length=40),)
#: Short leases, so that a killed or stopped worker's items come back within the run.
LEASE = dt.timedelta(seconds=3)
RING_CAPACITY = 4096
BATCH = 20


def spec(layout: str) -> QueueSpec:
    """The queue of ``layout`` ("split", "ring", or "tx": a split queue consumed
    transactionally)."""
    options = QueueOptions(lease=LEASE, max_attempts=1000)
    if layout == "ring":
        options = QueueOptions(
            lease=LEASE, max_attempts=1000, capacity=RING_CAPACITY,
            push_timeout=dt.timedelta(seconds=30),
        )  # fmt: skip
    return QueueSpec(f"chaos_{layout}", FIELDS, options)


def queue(layout: str) -> SplitQueue | RingQueue:
    dialect = get_dialect("postgresql")
    return (
        RingQueue(spec(layout), dialect) if layout == "ring" else SplitQueue(spec(layout), dialect)
    )


def _log(path: str) -> TextIO:
    return open(path, "a", buffering=1, encoding="utf-8")


def _stopped(log: str) -> bool:
    return Path(log + ".stop").exists()


def _connect(dsn: str) -> psycopg.Connection[Any]:
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=2)
        except psycopg.OperationalError:
            time.sleep(0.2)


def producer(dsn: str, layout: str, log: str, name: str) -> None:
    q, out = queue(layout), _log(log)
    conn = _connect(dsn)
    n = 0
    while not _stopped(log):
        key = f"{name}:{n}"
        try:
            q.push(PsycopgExecutor(conn), {"key": key})
        except QueueUnavailable as exc:
            if exc.stored is None:
                out.write(f"?{key}\n")
                n += 1
            conn.close()
            time.sleep(0.2)
            conn = _connect(dsn)
            continue
        out.write(f"+{key}\n")
        n += 1


def worker(dsn: str, layout: str, log: str) -> None:
    out = _log(log)

    def handle(m: Any) -> None:
        out.write(f"{m.payload['key']}\n")

    binding = ExecutorQueue(
        queue(layout),
        lambda: PsycopgExecutor(psycopg.connect(dsn, autocommit=True, connect_timeout=2)),
        listen=lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=2),
    )
    w = Worker([Consumer(binding, handle, batch_size=BATCH)], rescue_every=1.0)
    w.run()


def transactional(dsn: str, layout: str, log: str) -> None:
    q, out = queue(layout), _log(log)
    conn: psycopg.Connection[Any] | None = None
    while not _stopped(log):
        try:
            conn = conn or psycopg.connect(dsn, connect_timeout=2)
            with conn.transaction():
                got = q.pop_batch(PsycopgExecutor(conn), BATCH, mode="transactional")
                for m in got:
                    conn.execute("INSERT INTO chaos_done (key) VALUES (%s)", [m.payload["key"]])
            if not got:
                time.sleep(0.05)
        except (SnapshotTooOld, psycopg.errors.SerializationFailure) as exc:
            out.write(f"!{type(exc).__name__}\n")  # rolled back: run it again
        except (QueueUnavailable, psycopg.OperationalError):
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.2)


def main(argv: list[str]) -> None:
    role, layout, log, *rest = argv
    dsn = child_dsn()
    if role == "producer":
        producer(dsn, layout, log, rest[0])
    elif role == "worker":
        worker(dsn, layout, log)
    else:
        transactional(dsn, layout, log)


if __name__ == "__main__":
    main(sys.argv[1:])
