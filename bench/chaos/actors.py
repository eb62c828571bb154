"""The chaos run's processes: ``python -m bench.chaos.actors <role> <layout> <log> ...``, with
the DSN in the environment (``DBQUEUE_BENCH_DSN``, off the command line).

Each writes what it saw to its own log, one line per event, flushed at once, so a SIGKILL
loses nothing already written:

* ``producer``: pushes messages ``<producer>:<n>`` one by one (autocommit). A push that
  returned logs ``+key``. On :class:`~dbqueue.QueueUnavailable` it waits, reconnects, and
  pushes the same key again if the message is known not stored, else logs ``?key`` (its
  outcome is unknown: it may or may not be in the queue) and goes on with the next key.
* ``worker``: a :class:`~dbqueue.worker.Worker` whose handler logs ``key`` per delivery; each
  compaction its maintenance thread runs (due from ``MIN_GROWTH``) is a line of
  ``<log>.compactions``.
* ``transactional``: pops in ``transactional`` mode and records each key in the table
  ``chaos_done`` in the same transaction: a delivery is recorded exactly when it is consumed.
  A transaction PostgreSQL refuses to serialize (the database's default isolation level is
  REPEATABLE READ for a while: :class:`~dbqueue.SnapshotTooOld`) is rolled back and run again,
  as an application at that level must; its log has a line ``!<error>`` for each.
* ``dumper`` (layout ``all``; then the paths of ``pg_dump`` and ``pg_restore`` of the server's
  release, :func:`bench.pgtools.pg_program`): ``pg_dump -Fc`` of the database every
  ``DUMP_EVERY`` seconds, each dump checked at once (:mod:`bench.chaos.check`, "the dumps":
  every message pushed before it started and not taken before its snapshot is in it); a JSON
  line per dump.

Every role stops when the file ``<log>.stop`` exists (a worker: on SIGTERM too).
"""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import psycopg

from bench.chaos.check import Outstanding, copied_rows, dump_line, ring_keys, split_keys
from bench.env import child_dsn, libpq_environ
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
from dbqueue.upkeep import compaction
from dbqueue.worker import Consumer, Worker
from dbqueue.worker_queue import ExecutorQueue

FIELDS = (Field("key", FieldKind.TEXT, max_length=40),)
#: Short leases, so that a killed or stopped worker's items come back within the run.
LEASE = dt.timedelta(seconds=3)
RING_CAPACITY = 4096
BATCH = 20
#: Seconds between two dumps of the dumper; and its sessions' application_name, which the
#: repeatable_read fault spares (bench.chaos.__main__).
DUMP_EVERY = 2.0
DUMP_APPLICATION = "pg_dump"
#: Where a worker writes a line per compaction its maintenance thread ran: ``<log>`` + this.
COMPACTIONS_SUFFIX = ".compactions"
#: The growth that makes a compaction due in the workers (the default 4 MiB: a compaction
#: every minute or two here), so that compactions meet the faults and the dumps.
MIN_GROWTH = 256 * 1024


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


def _log_compactions(log: str) -> None:
    """Write the worker's compactions (its maintenance thread's INFO lines) to
    ``<log>.compactions``, a line each; its warnings still go to stderr."""
    logger = logging.getLogger("dbqueue.worker")
    logger.setLevel(logging.INFO)
    compactions = logging.FileHandler(log + COMPACTIONS_SUFFIX, encoding="utf-8")
    compactions.setLevel(logging.INFO)
    compactions.addFilter(lambda record: "compacted," in record.getMessage())
    warnings = logging.StreamHandler()
    warnings.setLevel(logging.WARNING)
    logger.addHandler(compactions)
    logger.addHandler(warnings)


def worker(dsn: str, layout: str, log: str) -> None:
    out = _log(log)
    _log_compactions(log)
    compaction.MIN_GROWTH = MIN_GROWTH

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


#: Whether a pg_dump session holds a lock on a table of the run's own (a filler's, a queue's):
#: it locks them after the first query of its transaction, which took its snapshot.
_DUMP_LOCKED = (
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
    "JOIN pg_class c ON c.oid = l.relation WHERE a.application_name = %s "
    "AND a.pid <> pg_backend_pid() AND a.datname = current_database() "
    "AND c.relnamespace = 'public'::regnamespace)"
)


def _snapshot_taken(dsn: str, proc: subprocess.Popen[str]) -> bool:
    """Wait until the pg_dump of ``proc`` has taken its snapshot (see ``_DUMP_LOCKED``); False
    if it ended first, or the server could not tell (restarting)."""
    try:
        with psycopg.connect(
            dsn, autocommit=True, connect_timeout=2, application_name=DUMP_APPLICATION
        ) as conn:
            while proc.poll() is None:
                row = conn.execute(_DUMP_LOCKED, [DUMP_APPLICATION]).fetchone()
                if row is not None and row[0]:
                    return True
                time.sleep(0.002)
    except psycopg.Error:
        pass
    return False


def dumper(dsn: str, log: str, pg_dump: str, pg_restore: str) -> None:
    out, logs = _log(log), Path(log).parent
    outstanding = Outstanding(logs)
    path = logs / "chaos.pgdump"
    split, ring, tx = spec("split"), spec("ring"), spec("tx")
    tables = [split.table, split.meta_table, ring.table, ring.failed_table, tx.table]
    tables += [tx.meta_table, "chaos_done"]
    index = 0
    while not _stopped(log):
        outstanding.read_pushes()  # returned before pg_dump starts
        required = {queue: set(keys) for queue, keys in outstanding.keys.items()}
        proc = subprocess.Popen(
            [pg_dump, "-Fc", "-f", str(path)], env=libpq_environ(dsn),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # What the workers took before its snapshot is in their logs before its first lock on
        # a table of ours (a key is logged before its ack): read there, or else after its end.
        early = _snapshot_taken(dsn, proc)
        taken = outstanding.read_deliveries() if early else {}
        _, errors = proc.communicate(timeout=600)
        if not early:
            taken = outstanding.read_deliveries()
        for queue, keys in taken.items():
            required[queue] = required.get(queue, set()) - keys
        if proc.returncode != 0:  # the server crash-restarted under it
            out.write(dump_line(index, None, error=errors.strip()[-300:]) + "\n")
        else:
            data = subprocess.run(
                [pg_restore, "--data-only", "-f", "-", *(f"--table={t}" for t in tables),
                 str(path)],
                capture_output=True, text=True, timeout=600, check=True,
            ).stdout  # fmt: skip
            rows = copied_rows(data)
            finished = {str(row["key"]) for row in rows.get("chaos_done", [])}
            held = {
                "split": split_keys(rows, split.table, split.meta_table),
                "ring": ring_keys(rows, ring.table, ring.failed_table),
                "tx": split_keys(rows, tx.table, tx.meta_table) | finished,
            }
            required = {queue: required.get(queue, set()) for queue in held}
            out.write(dump_line(index, required, held, early=early) + "\n")
            outstanding.taken("tx", finished)  # consumed for good
        index += 1
        time.sleep(DUMP_EVERY)


def main(argv: list[str]) -> None:
    role, layout, log, *rest = argv
    dsn = child_dsn()
    if role == "producer":
        producer(dsn, layout, log, rest[0])
    elif role == "worker":
        worker(dsn, layout, log)
    elif role == "dumper":
        dumper(dsn, log, rest[0], rest[1])
    else:
        transactional(dsn, layout, log)


if __name__ == "__main__":
    main(sys.argv[1:])
